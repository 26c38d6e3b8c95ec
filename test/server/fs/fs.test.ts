/**
 * What tether's fs methods do beyond Codex (tether only): limits that keep memory bounded,
 * requests that cannot hang, and the `fsResume` extension (handles and the watch live with
 * the session; mutating requests are exactly-once through an idempotency key).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseServeArgs } from '../../../src/cli/serve/serve.js';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RawClient, RawClientPool } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';

const MiB = 1024 * 1024;
let server: TetherTarget;
let dir: string;
const pool = new RawClientPool();
const uri = (rel: string) => pathToFileURL(join(dir, rel)).href;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tether-server-fs-'));
  server = await startTetherServer({ fs: { maxReadFileBytes: 2 * MiB, memoryBytes: 8 * MiB, maxDirectoryEntries: 10 }, sessionTtlMs: 60_000 });
});
afterEach(() => pool.dropAll());
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A raw client that negotiated the fs extension. */
async function resumable(resumeSessionId?: string): Promise<RawClient & { sessionId: string }> {
  const c = await pool.connect(server.url);
  const params: Record<string, unknown> = { clientName: 'fs-test', tether: { version: 1, extensions: ['fsResume'] } };
  if (resumeSessionId) params.resumeSessionId = resumeSessionId;
  const init = await c.request('initialize', params);
  expect(init.tether.extensions).toContain('fsResume');
  c.notify('initialized', {});
  return Object.assign(c, { sessionId: init.sessionId as string });
}

async function plain(): Promise<RawClient> {
  const c = await pool.connect(server.url);
  await c.handshake();
  return c;
}

/** How many of this process's descriptors are open on `name` (in the test directory). */
const openOn = (name: string) =>
  readdirSync('/proc/self/fd').filter((fd) => {
    try {
      return readlinkSync(`/proc/self/fd/${fd}`) === join(dir, name);
    } catch {
      return false;
    }
  }).length;

describe('limits', () => {
  it('are configurable from the command line', () => {
    const { options } = parseServeArgs(['--max-read-file', '1MiB', '--max-file-handles', '4', '--fs-memory', '2MiB', '--max-open-files', '64'], {});
    expect(options.fs).toEqual({ maxReadFileBytes: MiB, maxHandles: 4, memoryBytes: 2 * MiB, maxOpenFiles: 64 });
    expect(() => parseServeArgs(['--max-file-handles', '0'], {})).toThrow(/--max-file-handles: expected a positive integer/);
  });

  it('caps fs/readFile and points at the block reads, which read any size', async () => {
    const big = Buffer.alloc(2 * MiB + 1, 7);
    writeFileSync(join(dir, 'big'), big);
    const c = await plain();
    const reply = await c.call('fs/readFile', { path: uri('big') });
    expect(reply.error).toEqual({
      code: ErrorCode.InvalidRequest,
      message: 'file is too large to read: limit is 2097152 bytes; read it in blocks with fs/open and fs/readBlock',
    });
    await c.request('fs/open', { handleId: 'b', path: uri('big') });
    const parts: Buffer[] = [];
    for (let offset = 0, eof = false; !eof; ) {
      const block = await c.request('fs/readBlock', { handleId: 'b', offset, len: MiB });
      parts.push(Buffer.from(block.chunk, 'base64'));
      offset += MiB;
      eof = block.eof;
    }
    expect(Buffer.concat(parts).equals(big)).toBe(true);
    // A file whose size says 0 (procfs) is still capped while it is read.
    expect((await c.request('fs/readFile', { path: 'file:///proc/self/status' })).dataBase64.length).toBeGreaterThan(0);
  });

  it('refuses a directory listing beyond its cap, pointing at fs/walk', async () => {
    mkdirSync(join(dir, 'crowded'));
    for (let i = 0; i < 11; i++) writeFileSync(join(dir, 'crowded', `f${i}`), '');
    const c = await plain();
    const reply = await c.call('fs/readDirectory', { path: uri('crowded') });
    expect(reply.error).toEqual({
      code: ErrorCode.InvalidRequest,
      message: `directory \`${join(dir, 'crowded')}\` has more than 10 entries; list it in pieces with fs/walk (maxEntries)`,
    });
  });

  it('never hangs on a FIFO (Codex blocks its connection forever writing to one)', async () => {
    execFileSync('mkfifo', [join(dir, 'fifo')]);
    const c = await plain();
    for (const reply of [
      await c.call('fs/writeFile', { path: uri('fifo'), dataBase64: 'eA==' }),
      await c.call('fs/open', { handleId: 'f', path: uri('fifo'), mode: 'replace' }),
      await c.call('fs/readFile', { path: uri('fifo') }),
    ]) {
      expect(reply.error).toEqual({ code: ErrorCode.InvalidRequest, message: `path \`${join(dir, 'fifo')}\` is not a file` });
    }
  });

  it('stays within its memory budget when a client asks for blocks and never reads the answers', async () => {
    writeFileSync(join(dir, 'mib'), Buffer.alloc(MiB, 1));
    const c = await plain();
    await c.request('fs/open', { handleId: 'm', path: uri('mib') });
    const socket = (c.ws as unknown as { _socket: import('node:net').Socket })._socket;
    socket.pause(); // the client stops reading: answers pile up on the server's side
    const before = process.memoryUsage();
    const requests = 120;
    for (let i = 0; i < requests; i++) c.send({ id: 1000 + i, method: 'fs/readBlock', params: { handleId: 'm', offset: 0, len: MiB } });
    // Unbounded, 120 answers of 1.4 MB (plus their JSON copies) would be ~330 MB. Watch the
    // heap for half a second (a measurement window, not a synchronisation).
    let peak = 0;
    for (let sample = 0; sample < 10; sample++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      const now = process.memoryUsage();
      peak = Math.max(peak, now.heapUsed + now.arrayBuffers - (before.heapUsed + before.arrayBuffers));
    }
    expect(peak).toBeLessThan(64 * MiB);
    socket.resume();
    const last = await c.waitFor((f) => f.id === 1000 + requests - 1, 30_000, true);
    expect(last.result).toMatchObject({ eof: false });
  });
});

