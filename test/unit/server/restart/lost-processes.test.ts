/** LostProcesses (issue #27): which recorded processes a restart could not keep, told to a resuming client that names them. */
import { describe, expect, it } from 'vitest';
import { KEEPER_GONE, LostProcesses, NOT_RECORDED } from '../../../../src/server/restart/lost-processes.js';

describe('LostProcesses', () => {
  it('answers only the lost ids a client names, per session', () => {
    const lost = new LostProcesses();
    lost.add('s1', 'p1', KEEPER_GONE);
    lost.add('s1', 'p2', 'other reason');
    lost.add('s2', 'p3', KEEPER_GONE);
    expect(lost.named('s1', { p1: 4, live: 9 })).toEqual({ p1: KEEPER_GONE });
    expect(lost.named('s1', { p1: 4, p2: 0 })).toEqual({ p1: KEEPER_GONE, p2: 'other reason' });
    // A client that forgot them, or names none, or another session: nothing.
    expect(lost.named('s1', { live: 9 })).toBeUndefined();
    expect(lost.named('s1', undefined)).toBeUndefined();
    expect(lost.named('s1', null)).toBeUndefined();
    expect(lost.named('s3', { p1: 1 })).toBeUndefined();
    expect(lost.named('s2', { p1: 1 })).toBeUndefined();
  });

  it('keeps the first reason, is told again on every resume, and forgets a session that ended', () => {
    const lost = new LostProcesses();
    lost.add('s1', 'p1', 'first');
    lost.add('s1', 'p1', 'second');
    expect(lost.count('s1')).toBe(1);
    expect(lost.named('s1', { p1: 1 })).toEqual({ p1: 'first' });
    expect(lost.named('s1', { p1: 1 })).toEqual({ p1: 'first' });
    expect(lost.of('s1')).toEqual({ p1: 'first' });
    lost.forget('s1');
    expect(lost.of('s1')).toBeUndefined();
    expect(lost.named('s1', { p1: 1 })).toBeUndefined();
    expect(lost.count('s1')).toBe(0);
  });

  it('an id the session has again (started anew since) is not lost', () => {
    const lost = new LostProcesses();
    lost.add('s1', 'p1', KEEPER_GONE);
    lost.add('s1', 'p2', KEEPER_GONE);
    expect(lost.named('s1', { p1: 3, p2: 1 }, (id) => id === 'p1')).toEqual({ p2: KEEPER_GONE });
  });

  it('in a session restored from a record, every other id a client names and the session lacks is lost too (its start was never recorded)', () => {
    const lost = new LostProcesses();
    lost.add('s1', 'p1', KEEPER_GONE);
    expect(lost.named('s1', { p1: 3, live: 1, fresh: 0 }, (id) => id === 'live', true)).toEqual({ p1: KEEPER_GONE, fresh: NOT_RECORDED });
    expect(lost.named('s2', { q: 2 }, () => false, true)).toEqual({ q: NOT_RECORDED });
    // Not restored: an unknown id is not this module's to judge.
    expect(lost.named('s2', { q: 2 })).toBeUndefined();
    expect(Object.keys(lost.named('s2', JSON.parse('{"__proto__": 1}'), () => false, true)!)).toEqual(['__proto__']);
  });

  it('does not take an inherited name for a named process', () => {
    const lost = new LostProcesses();
    lost.add('s1', 'toString', KEEPER_GONE);
    expect(lost.named('s1', {})).toBeUndefined();
  });
});
