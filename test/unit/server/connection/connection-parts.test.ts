// The pure parts of a server connection (src/server/connection/connection.ts coordinates them): the
// request gate's rules and counting, the send buffer against its marks, held-memory
// reporting, read pauses, the heartbeat's excused-ping rule, the JSON output frame. Plain
// values and fake links; no sockets, no server.
import { describe, expect, it } from 'vitest';
import { ErrorCode, FsMethod, Method } from '../../../../src/protocol/index.js';
import { jsonOutputFrame } from '../../../../src/server/connection/event-frames.js';
import { HeldMemory } from '../../../../src/server/connection/held-memory.js';
import { pongMissed } from '../../../../src/server/connection/liveness.js';
import { ReadPause } from '../../../../src/server/connection/read-pause.js';
import { RequestGate, type GateLink } from '../../../../src/server/connection/request-gate.js';
import { admission, answeredAtOnce, inFlightRefusal, MAX_GATED, SMALL_REQUEST_BYTES, unparsedRefusal } from '../../../../src/server/connection/request-policy.js';
import { answerFits, SendBuffer } from '../../../../src/server/connection/send-buffer.js';
import type { Session } from '../../../../src/server/session/session.js';

const noBudget = () => null;

describe('request policy', () => {
  it('answers control calls at once, and never refuses them', () => {
    expect(answeredAtOnce(Method.processTerminate)).toBe(true);
    expect(answeredAtOnce(Method.processRead)).toBe(false);
  });

  it('sends large answers to a place, holds others back while backpressured, except those that reserve their own room; control calls act at once, their answers wait', () => {
    expect(admission('request', FsMethod.readFile, false)).toBe('place');
    expect(admission('request', Method.processWrite, false)).toBe('now');
    expect(admission('request', Method.processWrite, true)).toBe('drain');
    expect(admission('request', Method.processRead, true)).toBe('now');
    expect(admission('request', Method.processTerminate, false)).toBe('now');
    expect(admission('request', Method.processTerminate, true)).toBe('reply');
    expect(admission('request', Method.environmentInfo, true)).toBe('reply');
    expect(admission('notification', FsMethod.readFile, true)).toBe('now');
  });

  it('refuses past the count, past the bytes (never the first), and a large frame when the budget says so', () => {
    const held = { count: 0, bytes: 0, maxCount: 2, maxBytes: 100 };
    expect(inFlightRefusal(held, 1000, noBudget)).toBeNull();
    expect(inFlightRefusal({ ...held, count: 2 }, 1, noBudget)?.message).toMatch(/^too many requests in flight on this connection \(at most 2\)/);
    expect(inFlightRefusal({ ...held, bytes: 60 }, 50, noBudget)?.message).toMatch(/^too many bytes of requests in flight on this connection \(at most 100,/);
    const full = (what: string) => `budget full for ${what}`;
    expect(inFlightRefusal({ ...held, maxBytes: Infinity }, SMALL_REQUEST_BYTES, full)).toBeNull();
    expect(inFlightRefusal({ ...held, maxBytes: Infinity }, SMALL_REQUEST_BYTES + 1, full)).toEqual({ code: ErrorCode.InternalError, message: 'budget full for large request' });
  });

  it('refuses unparsed a frame whose values would hold more than the largest message', () => {
    expect(unparsedRefusal(10, 1 << 20)).toBeNull();
    const refusal = unparsedRefusal(1 << 20, 1 << 20);
    expect(refusal?.code).toBe(ErrorCode.InvalidRequest);
    expect(refusal?.message).toMatch(/^message refused unparsed: its 1048576 JSON values would hold about /);
  });
});

describe('RequestGate', () => {
  function link(): GateLink & { events: string[]; drain: () => void; closed: boolean; backpressured: boolean } {
    let wake: Array<() => void> = [];
    const events: string[] = [];
    return {
      events,
      closed: false,
      backpressured: true,
      maxInflight: 3,
      maxRequestBytes: 1000,
      whenDrained: () => new Promise<void>((resolve) => wake.push(resolve)),
      drain() {
        this.backpressured = false;
        const w = wake;
        wake = [];
        for (const f of w) f();
      },
      pauseReading: (reason) => events.push(`pause ${reason}`),
      resumeReading: (reason) => events.push(`resume ${reason}`),
    };
  }

  it('counts what is in flight against the link limits, never for a method answered at once', () => {
    const gate = new RequestGate(link(), () => false);
    for (let i = 0; i < 3; i++) gate.enter(10);
    expect(gate.bytes).toBe(30);
    expect(gate.refusal(Method.processWrite, 1, noBudget)?.message).toMatch(/at most 3/);
    expect(gate.refusal(Method.processTerminate, 1, noBudget)).toBeNull();
    gate.leave(10);
    expect(gate.refusal(Method.processWrite, 1, noBudget)).toBeNull();
  });

  it(`pauses reading while ${MAX_GATED} wait for the buffer to drain, and lets them all go once it did`, async () => {
    const l = link();
    const gate = new RequestGate(l, () => false);
    const waits = Array.from({ length: MAX_GATED }, () => gate.wait('drain'));
    expect(l.events).toEqual(['pause gated']);
    l.drain();
    expect(await Promise.all(waits)).toEqual(Array(MAX_GATED).fill(true));
    expect(l.events).toEqual(['pause gated', 'resume gated']);
  });

  it('a request waiting when the connection closes is dropped', async () => {
    const l = link();
    const gate = new RequestGate(l, () => false);
    const waiting = gate.wait('drain');
    l.closed = true;
    l.drain();
    expect(await waiting).toBe(false);
  });
});

describe('SendBuffer', () => {
  it('one answer always fits; more only under the high-water mark', () => {
    expect(answerFits(10_000, 0, 10_000, 100)).toBe(true);
    expect(answerFits(10, 40, 50, 100)).toBe(true);
    expect(answerFits(10, 40, 51, 100)).toBe(false);
  });

  it('is backpressured above the high mark until it drains to the low one, waking its waiters then', async () => {
    const l = { ws: { bufferedAmount: 0 }, closed: false, backpressured: false };
    const buf = new SendBuffer(l, { highWaterBytes: 100, lowWaterBytes: 10 });
    l.ws.bufferedAmount = 101;
    buf.queued();
    expect(l.backpressured).toBe(true);
    expect(buf.congested).toBe(true);
    let drained = false;
    void buf.whenDrained().then(() => (drained = true));
    l.ws.bufferedAmount = 50;
    expect(buf.wrote()).toBe(false);
    l.ws.bufferedAmount = 10;
    expect(buf.wrote()).toBe(true);
    await Promise.resolve();
    expect(drained).toBe(true);
    expect(l.backpressured).toBe(false);
  });

  it('reserves answer room until it is sent; a second answer waits for it', async () => {
    const l = { ws: { bufferedAmount: 0 }, closed: false, backpressured: false };
    const buf = new SendBuffer(l, { highWaterBytes: 100, lowWaterBytes: 10 });
    const first: { answerBytes?: number } = {};
    await buf.reserveAnswer(first, 80);
    expect(first.answerBytes).toBe(80);
    const second: { answerBytes?: number } = {};
    const waiting = buf.reserveAnswer(second, 80);
    await Promise.resolve();
    expect(second.answerBytes).toBeUndefined();
    buf.answerSent(80);
    await waiting;
    expect(second.answerBytes).toBe(80);
  });
});

describe('HeldMemory', () => {
  it('reports changes to the session, and takes them back from a session that is no longer its own', () => {
    const told = { a: 0, b: 0 };
    const session = (name: 'a' | 'b') => ({ connectionHeldChanged: (d: number) => (told[name] += d) }) as unknown as Session;
    const a = session('a');
    const b = session('b');
    const l = { closed: false, session: a as Session | null };
    let holds = 100;
    const held = new HeldMemory(l, () => holds);
    held.report();
    expect(told).toEqual({ a: 100, b: 0 });
    holds = 40;
    held.requestsChanged(-60);
    expect(told).toEqual({ a: 40, b: 0 });
    l.session = b;
    held.report();
    expect(told).toEqual({ a: 0, b: 40 });
    l.closed = true;
    held.report();
    expect(told).toEqual({ a: 0, b: 0 });
  });
});

describe('ReadPause', () => {
  it('pauses on the first reason, resumes only once none is left, and does nothing once closed', () => {
    const calls: string[] = [];
    let closed = false;
    const p = new ReadPause({ pause: () => calls.push('pause'), resume: () => calls.push('resume') }, () => closed);
    p.pause('gated');
    p.pause('fs');
    p.resume('gated');
    p.resume('unknown');
    expect(calls).toEqual(['pause']);
    p.resume('fs');
    expect(calls).toEqual(['pause', 'resume']);
    closed = true;
    p.pause('gated');
    expect(calls).toEqual(['pause', 'resume']);
  });
});

describe('heartbeat rule', () => {
  it('a pong is never missed; an unanswered ping is, unless it queued behind a backlog that moved since', () => {
    expect(pongMissed(true, false, 0, 0)).toBe(false);
    expect(pongMissed(false, false, 10, 20)).toBe(true);
    expect(pongMissed(false, true, 10, 20)).toBe(false);
    expect(pongMissed(false, true, 10, 5)).toBe(true);
  });
});

describe('jsonOutputFrame', () => {
  it('is the dialect encoding of process/output, in either dialect', () => {
    const data = Buffer.from('hello\n\u00ff');
    for (const usesJsonrpc of [false, true]) {
      const frame = jsonOutputFrame(usesJsonrpc, 'p"1', 7, 'stdout', data);
      const expected = { ...(usesJsonrpc ? { jsonrpc: '2.0' } : {}), method: 'process/output', params: { processId: 'p"1', seq: 7, stream: 'stdout', chunk: data.toString('base64') } };
      expect(JSON.parse(frame.toString('utf8'))).toEqual(expected);
    }
  });
});
