/**
 * Messages being received, held to the memory budget (server/receive-meter.ts), without
 * sockets: the meter counts what arrives, the guard stops reading a message that outgrows
 * its session's share while the budget is pressed, reads again once that is no longer so,
 * and closes (1013) a connection left paused for its stall time. Fake timers.
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MemoryBudget } from '../../../../src/server/memory/memory-budget.js';
import { ReceiveGuard, ReceiveMeter, type ReceivingLink } from '../../../../src/server/connection/receive-meter.js';
import type { Session } from '../../../../src/server/session/session.js';

afterEach(() => vi.useRealTimers());

function setup(options: { overShare: boolean; shareBytes: number }) {
  const socket = new EventEmitter();
  const budget = new MemoryBudget(1000); // pressed from 900
  const filler = budget.account('unacked');
  let unheld: () => void = () => {};
  const session = {
    overShare: options.overShare,
    shareBytes: options.shareBytes,
    whenUnheld: () => new Promise<void>((resolve) => (unheld = resolve)),
  };
  const events: string[] = [];
  const link: ReceivingLink = {
    closed: false,
    session: session as unknown as Session,
    whenClosed: new Promise<void>(() => {}),
    pause: () => events.push('pause'),
    resume: () => events.push('resume'),
    close: (reason) => events.push(`close: ${reason}`),
  };
  let guard: ReceiveGuard;
  const meter = new ReceiveMeter(socket as unknown as Socket, () => guard.check());
  guard = new ReceiveGuard(meter, budget, link, 30_000);
  const receive = (bytes: number) => socket.emit('data', Buffer.alloc(bytes));
  return { budget, filler, session, events, meter, receive, unheld: () => unheld() };
}

describe('ReceiveGuard', () => {
  it('counts what arrives until the message is whole', () => {
    const { meter, receive } = setup({ overShare: false, shareBytes: 100 });
    receive(300);
    receive(200);
    expect(meter.held).toBe(500);
    meter.messageDone();
    expect(meter.held).toBe(0);
  });

  it('lets a message in while the budget is not pressed, or while it fits its session\'s share', () => {
    const { filler, events, receive } = setup({ overShare: true, shareBytes: 400 });
    receive(600); // not pressed
    expect(events).toEqual([]);
    const second = setup({ overShare: true, shareBytes: 400 });
    second.filler.set(950);
    second.receive(300); // pressed, but within its share
    expect(second.events).toEqual([]);
    expect(filler.bytes).toBe(0);
  });

  it('stops reading a message past its session\'s share while pressed, and reads again once the session is no longer held back', async () => {
    const { filler, session, events, receive, unheld } = setup({ overShare: true, shareBytes: 400 });
    filler.set(950);
    receive(500);
    expect(events).toEqual(['pause']);
    receive(100); // already paused: no second pause
    expect(events).toEqual(['pause']);
    session.overShare = false;
    unheld();
    await vi.waitFor(() => expect(events).toEqual(['pause', 'resume']));
  });

  it('closes a connection left paused mid-message for its stall time (1013, saying why)', async () => {
    vi.useFakeTimers();
    const { filler, events, receive } = setup({ overShare: true, shareBytes: 400 });
    filler.set(950);
    receive(500);
    expect(events).toEqual(['pause']);
    await vi.advanceTimersByTimeAsync(29_999);
    expect(events).toEqual(['pause']);
    await vi.advanceTimersByTimeAsync(1);
    expect(events[1]).toMatch(/^close: the server's memory budget is pressed and this connection's session is over its fair share: a message of 500B was left unread for 30 s; try again later$/);
  });
});
