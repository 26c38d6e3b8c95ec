/**
 * A watcher's look for processes started after it attached (src/client/attach/session-poll.ts),
 * with fake timers and no socket: which processes of a `session/watch` snapshot are new; the
 * schedule polls every SESSION_POLL_MS after the last answer, never two at once however
 * slow an answer is, and not at all once stopped (an answer on its way then is dropped);
 * a failure the host calls final stops it, another one is polled past.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AttachedProcess } from '../../../../src/client/attach/attach-wire.js';
import { newProcesses, SESSION_POLL_MS, SessionPoller } from '../../../../src/client/attach/session-poll.js';

const proc = (processId: string): AttachedProcess => ({ processId, argv: ['true'], tty: false, state: 'running', exitCode: null, nextSeq: 1, ackedSeq: 0 });

describe('newProcesses', () => {
  it('returns the processes not known, in order, once each, and knows the snapshot from then on', () => {
    const { added, known } = newProcesses(new Set(['a']), [proc('a'), proc('b'), proc('c'), proc('b')]);
    expect(added.map((p) => p.processId)).toEqual(['b', 'c']);
    expect([...known]).toEqual(['a', 'b', 'c']);
    expect(newProcesses(known, [proc('a'), proc('b'), proc('c')]).added).toEqual([]);
  });

  it('lets go of ids the server no longer lists: the set stays bounded, and an id used again is new', () => {
    const first = newProcesses(new Set(['a', 'b']), [proc('b')]);
    expect(first.added).toEqual([]);
    expect([...first.known]).toEqual(['b']);
    expect(newProcesses(first.known, [proc('a'), proc('b')]).added.map((p) => p.processId)).toEqual(['a']);
  });

  it('ignores entries without a process id', () => {
    const { added, known } = newProcesses(new Set(), [{} as AttachedProcess, null as unknown as AttachedProcess, proc('x')]);
    expect(added.map((p) => p.processId)).toEqual(['x']);
    expect([...known]).toEqual(['x']);
  });
});

describe('SessionPoller', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A host whose polls answer only when the test says (`answer`), counting what is in flight. */
  function controlledHost(failed: (err: unknown) => boolean = () => true) {
    const pending: { resolve: (p: AttachedProcess[]) => void; reject: (e: unknown) => void }[] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    const answers: AttachedProcess[][] = [];
    const host = {
      poll: () =>
        new Promise<AttachedProcess[]>((resolve, reject) => {
          inFlight++;
          maxInFlight = Math.max(maxInFlight, inFlight);
          pending.push({
            resolve: (p) => {
              inFlight--;
              resolve(p);
            },
            reject: (e) => {
              inFlight--;
              reject(e);
            },
          });
        }),
      answered: (p: AttachedProcess[]) => answers.push(p),
      failed,
    };
    return { host, pending, answers, polls: () => pending.length, maxInFlight: () => maxInFlight };
  }

  it('polls every SESSION_POLL_MS after the last answer, never two in flight however long an answer takes', async () => {
    const h = controlledHost();
    const poller = new SessionPoller(h.host);
    poller.start();
    poller.start(); // starting twice changes nothing
    expect(h.polls()).toBe(0);
    await vi.advanceTimersByTimeAsync(SESSION_POLL_MS - 1);
    expect(h.polls()).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(h.polls()).toBe(1);
    expect(poller.inFlight).toBe(true);
    // The answer is slow: ten intervals pass, and no second poll goes out.
    await vi.advanceTimersByTimeAsync(10 * SESSION_POLL_MS);
    expect(h.polls()).toBe(1);
    h.pending[0]!.resolve([proc('a')]);
    await vi.advanceTimersByTimeAsync(0);
    expect(h.answers).toEqual([[proc('a')]]);
    expect(poller.inFlight).toBe(false);
    // The next one an interval after that answer.
    await vi.advanceTimersByTimeAsync(SESSION_POLL_MS - 1);
    expect(h.polls()).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(h.polls()).toBe(2);
    h.pending[1]!.resolve([]);
    await vi.advanceTimersByTimeAsync(SESSION_POLL_MS);
    expect(h.polls()).toBe(3);
    expect(h.maxInFlight()).toBe(1);
    poller.stop();
  });

  it('stops: no poll after stop(), and an answer on its way is dropped', async () => {
    const h = controlledHost();
    const poller = new SessionPoller(h.host);
    poller.start();
    await vi.advanceTimersByTimeAsync(SESSION_POLL_MS);
    expect(h.polls()).toBe(1);
    poller.stop(); // the client closed while a poll was out
    expect(poller.running).toBe(false);
    h.pending[0]!.resolve([proc('late')]);
    await vi.advanceTimersByTimeAsync(20 * SESSION_POLL_MS);
    expect(h.answers).toEqual([]);
    expect(h.polls()).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
    poller.start(); // a stopped poller stays stopped
    await vi.advanceTimersByTimeAsync(20 * SESSION_POLL_MS);
    expect(h.polls()).toBe(1);
  });

  it('stopped between polls: the scheduled one never goes out', async () => {
    const h = controlledHost();
    const poller = new SessionPoller(h.host);
    poller.start();
    await vi.advanceTimersByTimeAsync(SESSION_POLL_MS / 2);
    poller.stop();
    await vi.advanceTimersByTimeAsync(20 * SESSION_POLL_MS);
    expect(h.polls()).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a failure the host says is final stops it; another one is polled past at the next tick', async () => {
    const errors: unknown[] = [];
    const h = controlledHost((err) => {
      errors.push(err);
      return (err as Error).message !== 'final';
    });
    const poller = new SessionPoller(h.host);
    poller.start();
    await vi.advanceTimersByTimeAsync(SESSION_POLL_MS);
    h.pending[0]!.reject(new Error('passing'));
    await vi.advanceTimersByTimeAsync(SESSION_POLL_MS);
    expect(h.polls()).toBe(2);
    expect(poller.running).toBe(true);
    h.pending[1]!.reject(new Error('final'));
    await vi.advanceTimersByTimeAsync(20 * SESSION_POLL_MS);
    expect(h.polls()).toBe(2);
    expect(poller.running).toBe(false);
    expect(errors.map((e) => (e as Error).message)).toEqual(['passing', 'final']);
    expect(h.answers).toEqual([]);
  });
});
