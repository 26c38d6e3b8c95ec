/**
 * The relay's gate on upstream session opens (relay/open-gate.ts): at most `limit` at once,
 * the rest in arrival order; a waiter that leaves is skipped and frees nothing twice.
 */
import { describe, expect, it } from 'vitest';
import { OpenGate } from '../../../src/relay/open-gate.js';

describe('OpenGate', () => {
  it('lets `limit` through at once and the rest in order, one per release', async () => {
    const gate = new OpenGate(2);
    const order: number[] = [];
    const releases: Array<() => void> = [];
    const turns = [0, 1, 2, 3].map((i) =>
      gate.acquire().then((release) => {
        order.push(i);
        releases[i] = release;
      }),
    );
    await Promise.all(turns.slice(0, 2));
    expect(order).toEqual([0, 1]);
    expect({ inFlight: gate.inFlight, queued: gate.queued }).toEqual({ inFlight: 2, queued: 2 });
    releases[1]!();
    releases[1]!(); // twice: frees one slot only
    await turns[2];
    expect(order).toEqual([0, 1, 2]);
    expect({ inFlight: gate.inFlight, queued: gate.queued }).toEqual({ inFlight: 2, queued: 1 });
    releases[0]!();
    await turns[3];
    releases[2]!();
    releases[3]!();
    expect({ inFlight: gate.inFlight, queued: gate.queued }).toEqual({ inFlight: 0, queued: 0 });
  });

  it('drops an aborted waiter: it rejects with the reason and the next in line gets its turn', async () => {
    const gate = new OpenGate(1);
    const first = await gate.acquire();
    const leaving = new AbortController();
    const left = gate.acquire(leaving.signal);
    const next = gate.acquire();
    leaving.abort(new Error('closed'));
    await expect(left).rejects.toThrow('closed');
    expect(gate.queued).toBe(1);
    first();
    const release = await next;
    expect(gate.inFlight).toBe(1);
    release();
    await expect(gate.acquire(AbortSignal.abort(new Error('already')))).rejects.toThrow('already');
    expect(() => new OpenGate(0)).toThrow(RangeError);
  });
});
