/** The fs data budget's fair shares (issue 22, item 7): one session at its share never holds up another's read. */
import { describe, expect, it } from 'vitest';
import { ByteBudget } from '../../../../src/server/fs/budget.js';

describe('byte budget shares', () => {
  it('keeps an owner within its share and grants another owner past its waiting requests', async () => {
    const budget = new ByteBudget(32, undefined, 16);
    const a = {};
    const b = {};
    const first = await budget.acquire(16, undefined, a);
    let secondGranted = false;
    const second = budget.acquire(16, undefined, a).then((release) => ((secondGranted = true), release));
    const small = await budget.acquire(4, undefined, b); // granted although a's request came first
    expect(secondGranted).toBe(false);
    expect(budget.heldBy(a)).toBe(16);
    expect(budget.heldBy(b)).toBe(4);
    first();
    (await second)();
    expect(secondGranted).toBe(true);
    small();
    expect(budget.inUse).toBe(0);
  });

  it('lets a large request that waits for the total go first: small ones of others do not overtake it forever', async () => {
    const budget = new ByteBudget(32, undefined, 16);
    const [a, b, c] = [{}, {}, {}];
    const heldA = await budget.acquire(16, undefined, a);
    const heldB = await budget.acquire(10, undefined, b);
    const order: string[] = [];
    const large = budget.acquire(16, undefined, c).then((r) => (order.push('large'), r));
    const small = budget.acquire(2, undefined, {}).then((r) => (order.push('small'), r));
    heldA();
    (await large)();
    (await small)();
    heldB();
    expect(order).toEqual(['large', 'small']);
  });
});
