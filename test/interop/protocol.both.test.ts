/**
 * The wire protocol (docs/protocol.md: transport, error codes, handshake, processes) over a raw WebSocket, written once and run
 * against tether (`npm test`) and the real Codex exec-server (`npm run test:interop`).
 * Cases where tether is deliberately better are `it.skipIf(isCodex)` with a comment.
 */
import { createHash } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCode, Messages } from '../../src/protocol/index.js';
import { RawClient, b64, type Frame } from '../helpers/raw-client.js';
import { isCodex, isRelay, startTarget, type Target } from '../helpers/target.js';
import { CODEX_VERSION } from '../helpers/codex.js';
import { serverInternals } from '../../src/server/server.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const MiB = 1024 * 1024;

let target: Target;
const clients: RawClient[] = [];

beforeAll(async () => {
  // Seen by the server's own environment (in-process tether, or inherited by the Codex child).
  process.env.TETHER_PROBE_API_KEY = 'k';
  process.env.TETHER_PROBE_PLAIN = 'p';
  target = await startTarget();
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.drop().catch(() => {})));
  await target?.stop();
});

async function connect(url = target.url, options: Parameters<typeof RawClient.connect>[1] = {}): Promise<RawClient> {
  const c = await RawClient.connect(url, options);
  clients.push(c);
  return c;
}

/** A connected client past the handshake. */
async function ready(): Promise<RawClient & { sessionId: string }> {
  const c = await connect();
  const { sessionId } = await c.handshake();
  return Object.assign(c, { sessionId });
}

let nextId = 0;
const pid = (name = 'p') => `${name}-${++nextId}`;

function start(c: RawClient, processId: string, argv: string[], extra: Record<string, unknown> = {}): Promise<Frame> {
  return c.call('process/start', { processId, argv, cwd: CWD, env: ENV, tty: false, ...extra });
}

async function run(c: RawClient, argv: string[], extra: Record<string, unknown> = {}): Promise<string> {
  const id = pid();
  const reply = await start(c, id, argv, extra);
  expect(reply.error).toBeUndefined();
  await c.waitClosed(id);
  return id;
}

/** Codex's serde messages do not always name the field (docs/protocol.md promises it of tether). */
const names = (field: RegExp): RegExp | undefined => (isCodex ? undefined : field);

function expectError(frame: Frame, code: number, message?: string | RegExp): void {
  expect(frame.result).toBeUndefined();
  expect(frame.error, JSON.stringify(frame)).toBeDefined();
  expect(frame.error!.code).toBe(code);
  if (typeof message === 'string') expect(frame.error!.message).toBe(message);
  else if (message) expect(frame.error!.message).toMatch(message);
}

function httpGet(url: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const u = new URL(url.replace(/^ws:/, 'http:'));
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, headers }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function connectError(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  try {
    const c = await connect(url, { headers });
    await c.close();
  } catch (err) {
    const e = err as { status?: number; body?: string };
    if (e.status) return { status: e.status, body: e.body ?? '' };
    throw err;
  }
  throw new Error('the connection was accepted');
}

/** Events of one process from the notifications received so far. */
const eventsOf = (c: RawClient, processId: string) => c.notifications.filter((n) => n.params?.processId === processId);

describe('transport', () => {
  it('GET /readyz answers 200 without auth; other paths 404', async () => {
    expect((await httpGet(target.url, '/readyz')).status).toBe(200);
    expect((await httpGet(target.url, '/no-such-path')).status).toBe(404);
  });

  it('refuses an upgrade carrying an Origin header with 403', async () => {
    const { status } = await connectError(target.url, { origin: 'https://evil.example' });
    expect(status).toBe(403);
  });

  it('accepts text and binary frames; replies echo ids as sent and omit jsonrpc when the client does', async () => {
    const c = await ready();
    c.sendRaw(JSON.stringify({ id: 'str-id', method: 'environment/status', params: {} }), true);
    const reply = await c.waitFor((f) => f.id === 'str-id');
    expect(reply).toEqual({ id: 'str-id', result: { status: 'ready' } });
    expect(await c.call('environment/status')).toMatchObject({ result: { status: 'ready' } }); // params omitted
  });

  // beyond: tether echoes the client's dialect; Codex never sends `jsonrpc`.
  it.skipIf(isCodex)('echoes jsonrpc: "2.0" to a client whose first message carried it', async () => {
    const c = await connect(target.url, { jsonrpc: true });
    const reply = await c.call('initialize', { clientName: 'x' });
    expect(reply.jsonrpc).toBe('2.0');
    c.notify('initialized', {});
    const id = await run(c, ['/bin/echo', 'hi']);
    for (const n of eventsOf(c, id)) expect(n.jsonrpc).toBe('2.0');
  });

  it('answers frames that are not JSON, arrays and non-objects with an error reply and stays open', async () => {
    const c = await ready();
    const isNullId = (f: Frame) => f.error !== undefined && (f.id === null || f.id === -1);
    c.sendRaw('this is not json');
    const notJson = await c.waitFor(isNullId);
    // tether: -32700 (parse error); Codex: -32600 with id -1. Both are allowed by docs/protocol.md.
    expect([ErrorCode.ParseError, ErrorCode.InvalidRequest]).toContain(notJson.error!.code);
    if (!isCodex) expect(notJson).toMatchObject({ id: null, error: { code: ErrorCode.ParseError } });
    for (const bad of ['[{"id":1,"method":"environment/status"}]', '42', '"str"', 'null']) {
      const before = c.frames.length;
      c.sendRaw(bad);
      const reply = await c.waitFor((f) => isNullId(f) && c.frames.indexOf(f) >= before);
      expect(reply.error!.code).toBe(ErrorCode.InvalidRequest);
      if (!isCodex) expect(reply.id).toBeNull();
    }
    c.sendRaw(Buffer.from('{nope'), true); // binary, not JSON
    await c.waitFor((f) => isNullId(f) && c.frames.filter(isNullId).length >= 6);
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
  });
});

