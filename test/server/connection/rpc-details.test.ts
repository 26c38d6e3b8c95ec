/**
 * tether-only: the JSON-RPC corners found by adversarial testing (issue 11, item 7). Each
 * used to answer with the wrong code, Node's raw text, or a process-wide warning.
 */
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RawClientPool, type RawClient } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

let target: TetherTarget | undefined;
const pool = new RawClientPool();
const warnings: Error[] = [];
const onWarning = (w: Error) => warnings.push(w);
beforeEach(() => {
  warnings.length = 0;
  process.on('warning', onWarning);
});
afterEach(async () => {
  process.off('warning', onWarning);
  await pool.dropAll();
  await target?.stop();
  target = undefined;
});

async function ready(): Promise<RawClient> {
  target ??= await startTetherServer();
  const c = await pool.connect(target.url);
  await c.handshake();
  return c;
}

const start = (c: RawClient, processId: string, argv: string[], extra: object = {}) =>
  c.call('process/start', { processId, argv, cwd: CWD, env: ENV, tty: false, ...extra });

describe('JSON-RPC details', () => {
  it('answers a request with id null and an unknown method with -32601 (id null)', async () => {
    const c = await ready();
    c.sendRaw('{"id":null,"method":"no/such/method"}');
    const reply = await c.waitFor((f) => f.id === null);
    expect(reply.error).toMatchObject({ code: ErrorCode.MethodNotFound, message: 'method not found: no/such/method' });
    // A known method with id null is served and answered with id null too.
    c.sendRaw('{"id":null,"method":"environment/status","params":{}}');
    const status = await c.waitFor((f) => f.id === null && f.result !== undefined);
    expect(status.result).toEqual({ status: 'ready' });
  });

  it('refuses a NUL byte in argv, env, arg0 or cwd with -32602 naming the field, and keeps serving', async () => {
    const c = await ready();
    const cases: [object, RegExp][] = [
      [{ argv: ['echo', 'a\0b'] }, /argv\.1: must not contain a NUL byte/],
      [{ env: { ...ENV, X: 'a\0b' } }, /env\.X: must not contain a NUL byte/],
      [{ env: { ...ENV, 'X\0Y': 'v' } }, /env.*must not contain a NUL byte/],
      [{ arg0: 'x\0' }, /arg0: must not contain a NUL byte/],
      [{ cwd: 'file:///tmp/a%00b' }, /cwd: must not contain a NUL byte/],
    ];
    for (const [i, [params, message]] of cases.entries()) {
      const reply = await c.call('process/start', { processId: `p${i}`, argv: ['true'], cwd: CWD, env: ENV, tty: false, ...params });
      expect(reply.error?.code, JSON.stringify(params)).toBe(ErrorCode.InvalidParams);
      expect(reply.error?.message).toMatch(message);
    }
    expect((await start(c, 'ok', ['true'])).result).toBeDefined();
  });

  it('treats waitMs >= 2^31 as a long wait, not 1 ms, without a TimeoutOverflowWarning', async () => {
    const c = await ready();
    expect((await start(c, 's', ['sleep', '30'])).result).toBeDefined();
    const order: string[] = [];
    const huge = c.call('process/read', { processId: 's', waitMs: 2 ** 31 }).then((f) => (order.push('huge'), f));
    const short = c.call('process/read', { processId: 's', waitMs: 300 }).then((f) => (order.push('short'), f));
    await short;
    expect(order).toEqual(['short']); // the 2^31 ms poll is still waiting
    await c.request('process/terminate', { processId: 's' });
    const reply = await huge;
    expect(reply.result?.exited).toBe(true);
    expect(warnings.map((w) => w.name)).not.toContain('TimeoutOverflowWarning');
  });

  it('serves many concurrent long-polls on one connection without a MaxListenersExceededWarning', async () => {
    const c = await ready();
    expect((await start(c, 's', ['sleep', '30'])).result).toBeDefined();
    const polls = Array.from({ length: 50 }, () => c.call('process/read', { processId: 's', waitMs: 20_000 }));
    await c.request('process/terminate', { processId: 's' });
    const replies = await Promise.all(polls);
    expect(replies.every((r) => r.result?.exited === true)).toBe(true);
    // Warnings are emitted on the next tick.
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings.map((w) => `${w.name}: ${w.message}`)).toEqual([]);
  });

  it('bounds the requests in flight per connection: past the limit one is refused at once (-32600), and room comes back', async () => {
    target = await startTetherServer({ maxInflightRequests: 10 });
    const c = await ready();
    expect((await start(c, 's', ['sleep', '30'])).result).toBeDefined();
    const polls = Array.from({ length: 15 }, () => c.call('process/read', { processId: 's', waitMs: 60_000 }));
    const refused = await Promise.all(polls.slice(10));
    for (const r of refused) expect(r.error).toMatchObject({ code: ErrorCode.InvalidRequest, message: expect.stringMatching(/too many requests in flight.*at most 10/) });
    await c.request('process/terminate', { processId: 's' });
    const answered = await Promise.all(polls.slice(0, 10));
    expect(answered.every((r) => r.result?.exited === true)).toBe(true);
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
  });
});