describe('server-wide caps', () => {
  let small: TetherTarget;
  beforeAll(async () => {
    small = await startTetherServer({ fs: { maxOpenFiles: 3, maxOperations: 2 } });
  });
  afterAll(() => small?.stop());

  it('caps open handles across sessions; a closed connection gives its handles back', async () => {
    writeFileSync(join(dir, 'shared'), 'x');
    const a = await pool.connect(small.url);
    await a.handshake();
    const b = await pool.connect(small.url);
    await b.handshake();
    await a.request('fs/open', { handleId: 'a1', path: uri('shared') });
    await a.request('fs/open', { handleId: 'a2', path: uri('shared') });
    await b.request('fs/open', { handleId: 'b1', path: uri('shared') });
    expect((await b.call('fs/open', { handleId: 'b2', path: uri('shared') })).error).toEqual({
      code: ErrorCode.InvalidRequest,
      message: 'too many open files on this server: at most 3 file handles are open at once across all sessions (--max-open-files)',
    });
    await a.drop(); // Codex's rule without fsResume: its handles die with it
    await expect.poll(async () => (await b.call('fs/open', { handleId: `b-${Math.random()}`.slice(0, 20), path: uri('shared') })).error).toBeUndefined();
  });

  it('a client that stops reading its answers does not hold up other sessions', async () => {
    writeFileSync(join(dir, 'half-mib'), Buffer.alloc(MiB / 2, 3));
    const greedy = await pool.connect(small.url);
    await greedy.handshake();
    const socket = (greedy.ws as unknown as { _socket: import('node:net').Socket })._socket;
    socket.pause();
    for (let i = 0; i < 40; i++) greedy.send({ id: 5000 + i, method: 'fs/readFile', params: { path: uri('half-mib') } });
    const other = await pool.connect(small.url);
    await other.handshake();
    // With 2 operation slots and the greedy client's answers piling up, others still get served.
    for (let i = 0; i < 5; i++) expect(await other.request('fs/getMetadata', { path: uri('half-mib') })).toMatchObject({ size: MiB / 2 });
    socket.resume();
    await greedy.waitFor((f) => f.id === 5039, 30_000, true);
  });
});