describe('handshake', () => {
  it('refuses every method before initialize with the family-specific text', async () => {
    const c = await connect();
    expectError(await c.call('process/read', { processId: 'x' }), ErrorCode.InvalidRequest, Messages.notInitialized);
    // Codex validates params before the handshake state: a bad request is -32602 either way.
    expectError(await c.call('process/start', {}), ErrorCode.InvalidParams);
    expectError(
      await c.call('process/start', { processId: 'x', argv: ['/bin/true'], cwd: CWD, env: {}, tty: false }),
      ErrorCode.InvalidRequest,
      Messages.notInitialized,
    );
    expectError(await c.call('environment/info', {}), ErrorCode.InvalidRequest, 'client must call initialize before using environment info methods');
    expectError(await c.call('environment/status', {}), ErrorCode.InvalidRequest, 'client must call initialize before using environment status methods');
    expectError(await c.call('fs/getMetadata', { path: 'file:///' }), ErrorCode.InvalidRequest, 'client must call initialize before using filesystem methods');
    expectError(await c.call('no/such-method', {}), ErrorCode.MethodNotFound);
  });

  it('needs clientName; a failed initialize may be retried on the same socket', async () => {
    const c = await connect();
    expectError(await c.call('initialize', {}), ErrorCode.InvalidParams, /clientName/);
    expectError(await c.call('initialize', { clientName: 7 }), ErrorCode.InvalidParams, names(/clientName/));
    const result = await c.request('initialize', { clientName: 'retry', someUnknownParam: true });
    expect(result.sessionId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('refuses methods between initialize and initialized, and a second initialize', async () => {
    const c = await connect();
    await c.request('initialize', { clientName: 'x' });
    expectError(await c.call('process/read', { processId: 'x' }), ErrorCode.InvalidRequest, Messages.notInitializedNotified);
    expectError(await c.call('environment/status', {}), ErrorCode.InvalidRequest, 'client must send initialized before using environment status methods');
    expectError(await c.call('initialize', { clientName: 'x' }), ErrorCode.InvalidRequest, Messages.alreadyInitialized);
    c.notify('initialized', {});
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
    expectError(await c.call('initialize', { clientName: 'x' }), ErrorCode.InvalidRequest, Messages.alreadyInitialized);
  });

  // beyond: Codex drops the connection on an early `initialized`; tether ignores it.
  it.skipIf(isCodex)('ignores an initialized notification sent before initialize', async () => {
    const c = await connect();
    c.notify('initialized', {});
    await c.handshake();
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
  });

  it('environment/info has Codex field names and types, also as environmentInfo in the initialize result', async () => {
    const c = await connect();
    const init = await c.handshake();
    const info = await c.request('environment/info', {});
    expect(init.environmentInfo).toEqual(info);
    expect(info).toMatchObject({
      shell: { name: expect.any(String), path: expect.any(String) },
      executorVersion: expect.any(String),
      providerId: expect.any(String),
      cwd: expect.stringMatching(/^file:\/\//),
      userHomeDir: expect.stringMatching(/^file:\/\//),
      platformOs: 'linux',
      prependPathDirs: expect.any(Array),
      temporaryDirectories: expect.any(Array),
      tempDir: expect.stringMatching(/^file:\/\//),
    });
    for (const v of Object.values(info.capabilities)) expect(typeof v).toBe('boolean');
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
  });

  it.runIf(isCodex)('tether reports every capability this Codex advertises (those it lacks as false)', async () => {
    const c = await connect();
    const codex = (await c.handshake()).environmentInfo.capabilities as Record<string, boolean>;
    const { environmentInfo } = await import('../../src/server/local/environment-info.js');
    const tether = environmentInfo().capabilities;
    expect(Object.keys(tether)).toEqual(expect.arrayContaining(Object.keys(codex)));
    // Anything tether names that this Codex does not (an older release) is false: never claimed.
    for (const name of Object.keys(tether).filter((n) => !(n in codex))) expect(tether[name], name).toBe(false);
  });

  it('answers unknown methods with -32601 after the handshake', async () => {
    const c = await ready();
    expectError(await c.call('no/such-method', {}), ErrorCode.MethodNotFound);
  });
});

describe('process/start', () => {
  it('numbers output, exit and close with one counter; closed comes last; read accounts for exit and close', async () => {
    const c = await ready();
    const id = pid();
    const result = await c.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', 'echo out; sleep 0.05; echo err >&2; exit 3'],
      cwd: CWD,
      env: ENV,
      tty: false,
      metadata: null,
      managedNetwork: null,
      enforceManagedNetwork: false,
    });
    expect(result).toEqual({ processId: id, sandboxType: 'none' });
    await c.waitClosed(id);
    const arrival = eventsOf(c, id);
    // beyond: tether sends events in seq order; Codex may swap neighbours (stdout and stderr
    // are read separately), which docs/protocol.md allows: clients order by seq.
    if (!isCodex) expect(arrival.map((e) => e.params.seq)).toEqual([1, 2, 3, 4]);
    const events = [...arrival].sort((a, b) => (a.params.seq as number) - (b.params.seq as number));
    expect(events.map((e) => e.params.seq)).toEqual([1, 2, 3, 4]);
    expect(events.map((e) => e.method)).toEqual(['process/output', 'process/output', 'process/exited', 'process/closed']);
    expect(events[0]!.params).toEqual({ processId: id, seq: 1, stream: 'stdout', chunk: b64('out\n') });
    expect(events[1]!.params).toEqual({ processId: id, seq: 2, stream: 'stderr', chunk: b64('err\n') });
    expect(events[2]!.params).toEqual({ processId: id, seq: 3, exitCode: 3, sandboxDenied: false });
    expect(events[3]!.params).toEqual({ processId: id, seq: 4 });

    expect(await c.request('process/read', { processId: id })).toEqual({
      chunks: [
        { seq: 1, stream: 'stdout', chunk: b64('out\n') },
        { seq: 2, stream: 'stderr', chunk: b64('err\n') },
      ],
      nextSeq: 5,
      exited: true,
      exitCode: 3,
      closed: true,
      failure: null,
      sandboxDenied: false,
    });
    const after1 = await c.request('process/read', { processId: id, afterSeq: 1, maxBytes: null, waitMs: null });
    expect(after1.chunks.map((ch: { seq: number }) => ch.seq)).toEqual([2]);
    expect(after1.nextSeq).toBe(5);
    // maxBytes: at least one chunk, never split; nextSeq = last returned + 1
    const small = await c.request('process/read', { processId: id, maxBytes: 1 });
    expect(small.chunks).toEqual([{ seq: 1, stream: 'stdout', chunk: b64('out\n') }]);
    expect(small.nextSeq).toBe(2);
    const zero = await c.request('process/read', { processId: id, maxBytes: 0 });
    expect(zero.chunks.length).toBe(1);
    const all = await c.request('process/read', { processId: id, maxBytes: 100 });
    expect(all.chunks.length).toBe(2);
    expect(all.nextSeq).toBe(3);
    const past = await c.request('process/read', { processId: id, afterSeq: 4, maxBytes: 100 });
    expect(past).toMatchObject({ chunks: [], nextSeq: 5, exited: true, closed: true });
  });

  it('gives the child exactly env without envPolicy', async () => {
    const c = await ready();
    const id = await run(c, ['/usr/bin/env'], { env: { ONLY_THIS: 'yes' } });
    expect(c.output(id)).toBe('ONLY_THIS=yes\n');
  });

  it('builds the environment from envPolicy, then lays env over it', async () => {
    const c = await ready();
    const id = await run(c, ['/usr/bin/env'], {
      env: { A: '1', B: 'overlay' },
      envPolicy: { inherit: 'core', ignoreDefaultExcludes: false, exclude: [], set: { B: '2', C: '3' }, includeOnly: [] },
    });
    const vars = Object.fromEntries(c.output(id).trim().split('\n').map((l) => l.split(/=(.*)/s).slice(0, 2) as [string, string]));
    expect(vars.A).toBe('1');
    expect(vars.B).toBe('overlay');
    expect(vars.C).toBe('3');
    expect(vars.PATH).toBeDefined();
    expect(vars.HOME).toBeDefined();
    const all = await run(c, ['/usr/bin/env'], {
      env: {},
      envPolicy: { inherit: 'all', ignoreDefaultExcludes: false, exclude: ['HOME'], set: {}, includeOnly: ['P*', 'h*'] },
    });
    const names = c.output(all).trim().split('\n').map((l) => l.split('=')[0]);
    expect(names).toContain('PATH');
    expect(names).not.toContain('HOME');
    for (const n of names) expect(n).toMatch(/^[PpHh]/);
  });

  it('drops *KEY*/*SECRET*/*TOKEN* from an inherited environment unless ignoreDefaultExcludes', async () => {
    const c = await ready();
    const policy = { inherit: 'all', exclude: [], set: {}, includeOnly: ['TETHER_PROBE_*'] };
    const filtered = await run(c, ['/usr/bin/env'], { env: {}, envPolicy: { ...policy, ignoreDefaultExcludes: false } });
    expect(c.output(filtered)).toBe('TETHER_PROBE_PLAIN=p\n');
    const all = await run(c, ['/usr/bin/env'], { env: {}, envPolicy: { ...policy, ignoreDefaultExcludes: true } });
    expect(c.output(all).trim().split('\n').sort()).toEqual(['TETHER_PROBE_API_KEY=k', 'TETHER_PROBE_PLAIN=p']);
  });

  it('passes arg0 as the program\'s argv[0]', async () => {
    const c = await ready();
    const id = await run(c, ['/bin/sh', '-c', 'tr "\\0" " " < /proc/$$/cmdline'], { arg0: 'custom-name' });
    expect(c.output(id)).toMatch(/^custom-name -c /);
  });

  it('refuses a duplicate process id with -32600', async () => {
    const c = await ready();
    const id = await run(c, ['/bin/true']);
    expectError(await start(c, id, ['/bin/true']), ErrorCode.InvalidRequest, Messages.processExists(id));
  });

  // beyond: Codex's message is the OS's alone, the same for a missing program and a missing
  // directory; tether's says which failed and names it, then the same OS message.
  it('reports spawn failures as -32603 naming the program or the cwd, with the OS message, and does not register the id', async () => {
    const c = await ready();
    const id = pid();
    const ENOENT = 'No such file or directory (os error 2)';
    expectError(await start(c, id, ['/no/such/binary']), ErrorCode.InternalError, isCodex ? ENOENT : `cannot start '/no/such/binary': ${ENOENT}`);
    expectError(
      await start(c, id, ['/bin/true'], { cwd: 'file:///no/such/dir' }),
      ErrorCode.InternalError,
      isCodex ? ENOENT : `cannot start '/bin/true': cwd '/no/such/dir': ${ENOENT}`,
    );
    // A session without extension startErrorDetail gets no `data`, as from Codex 0.169
    // (0.171 adds `data: {kind: "spawnNotFound"}`).
    const refused = (await start(c, id, ['/no/such/binary'])).error;
    if (isCodex && CODEX_VERSION !== '0.169.0') expect(refused?.data).toEqual({ kind: 'spawnNotFound' });
    else expect(refused).not.toHaveProperty('data');
    expectError(await c.call('process/read', { processId: id }), ErrorCode.InvalidRequest, Messages.unknownProcess(id));
    expect((await start(c, id, ['/bin/true'])).result).toEqual({ processId: id, sandboxType: 'none' });
  });

  it('refuses invalid params with -32602 naming the field', async () => {
    const c = await ready();
    expectError(await start(c, pid(), []), ErrorCode.InvalidParams, /argv/);
    expectError(await start(c, pid(), ['/bin/true'], { cwd: '/tmp' }), ErrorCode.InvalidParams);
    expectError(await c.call('process/start', { processId: pid(), argv: ['/bin/true'], cwd: CWD, env: {} }), ErrorCode.InvalidParams, /tty/);
    expectError(await c.call('process/start', { processId: pid(), argv: ['/bin/true'], cwd: CWD, tty: false }), ErrorCode.InvalidParams, /env/);
    expectError(await start(c, pid(), ['/bin/true'], { argv: 'true' }), ErrorCode.InvalidParams, names(/argv/));
    expectError(await start(c, pid(), ['/bin/true'], { sandbox: { type: 'readOnly' } }), ErrorCode.InvalidParams);
  });

  // beyond: Codex silently accepts enforceManagedNetwork: true without enforcing anything.
  it.skipIf(isCodex)('refuses a sandbox or a managed network it cannot provide, saying so', async () => {
    const c = await ready();
    expectError(await start(c, pid(), ['/bin/true'], { sandbox: { type: 'readOnly' } }), ErrorCode.InvalidParams, /tether does not sandbox/);
    expectError(await start(c, pid(), ['/bin/true'], { enforceManagedNetwork: true }), ErrorCode.InvalidParams, /tether does not sandbox/);
  });

  it('runs a command found through PATH', async () => {
    const c = await ready();
    const id = await run(c, ['echo', 'via', 'path']);
    expect(c.output(id)).toBe('via path\n');
  });
});

describe('process/read', () => {
  it('answers -32600 for an unknown process and -32602 for bad params', async () => {
    const c = await ready();
    expectError(await c.call('process/read', { processId: 'nope' }), ErrorCode.InvalidRequest, Messages.unknownProcess('nope'));
    expectError(await c.call('process/read', { processId: 'nope', afterSeq: -1 }), ErrorCode.InvalidParams);
    expectError(await c.call('process/read', { processId: 'nope', afterSeq: 'x' }), ErrorCode.InvalidParams);
    expectError(await c.call('process/read'), ErrorCode.InvalidParams);
  });

  it('long-polls with waitMs: returns on new output, on exit, and when the wait runs out', async () => {
    const c = await ready();
    const sleeper = pid();
    await c.request('process/start', { processId: sleeper, argv: ['sleep', '30'], cwd: CWD, env: ENV, tty: false });
    const empty = await c.request('process/read', { processId: sleeper, waitMs: 50 });
    expect(empty).toEqual({ chunks: [], nextSeq: 1, exited: false, exitCode: null, closed: false, failure: null, sandboxDenied: false });
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['/bin/sh', '-c', 'sleep 0.2; echo late; sleep 0.2'], cwd: CWD, env: ENV, tty: false });
    const late = await c.request('process/read', { processId: id, waitMs: 20_000 });
    expect(late.chunks).toEqual([{ seq: 1, stream: 'stdout', chunk: b64('late\n') }]);
    expect(late.nextSeq).toBe(2);
    const ended = await c.request('process/read', { processId: id, afterSeq: 1, waitMs: 20_000 });
    expect(ended).toMatchObject({ chunks: [], exited: true, exitCode: 0 });
    await c.request('process/terminate', { processId: sleeper });
  });

  // beyond: Codex serves one request per connection at a time, so the write waits behind the read.
  it.skipIf(isCodex)('serves a write while a long-poll read waits on the same connection', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['cat'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
    const read = c.call('process/read', { processId: id, afterSeq: 0, waitMs: 20_000 });
    const writeReply = await c.call('process/write', { processId: id, chunk: b64('ping\n'), writeId: 'w1' });
    expect(writeReply.result).toEqual({ status: 'accepted' });
    const r = await read;
    // The write was answered while the read was still waiting (it returns only once cat echoes).
    expect(c.frames.indexOf(writeReply)).toBeLessThan(c.frames.indexOf(r));
    expect(r.result.chunks).toEqual([{ seq: 1, stream: 'stdout', chunk: b64('ping\n') }]);
    await c.request('process/terminate', { processId: id });
  });
});

describe('process/write', () => {
  it('writes to stdin, deduplicates writeIds, reports the four statuses', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['cat'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
    expect(await c.request('process/write', { processId: id, chunk: b64('one\n'), writeId: 'a' })).toEqual({ status: 'accepted' });
    await c.waitFor((f) => f.method === 'process/output' && f.params.processId === id, 10_000, true);
    expect(await c.request('process/write', { processId: id, chunk: b64('one\n'), writeId: 'a' })).toEqual({ status: 'accepted' });
    expect(await c.request('process/write', { processId: id, chunk: b64('two\n'), writeId: 'b' })).toEqual({ status: 'accepted' });
    await c.waitFor(() => c.output(id) === 'one\ntwo\n', 10_000, true);
    expect(await c.request('process/write', { processId: 'nope', chunk: b64('x'), writeId: 'c' })).toEqual({ status: 'unknownProcess' });
    expect(await c.request('process/terminate', { processId: id })).toEqual({ running: true });
    await c.waitClosed(id);
    const late = await c.call('process/write', { processId: id, chunk: b64('x'), writeId: 'd' });
    // Codex tries the write and fails with -32603 "failed to write to process stdin";
    // tether answers the documented status (a relay too: its own server knows the stdin closed).
    if (isCodex && !isRelay) expectError(late, ErrorCode.InternalError);
    else expect(late.result).toEqual({ status: 'stdinClosed' });
    expect(c.output(id)).toBe('one\ntwo\n');
    // without pipeStdin and tty there is no stdin
    const sleeper = pid();
    await c.request('process/start', { processId: sleeper, argv: ['sleep', '5'], cwd: CWD, env: ENV, tty: false });
    expect(await c.request('process/write', { processId: sleeper, chunk: b64('x'), writeId: 'e' })).toEqual({ status: 'stdinClosed' });
    await c.request('process/terminate', { processId: sleeper });
  });

  // beyond: `closeStdin` is a tether extension (Codex ignores the member and keeps stdin
  // open), the only way to send end-of-file so `echo x | tether exec -- cat` can finish.
  it.skipIf(isCodex)('closeStdin ends the child\'s stdin after the chunk, once per writeId', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['cat'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
    const eof = { processId: id, chunk: b64('last\n'), writeId: 'eof', closeStdin: true };
    expect(await c.request('process/write', eof)).toEqual({ status: 'accepted' });
    const closed = await c.waitClosed(id);
    expect(c.output(id)).toBe('last\n');
    expect(closed).toBeDefined();
    const exited = eventsOf(c, id).find((n) => n.method === 'process/exited');
    expect(exited?.params.exitCode).toBe(0); // cat saw EOF and ended on its own
    // A re-send of the same write after a reconnect is still "accepted" and writes nothing.
    expect(await c.request('process/write', eof)).toEqual({ status: 'accepted' });
    expect(await c.request('process/write', { processId: id, chunk: b64('x'), writeId: 'late' })).toEqual({ status: 'stdinClosed' });
  });

  it('refuses bad base64 and a missing or empty writeId with -32602', async () => {
    const c = await ready();
    expectError(await c.call('process/write', { processId: 'x', chunk: '!!!', writeId: 'w' }), ErrorCode.InvalidParams);
    expectError(await c.call('process/write', { processId: 'x', chunk: b64('x'), writeId: '' }), ErrorCode.InvalidParams, /writeId/);
    expectError(await c.call('process/write', { processId: 'x', chunk: b64('x') }), ErrorCode.InvalidParams, /writeId/);
  });

  it('round-trips through cat with one write per line', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['cat'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
    let expected = '';
    for (let i = 0; i < 20; i++) {
      const line = `line ${i}\n`;
      expected += line;
      await c.request('process/write', { processId: id, chunk: b64(line), writeId: `w${i}` });
      await c.waitFor(() => c.output(id) === expected, 10_000, true);
    }
    await c.request('process/terminate', { processId: id });
  });
});

describe('process/signal and process/terminate', () => {
  it('interrupt → 130; unknown ids answer {} and running:false; unknown names -32602', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['sleep', '30'], cwd: CWD, env: ENV, tty: false });
    expect(await c.request('process/signal', { processId: id, signal: 'interrupt' })).toEqual({});
    await c.waitClosed(id);
    const exited = eventsOf(c, id).find((e) => e.method === 'process/exited');
    expect(exited!.params.exitCode).toBe(130);
    expect(await c.request('process/signal', { processId: 'nope', signal: 'interrupt' })).toEqual({});
    expectError(await c.call('process/signal', { processId: id, signal: 'bogus' }), ErrorCode.InvalidParams);
    expect(await c.request('process/terminate', { processId: 'nope' })).toEqual({ running: false });
    expect(await c.request('process/terminate', { processId: id })).toEqual({ running: false });
  });

  it('terminate kills a running process with 137', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['sleep', '30'], cwd: CWD, env: ENV, tty: false });
    expect(await c.request('process/terminate', { processId: id })).toEqual({ running: true });
    await c.waitClosed(id);
    const r = await c.request('process/read', { processId: id });
    expect(r).toMatchObject({ chunks: [], nextSeq: 3, exited: true, exitCode: 137, closed: true });
  });

  // beyond: tether accepts more signal names than Codex's "interrupt".
  it.skipIf(isCodex)('accepts the extension signal names', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', { processId: id, argv: ['sleep', '30'], cwd: CWD, env: ENV, tty: false });
    expect(await c.request('process/signal', { processId: id, signal: 'terminate' })).toEqual({});
    await c.waitClosed(id);
    expect(eventsOf(c, id).find((e) => e.method === 'process/exited')!.params.exitCode).toBe(143);
  });
});

