/**
 * The fair-share policy of the memory budget's output (issue 22), without sockets: which
 * sessions' children pause when the budget is pressed, and the bookkeeping that tells a
 * session when its decision changes.
 */
import { describe, expect, it } from 'vitest';
import { fairShareBytes, holdText, OutputShares, outputHold, shareOwner } from '../../../../src/server/memory/fair-share.js';
import { MemoryBudget } from '../../../../src/server/memory/memory-budget.js';

const MiB = 1024 * 1024;

describe('fair-share policy', () => {
  it('splits the pool equally between holding tokens, then between each token\'s holding sessions', () => {
    expect(fairShareBytes(800, 1, 1)).toBe(800);
    expect(fairShareBytes(800, 2, 1)).toBe(400);
    // A token with four sessions gets no more than a token with one: each of its sessions a quarter of its half.
    expect(fairShareBytes(800, 2, 4)).toBe(100);
    expect(fairShareBytes(800, 0, 0)).toBe(800); // nobody holds yet: the whole pool
  });

  it('holds nobody back while the budget is not pressured, whatever they hold', () => {
    expect(outputHold({ pressured: false, full: true, heldBytes: 10 * MiB, shareBytes: 1, reserveBytes: 0 })).toBeNull();
  });

  it('under pressure pauses a session at or over its share, and keeps reading one below it', () => {
    const base = { pressured: true, full: false, shareBytes: 400, reserveBytes: 50 };
    expect(outputHold({ ...base, heldBytes: 400 })).toBe('overShare');
    expect(outputHold({ ...base, heldBytes: 900 })).toBe('overShare');
    expect(outputHold({ ...base, heldBytes: 399 })).toBeNull();
    expect(outputHold({ ...base, heldBytes: 0 })).toBeNull();
  });

  it('with the budget full keeps reading a session under its share only within its slice of the reserve', () => {
    const base = { pressured: true, full: true, shareBytes: 400, reserveBytes: 50 };
    expect(outputHold({ ...base, heldBytes: 0 })).toBeNull(); // an echo's few bytes still arrive
    expect(outputHold({ ...base, heldBytes: 49 })).toBeNull();
    expect(outputHold({ ...base, heldBytes: 50 })).toBe('budgetFull');
    expect(outputHold({ ...base, heldBytes: 500 })).toBe('overShare');
  });

  it('says why in session/list words', () => {
    expect(holdText('overShare', 300 * MiB, 200 * MiB)).toBe('paused: over fair share (300MiB of 200MiB)');
    expect(holdText('budgetFull', MiB, 0)).toBe('paused: memory budget full (1.0MiB held)');
  });
});