describe('fsResume', () => {
  it('keeps handles through a reconnect and closes them when the session ends', async () => {
    writeFileSync(join(dir, 'kept'), 'hello');
    const c = await resumable();
    await c.request('fs/open', { handleId: 'k', path: uri('kept') });
    await c.request('fs/open', { handleId: 'w', path: uri('written'), mode: 'replace' });
    await c.drop();
    const again = await resumable(c.sessionId);
    expect(await again.request('fs/readBlock', { handleId: 'k', offset: 0, len: 5 })).toEqual({ chunk: 'aGVsbG8=', eof: false });
    await again.request('fs/writeBlock', { handleId: 'w', offset: 0, chunk: 'eA==' });
    expect([openOn('kept'), openOn('written')]).toEqual([1, 1]);
    await again.request('session/close', {}).catch(() => {});
    await again.closed;
    await expect.poll(() => openOn('kept') + openOn('written')).toBe(0);
  });

  it('caps open handles per session', async () => {
    writeFileSync(join(dir, 'h'), '');
    const c = await resumable();
    for (let i = 0; i < 128; i++) await c.request('fs/open', { handleId: `h${i}`, path: uri('h') });
    expect((await c.call('fs/open', { handleId: 'one-more', path: uri('h') })).error).toEqual({
      code: ErrorCode.InvalidRequest,
      message: 'at most 128 file handles may be open per connection',
    });
    await c.drop();
    const again = await resumable(c.sessionId);
    expect((await again.call('fs/open', { handleId: 'one-more', path: uri('h') })).error?.code).toBe(ErrorCode.InvalidRequest);
  });

  it('answers a re-sent mutating request from memory: a second remove reports the first one’s success', async () => {
    writeFileSync(join(dir, 'doomed'), '');
    const c = await resumable();
    const remove = { path: uri('doomed'), force: false, idempotencyKey: 'rm-1' };
    expect(await c.call('fs/remove', remove)).toMatchObject({ result: {} });
    expect(existsSync(join(dir, 'doomed'))).toBe(false);
    await c.drop();
    const again = await resumable(c.sessionId);
    expect(await again.call('fs/remove', remove)).toMatchObject({ result: {} });
    // A fresh key does the work again (and fails, the file is gone); a key reused for another request is refused.
    expect((await again.call('fs/remove', { ...remove, idempotencyKey: 'rm-2' })).error).toEqual({ code: ErrorCode.NotFound, message: 'No such file or directory (os error 2)' });
    expect((await again.call('fs/remove', { ...remove, path: uri('other') })).error).toMatchObject({ code: ErrorCode.InvalidParams, message: expect.stringMatching(/idempotencyKey.*already used/) });
    // Errors are remembered too: the same key answers the same error.
    expect((await again.call('fs/remove', { ...remove, idempotencyKey: 'rm-2' })).error?.code).toBe(ErrorCode.NotFound);
    // Copies of one request in flight together run it once.
    writeFileSync(join(dir, 'twice'), 'x');
    const [a, b] = await Promise.all([
      again.call('fs/copy', { sourcePath: uri('twice'), destinationPath: uri('twice-copy'), recursive: false, idempotencyKey: 'cp' }),
      again.call('fs/copy', { sourcePath: uri('twice'), destinationPath: uri('twice-copy'), recursive: false, idempotencyKey: 'cp' }),
    ]);
    expect([a.result, b.result]).toEqual([{}, {}]);
    // An fs/open re-sent after a lost answer is the same open, not "already exists".
    const open = { handleId: 'once', path: uri('twice'), idempotencyKey: 'open-once' };
    expect((await again.call('fs/open', open)).result).toEqual({ handleId: 'once' });
    expect((await again.call('fs/open', open)).result).toEqual({ handleId: 'once' });
  });

  it('ignores the key without the extension (Codex’s behaviour: unknown members are ignored)', async () => {
    writeFileSync(join(dir, 'plain-doomed'), '');
    const c = await plain();
    const remove = { path: uri('plain-doomed'), force: false, idempotencyKey: 'k' };
    expect((await c.call('fs/remove', remove)).result).toEqual({});
    expect((await c.call('fs/remove', remove)).error?.code).toBe(ErrorCode.NotFound);
  });

  it('tells a change seen while detached after the client is back, not before initialized', async () => {
    const c = await resumable();
    expect(await c.request('fs/watchMissing', { watchId: 1, missing: [uri('appears-later')] })).toEqual({ watching: true });
    const detached = new Promise<void>((resolve) => server.server.once('session-detached', () => resolve()));
    await c.drop();
    await detached; // from here on the change can only be told after a resume
    writeFileSync(join(dir, 'appears-later'), '');
    const again = await pool.connect(server.url);
    await again.request('initialize', { clientName: 'fs-test', resumeSessionId: c.sessionId, tether: { version: 1, extensions: ['fsResume'] } });
    expect(again.notifications).toEqual([]); // nothing before `initialized`
    again.notify('initialized', {});
    const note = await again.waitFor((f) => f.method === 'fs/missingChanged', 10_000, true);
    expect(note.params).toEqual({ watchId: 1 });
    // The watch is spent; ids are per connection, so the resumed client may use 1 again.
    expect(await again.request('fs/watchMissing', { watchId: 1, missing: [uri('another')] })).toEqual({ watching: true });
  });
});