/**
 * A pty's output: tether's is exact. Codex's once lacked its last line in CI (`got hi`, with
 * exited and closed after it, one failure in many runs, none in 300 repeats here under load):
 * for Codex the output must be a prefix of `full` that holds at least `atLeast`.
 */
function expectPtyOutput(received: string, full: string, atLeast: string): void {
  if (!isCodex || received === full) return expect(received).toBe(full);
  expect(received.startsWith(atLeast) && full.startsWith(received), `Codex pty output ${JSON.stringify(received)}`).toBe(true);
}

describe('pty', () => {
  it('runs the child on a real terminal: pty stream, echo, CRLF, exit code', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', 'test -t 0 && echo is-a-tty; read x; echo got $x; exit 4'],
      cwd: CWD,
      env: ENV,
      tty: true,
    });
    await c.waitFor(() => c.output(id).includes('is-a-tty'), 10_000, true);
    expect(await c.request('process/write', { processId: id, chunk: b64('hi\n'), writeId: '1' })).toEqual({ status: 'accepted' });
    await c.waitClosed(id);
    const events = eventsOf(c, id);
    for (const e of events.filter((e) => e.method === 'process/output')) expect(e.params.stream).toBe('pty');
    expectPtyOutput(c.output(id), 'is-a-tty\r\nhi\r\ngot hi\r\n', 'is-a-tty\r\nhi\r\n');
    expect(events.find((e) => e.method === 'process/exited')!.params.exitCode).toBe(4);
    expect(events[events.length - 1]!.method).toBe('process/closed');
  });
});

