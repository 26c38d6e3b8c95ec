/** The memory budget's arithmetic (issue 13): accounts, the pause and resume marks, the refusal text. */
import { describe, expect, it } from 'vitest';
import { MemoryBudget } from '../../../../src/server/memory/memory-budget.js';

describe('memory budget', () => {
  it('sums what every account holds, by holder, and gives it back when an account closes', () => {
    const budget = new MemoryBudget(1000);
    const a = budget.account('unacked');
    const b = budget.account('unacked');
    const send = budget.account('send');
    a.set(100);
    b.add(50);
    send.add(30);
    send.add(-10);
    expect(budget.used).toBe(170);
    expect(budget.heldBy('unacked')).toBe(150);
    expect(budget.heldBy('send')).toBe(20);
    a.close();
    a.set(500); // closed: ignored
    send.add(-1000); // never below zero
    expect(budget.used).toBe(50);
    expect(send.bytes).toBe(0);
  });

  it('is pressured from 90 % until it falls below 80 %, telling listeners once per change', () => {
    const budget = new MemoryBudget(1000);
    const changes: boolean[] = [];
    const off = budget.onPressureChange((p) => changes.push(p));
    const out = budget.account('output');
    out.set(899);
    expect(budget.pressured).toBe(false);
    out.set(900);
    expect(budget.pressured).toBe(true);
    out.set(950);
    out.set(800); // between the marks: still pressured (no flapping)
    expect(budget.pressured).toBe(true);
    out.set(799);
    expect(budget.pressured).toBe(false);
    out.set(850);
    expect(budget.pressured).toBe(false);
    expect(changes).toEqual([true, false]);
    off();
    out.set(1000);
    expect(changes).toEqual([true, false]);
  });

  it('refuses new sessions and processes only at 100 %, naming the budget and what holds it, largest first', () => {
    const budget = new MemoryBudget(4 * 1024 * 1024);
    const unacked = budget.account('unacked');
    const input = budget.account('input');
    unacked.set(3 * 1024 * 1024);
    input.set(1024 * 1024 - 1);
    expect(budget.full).toBe(false);
    expect(budget.refusal('process')).toBeNull();
    input.add(1);
    expect(budget.full).toBe(true);
    expect(budget.refusal('process')).toBe(
      'server memory budget exhausted: 4.0MiB held of the 4.0MiB budget (--memory-budget): output clients have not acknowledged 3.0MiB, ' +
        'requests and input queued for children 1.0MiB; no new process until clients read their output or sessions end',
    );
    expect(budget.refusal('session')).toMatch(/no new session until/);
  });
});