describe('OutputShares', () => {
  /** A budget of 1000 bytes (pause at 900, resume below 800) and a way to fill it from outside the output. */
  function setup() {
    const budget = new MemoryBudget(1000);
    const other = budget.account('send');
    const shares = new OutputShares(budget);
    const changes: string[] = [];
    const session = (name: string, owner = 'tok') => {
      const share = shares.register(owner, () => changes.push(`${name}:${share.hold ?? 'read'}`));
      return share;
    };
    return { budget, other, shares, changes, session };
  }

  it('pauses the hoarder, not the newcomer, when the budget is pressed; both resume when it is not', () => {
    const { budget, shares, changes, session } = setup();
    const hoarder = session('hoarder');
    const newcomer = session('newcomer');
    const hoarderBytes = budget.account('unacked');
    // The hoarder's output fills the budget to its pause mark; it reports it to its share.
    hoarderBytes.set(900);
    hoarder.add(900);
    expect(budget.pressured).toBe(true);
    expect(hoarder.hold).toBe('overShare'); // alone it has the whole pool (800): 900 is over
    expect(newcomer.hold).toBeNull();
    // The newcomer's echo: a few bytes, still read (its share is half the pool).
    newcomer.add(3);
    expect(newcomer.hold).toBeNull();
    expect(newcomer.shareBytes).toBe(400);
    expect(hoarder.shareBytes).toBe(400);
    expect(hoarder.holdText).toBe('paused: over fair share (900B of 400B)');
    expect(shares.pausedNow()).toEqual({ overShare: 1, budgetFull: 0 });
    expect(shares.counters.overShare).toBe(1);
    // The hoarder acknowledges: below the resume mark nobody is held back, and it is told.
    hoarder.add(-500);
    hoarderBytes.set(400);
    expect(budget.pressured).toBe(false);
    expect(hoarder.hold).toBeNull();
    expect(changes).toEqual(['hoarder:overShare', 'hoarder:read']);
  });

  it('gives a token no more share for opening more sessions, and counts sessions per token', () => {
    const { budget, shares, session } = setup();
    const many = [session('a1', 'a'), session('a2', 'a'), session('a3', 'a'), session('a4', 'a')];
    const single = session('b', 'b');
    for (const s of many) s.add(10);
    single.add(10);
    budget.account('unacked').set(950);
    expect(budget.pressured).toBe(true);
    expect(single.shareBytes).toBe(400); // half the 800-byte pool: one of two tokens
    expect(many[0]!.shareBytes).toBe(100); // a quarter of the other half
    expect(shares.sessionsOf('a')).toBe(4);
    expect(shares.sessionsOf('b')).toBe(1);
    many[0]!.close();
    expect(shares.sessionsOf('a')).toBe(3);
    expect(shareOwner(Buffer.alloc(0))).toBe('none');
    expect(shareOwner(Buffer.from([0xab, 0xcd]))).toBe('abcd');
  });

  it('re-decides every session when another starts holding (its share shrinks) and when the budget fills', () => {
    const { budget, other, changes, session } = setup();
    const out = budget.account('unacked');
    const first = session('first');
    first.add(500);
    out.add(500);
    other.set(400); // the budget is pressed by something else (900 of 1000)
    expect(budget.pressured).toBe(true);
    expect(first.hold).toBeNull(); // 500 of an 800 share
    const second = session('second');
    second.add(1);
    out.add(1); // two holders: shares of 400, and `first` is over its own
    expect(first.hold).toBe('overShare');
    // The budget is spent: `second` keeps within its slice of the last tenth (50), no more.
    other.set(600);
    expect(budget.full).toBe(true);
    expect(second.hold).toBeNull();
    second.add(60);
    out.add(60);
    expect(second.hold).toBe('budgetFull');
    other.set(0); // room again (and below the resume mark)
    expect(second.hold).toBeNull();
    expect(first.hold).toBeNull();
    expect(changes).toEqual(['first:overShare', 'second:budgetFull', 'first:read', 'second:read']);
  });

  it('forgets a closed session: its bytes no longer shrink the others\' shares', () => {
    const { budget, session } = setup();
    const gone = session('gone');
    const stays = session('stays');
    gone.add(100);
    stays.add(100);
    budget.account('send').set(950);
    expect(stays.shareBytes).toBe(400);
    gone.close();
    expect(stays.shareBytes).toBe(800);
    gone.add(100); // ignored after close
    expect(gone.heldBytes).toBe(0);
  });
});

describe('answers weighed against the share (answerRefusal)', () => {
  it('refuses, while the budget is pressed, an answer that would take its session past its share; a session holding nothing gets a small one', () => {
    const budget = new MemoryBudget(100 * MiB); // pool 80 MiB, pause mark 90 MiB
    const elsewhere = budget.account('input');
    const shares = new OutputShares(budget);
    const deaf = shares.register('tok', () => {});
    const victim = shares.register('tok', () => {});
    // Not pressed, and this answer would not press it: nothing is weighed.
    expect(deaf.answerRefusal(11 * MiB)).toBeNull();
    // This one would take the budget to its pause mark: weighed (alone, the whole pool is its share).
    elsewhere.set(85 * MiB);
    expect(deaf.answerRefusal(11 * MiB)).toBeNull();
    // Pressed; the deaf client holds 80 MiB of answers it has not read: the whole pool, its
    // share while it is the only holder. A newcomer would get half of it.
    elsewhere.set(91 * MiB);
    deaf.addOther(80 * MiB);
    expect(deaf.shareBytes).toBe(80 * MiB);
    expect(victim.shareBytes).toBe(40 * MiB);
    expect(victim.answerRefusal(100)).toBeNull();
    expect(victim.answerRefusal(11 * MiB)).toBeNull();
    expect(deaf.answerRefusal(11 * MiB)).toMatch(
      /^server memory budget pressed: an answer of about 11MiB would take this session past its fair share \(80MiB held for it of 80MiB; --memory-budget\)/,
    );
    expect(deaf.answerRefusal(100)).not.toBeNull(); // at its share: even a small one waits for it to read
    expect(shares.refusedAnswers).toBe(2);
    // It reads its answers: below the resume mark nothing is weighed again.
    deaf.addOther(-80 * MiB);
    elsewhere.set(0);
    expect(deaf.answerRefusal(11 * MiB)).toBeNull();
  });
});