describe('pty: a program that closes its terminal before exiting', () => {
  it('reports the program\'s own exit code, not a hangup', async () => {
    const c = await ready();
    const id = pid();
    await c.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', 'echo bye; exec <&- >&- 2>&-; sleep 0.2; exit 5'],
      cwd: CWD,
      env: ENV,
      tty: true,
    });
    await c.waitClosed(id);
    expectPtyOutput(c.output(id), 'bye\r\n', '');
    expect(eventsOf(c, id).find((e) => e.method === 'process/exited')!.params.exitCode).toBe(5);
  });
});

describe('big output', () => {
  it('streams 3 MiB of stdout whole, in order', async () => {
    const c = await ready();
    const id = await run(c, ['/bin/sh', '-c', `yes 0123456789abcdef | head -c ${3 * MiB}`]);
    const out = c.outputBuffer(id, 'stdout');
    const line = '0123456789abcdef\n';
    const expected = Buffer.from(line.repeat(Math.ceil((3 * MiB) / line.length))).subarray(0, 3 * MiB);
    expect(out.equals(expected)).toBe(true); // every byte, in seq order
    const arrival = eventsOf(c, id).map((e) => e.params.seq as number);
    const sorted = [...arrival].sort((a, b) => a - b);
    expect(sorted).toEqual(sorted.map((_, i) => i + 1)); // one seq per event, no gap, no duplicate
    // beyond: tether sends every event in seq order; Codex sometimes swaps two neighbours
    // (seen in CI), which docs/protocol.md allows (clients order events by seq).
    if (!isCodex) expect(arrival).toEqual(sorted);
  });
});

describe('sessions and resume', () => {
  it('refuses to resume a session that is still attached (-32010) and an unknown id (-32600)', async () => {
    const a = await ready();
    const b = await connect();
    expectError(
      await b.call('initialize', { clientName: 'b', resumeSessionId: a.sessionId }),
      ErrorCode.SessionAttached,
      Messages.sessionAttached(a.sessionId),
    );
    expectError(await b.call('initialize', { clientName: 'b', resumeSessionId: 'no-such-session' }), ErrorCode.InvalidRequest, Messages.unknownSession('no-such-session'));
    // and it may then start a fresh session on the same socket
    const fresh = await b.request('initialize', { clientName: 'b', resumeSessionId: null });
    expect(fresh.sessionId).not.toBe(a.sessionId);
  });

  it('resumes after a TCP drop: processes kept running, the missed output is read back by seq', async () => {
    const a = await ready();
    const id = pid();
    await a.request('process/start', { processId: id, argv: ['cat'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
    await a.request('process/write', { processId: id, chunk: b64('before\n'), writeId: 'w1' });
    await a.waitFor(() => a.output(id) === 'before\n', 10_000, true);
    await a.drop();

    // The server may not have noticed the drop yet: -32010 is retried, as a client does.
    let b: RawClient;
    let resumed: { sessionId: string } | undefined;
    for (let attempt = 0; attempt < 100 && !resumed; attempt++) {
      b = await connect();
      const reply = await b.call('initialize', { clientName: 'b', resumeSessionId: a.sessionId });
      if (reply.result) resumed = reply.result;
      else {
        expect(reply.error!.code).toBe(ErrorCode.SessionAttached);
        await b.close();
        await new Promise((r) => setTimeout(r, 50)); // retry backoff, as a client would
      }
    }
    expect(resumed!.sessionId).toBe(a.sessionId);
    b!.notify('initialized', {});
    // the same writeId after a reconnect is not written twice
    expect(await b!.request('process/write', { processId: id, chunk: b64('before\n'), writeId: 'w1' })).toEqual({ status: 'accepted' });
    expect(await b!.request('process/write', { processId: id, chunk: b64('after\n'), writeId: 'w2' })).toEqual({ status: 'accepted' });
    await b!.waitFor((f) => f.method === 'process/output' && f.params.processId === id, 10_000, true);
    const r = await b!.request('process/read', { processId: id, afterSeq: 0 });
    expect(r.chunks.map((ch: { chunk: string }) => Buffer.from(ch.chunk, 'base64').toString()).join('')).toBe('before\nafter\n');
    const caughtUp = await b!.request('process/read', { processId: id, afterSeq: 1 });
    expect(caughtUp.chunks.map((ch: { seq: number }) => ch.seq)).toEqual([2]);
    await b!.request('process/terminate', { processId: id });
  });

  it('does not send notifications for another connection\'s session', async () => {
    const a = await ready();
    const b = await ready();
    const id = await run(a, ['/bin/echo', 'mine']);
    expect(eventsOf(b, id)).toEqual([]);
    expectError(await b.call('process/read', { processId: id }), ErrorCode.InvalidRequest, Messages.unknownProcess(id));
  });
});

describe('auth', () => {
  let secured: Target;
  const token = `tok-${createHash('sha256').update(String(Math.random())).digest('hex').slice(0, 16)}`;
  beforeAll(async () => {
    secured = await startTarget({ token });
  });
  afterAll(async () => {
    await secured?.stop();
  });

  it('answers 401 with the exact plain-text bodies', async () => {
    expect(await connectError(secured.url, {})).toEqual({ status: 401, body: 'missing websocket bearer token' });
    expect(await connectError(secured.url, { authorization: 'Bearer wrong' })).toEqual({ status: 401, body: 'invalid websocket bearer token' });
    expect(await connectError(secured.url, { authorization: `Basic ${b64('a:b')}` })).toEqual({ status: 401, body: 'invalid authorization header' });
    expect(await connectError(secured.url, { authorization: 'Bearer ' })).toEqual({ status: 401, body: 'invalid authorization header' });
  });

  it('does not take the token from the query string', async () => {
    expect((await connectError(`${secured.url}/?token=${token}`, {})).status).toBe(401);
  });

  it('accepts the token with any case of the scheme; /readyz needs none; Origin is still refused', async () => {
    const c = await connect(secured.url, { headers: { authorization: `bearer ${token}` } });
    await c.handshake();
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
    expect((await httpGet(secured.url, '/readyz')).status).toBe(200);
    expect((await connectError(secured.url, { authorization: `Bearer ${token}`, origin: 'http://localhost' })).status).toBe(403);
  });
});

// Tether-only behaviours that need server options Codex does not have (short TTL, introspection).
describe.skipIf(isCodex)('tether sessions (beyond Codex)', () => {
  let server: import('../helpers/tether.js').TetherTarget;
  let dir: string;
  beforeAll(async () => {
    const { startTetherServer } = await import('../helpers/tether.js');
    server = await startTetherServer({ sessionTtlMs: 400, closedRetentionMs: 60_000 });
    dir = mkdtempSync(join(tmpdir(), 'tether-proto-'));
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const gone = (p: number): boolean => {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z'); // a zombie is dead
    } catch {
      return true;
    }
  };

  it('kills every process of an expired session, grandchildren included', async () => {
    const c = await RawClient.connect(server.url);
    const { sessionId } = await c.handshake();
    const id = 'tree';
    await c.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', 'sleep 300 & echo $$ $!; wait'],
      cwd: CWD,
      env: ENV,
      tty: false,
    });
    const ptyId = 'pty';
    await c.request('process/start', { processId: ptyId, argv: ['/bin/sh', '-c', 'echo $$; sleep 300'], cwd: CWD, env: ENV, tty: true });
    await c.waitFor(() => /^\d+ \d+\n$/.test(c.output(id)), 10_000, true);
    await c.waitFor(() => /^\d+\r\n$/.test(c.output(ptyId)), 10_000, true);
    const pids = [...c.output(id).trim().split(' '), c.output(ptyId).trim()].map(Number);
    for (const p of pids) expect(gone(p)).toBe(false);
    const expired = new Promise<void>((resolve) => server.server.on('session-expired', (sid: string) => sid === sessionId && resolve()));
    await c.drop();
    await expired;
    expect(serverInternals(server.server).sessions.has(sessionId)).toBe(false);
    const deadline = Date.now() + 5_000;
    while (pids.some((p) => !gone(p)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const p of pids) expect(gone(p), `pid ${p} outlived its session`).toBe(true);
    const again = await RawClient.connect(server.url);
    expectError(await again.call('initialize', { clientName: 'x', resumeSessionId: sessionId }), ErrorCode.InvalidRequest, Messages.unknownSession(sessionId));
    await again.close();
  });

  it('replays every byte of 3 MiB printed while detached (Codex keeps only the last 1 MiB)', async () => {
    const size = 3 * MiB;
    const go = join(dir, 'go');
    const c = await RawClient.connect(server.url);
    const { sessionId } = await c.handshake();
    const id = 'detached-dump';
    await c.request('process/start', {
      processId: id,
      argv: ['/bin/sh', '-c', `while [ ! -e '${go}' ]; do sleep 0.01; done; yes 0123456789abcdef | head -c ${size}`],
      cwd: CWD,
      env: ENV,
      tty: false,
    });
    // Long TTL for this one: the replay must not race the 400 ms expiry.
    const session = serverInternals(server.server).sessions.get(sessionId)!;
    (session.limits as { ttlMs: number }).ttlMs = 60_000;
    const detached = new Promise<void>((resolve) => server.server.on('session-detached', (sid: string) => sid === sessionId && resolve()));
    await c.drop();
    await detached;
    writeFileSync(go, '');
    // Wait until the child is blocked on a full retention (nothing is read while nobody could receive it).
    const proc = session.processes.get(id)!;
    const start = Date.now();
    while (proc.retained < 1 * MiB && Date.now() - start < 10_000) await new Promise((r) => setTimeout(r, 10));
    expect(proc.retained).toBeGreaterThanOrEqual(1 * MiB);
    expect(existsSync(go)).toBe(true);

    const b = await RawClient.connect(server.url);
    expect((await b.handshake('b', sessionId)).sessionId).toBe(sessionId);
    const got = new Map<number, Buffer>();
    const r = await b.request('process/read', { processId: id, afterSeq: 0 });
    for (const ch of r.chunks) got.set(ch.seq, Buffer.from(ch.chunk, 'base64'));
    expect(r.chunks[0].seq).toBe(1); // nothing was evicted
    await b.waitClosed(id, 20_000);
    for (const n of b.notifications) if (n.method === 'process/output' && n.params.processId === id) got.set(n.params.seq, Buffer.from(n.params.chunk, 'base64'));
    const seqs = [...got.keys()].sort((x, y) => x - y);
    expect(seqs).toEqual(seqs.map((_, i) => i + 1));
    const all = Buffer.concat(seqs.map((s) => got.get(s)!));
    expect(all.length).toBe(size);
    const expected = Buffer.alloc(size, '0123456789abcdef\n');
    expect(all.equals(expected)).toBe(true);
    await b.close();
  });
});
