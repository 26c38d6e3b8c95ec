/**
 * `client.fs`: the remote filesystem in the shape of `node:fs/promises`, against tether
 * (`npm test`) and the Codex exec-server (`npm run test:interop`), on a good link and
 * through cuts. Exactly once: reads and block reads resume; a change whose answer was lost is
 * answered from the server's memory on tether (fsResume) and fails with OutcomeUnknownError on
 * Codex, never silently re-sent.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, watch, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { pathToFileURL } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { ExecClient, OutcomeUnknownError, RemoteFsError } from '../../src/client/index.js';
import { isCodex, startTarget, type Target } from '../helpers/target.js';

const MiB = 1024 * 1024;
let target: Target;
let proxy: ChaosProxy;
let root: string;
const clients: ExecClient[] = [];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'tether-client-fs-'));
  target = await startTarget();
  proxy = await ChaosProxy.inFrontOf(target.url);
});
afterEach(async () => {
  proxy.heal();
  await Promise.all(clients.splice(0).map((c) => c.close()));
});
afterAll(async () => {
  await proxy?.close();
  await target?.stop();
  rmSync(root, { recursive: true, force: true });
});

async function connect(url = target.url): Promise<ExecClient> {
  const client = await ExecClient.connect(url, { clientName: 'client-fs-test', recoveryDeadlineMs: 20_000 });
  clients.push(client);
  return client;
}

let n = 0;
function fixture(): { dir: string; path: (rel: string) => string } {
  const dir = join(root, `t${++n}`);
  mkdirSync(dir);
  return { dir, path: (rel) => join(dir, rel) };
}

/** Seeded bytes (no Math.random in tests that must replay). */
function bytes(size: number, seed: number): Buffer {
  const out = Buffer.allocUnsafe(size);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < size; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out.writeUInt32LE(x >>> 0, Math.min(i, size - 4));
  }
  return out;
}

const sha = (data: Buffer) => createHash('sha256').update(data).digest('hex');

async function rejection(promise: Promise<unknown>): Promise<RemoteFsError> {
  try {
    await promise;
  } catch (err) {
    return err as RemoteFsError;
  }
  throw new Error('expected a rejection');
}

describe('client.fs on a good link', () => {
  it('reads, writes, lists and changes files like node:fs/promises, with Node error codes', async () => {
    const f = fixture();
    const client = await connect();
    const { fs } = client;
    expect(client.extensions.has('fsResume')).toBe(!isCodex);
    await fs.writeFile(f.path('a.txt'), 'héllo');
    expect(readFileSync(f.path('a.txt'), 'utf8')).toBe('héllo');
    expect(await fs.readFile(f.path('a.txt'), 'utf8')).toBe('héllo');
    expect(await fs.readFile(pathToFileURL(f.path('a.txt')))).toEqual(Buffer.from('héllo'));
    await fs.writeFile(f.path('b.bin'), new Uint8Array([1, 2, 3]));
    expect(await fs.readFile(f.path('b.bin'))).toEqual(Buffer.from([1, 2, 3]));

    await fs.mkdir(f.path('d/e'), { recursive: true });
    expect((await rejection(fs.mkdir(f.path('d')))).code).toBe('EEXIST');
    expect((await rejection(fs.mkdir(f.path('x/y')))).code).toBe('ENOENT');
    expect(await fs.readdir(f.dir)).toEqual(['a.txt', 'b.bin', 'd']);
    const dirents = await fs.readdir(f.dir, { withFileTypes: true });
    expect(dirents.map((d) => [d.name, d.isDirectory(), d.isFile()])).toEqual([['a.txt', false, true], ['b.bin', false, true], ['d', true, false]]);

    const stat = await fs.stat(f.path('a.txt'));
    expect([stat.isFile(), stat.isDirectory(), stat.isSymbolicLink(), stat.size]).toEqual([true, false, false, 6]);
    expect(stat.mtimeMs).toBe(Math.floor(statSync(f.path('a.txt')).mtimeMs));
    symlinkSync('a.txt', f.path('link'));
    expect((await fs.stat(f.path('link'))).isSymbolicLink()).toBe(true);
    expect(await fs.realpath(f.path('link'))).toBe(f.path('a.txt'));
    expect(await fs.exists(f.path('a.txt'))).toBe(true);
    expect(await fs.exists(f.path('nope'))).toBe(false);

    const missing = await rejection(fs.readFile(f.path('nope')));
    expect(missing).toBeInstanceOf(RemoteFsError);
    expect(missing).toMatchObject({ code: 'ENOENT', errno: -2, syscall: 'open', path: f.path('nope') });
    expect(missing.message).toBe(`ENOENT: No such file or directory (os error 2), open '${f.path('nope')}'`);
    expect((await rejection(fs.readFile(f.dir))).code).toBe('EISDIR');
    expect((await rejection(fs.readFile(f.path('a.txt/x')))).code).toBe('ENOTDIR');

    await fs.cp(f.path('d'), f.path('d2'), { recursive: true });
    expect(statSync(f.path('d2/e')).isDirectory()).toBe(true);
    expect((await rejection(fs.cp(f.path('d'), f.path('d3')))).code).toBe('EINVAL');
    // Node's rm defaults: neither recursive nor forced.
    expect((await rejection(fs.rm(f.path('nope')))).code).toBe('ENOENT');
    await fs.rm(f.path('nope'), { force: true });
    expect((await rejection(fs.rm(f.path('d')))).code).toBe('ENOTEMPTY');
    await fs.rm(f.path('d'), { recursive: true });
    expect(existsSync(f.path('d'))).toBe(false);

    const walked = await fs.walk(f.dir);
    expect(walked.entries.map((e) => `${e.path.slice(f.dir.length + 1)}:${e.kind}`)).toEqual(['a.txt:file', 'b.bin:file', 'd2:directory', 'd2/e:directory']);

    // Relative paths are relative to the server's working directory.
    const cwd = new URL((await client.environmentInfo()).cwd).pathname;
    expect(await fs.exists(join(cwd, 'package.json'))).toBe(existsSync(join(cwd, 'package.json')));
  });

  it('moves large files in pipelined blocks: readFile, writeFile, streams and handles', async () => {
    const f = fixture();
    const client = await connect();
    const big = bytes(12 * MiB + 123, 1);
    await client.fs.writeFile(f.path('big'), big); // above the whole-file size: fs/open replace + fs/writeBlock
    expect(sha(readFileSync(f.path('big')))).toBe(sha(big));
    expect(sha(await client.fs.readFile(f.path('big')))).toBe(sha(big));
    await pipeline(client.fs.createReadStream(f.path('big')), client.fs.createWriteStream(f.path('copy')));
    expect(sha(readFileSync(f.path('copy')))).toBe(sha(big));
    const part: Buffer[] = [];
    for await (const chunk of client.fs.createReadStream(f.path('big'), { start: 5, end: 14 })) part.push(chunk as Buffer);
    expect(Buffer.concat(part)).toEqual(big.subarray(5, 15));

    const handle = await client.fs.open(f.path('h'), 'w');
    await handle.write(Buffer.from('hello '));
    await handle.write(Buffer.from('world'));
    await handle.close();
    const reader = await client.fs.open(f.path('h'));
    const buffer = Buffer.alloc(32);
    expect((await reader.read(buffer, 0, 32, 6)).bytesRead).toBe(5);
    expect(buffer.subarray(0, 5).toString()).toBe('world');
    await reader.close();
  }, 60_000);

  it('a stream of a missing file fails with ENOENT', async () => {
    const f = fixture();
    const client = await connect();
    const err = await rejection(pipeline(client.fs.createReadStream(f.path('missing')), client.fs.createWriteStream(f.path('never'))));
    expect(err.code).toBe('ENOENT');
  });

  it('tells when a missing path appears, also after a reconnect that hid it', async () => {
    const f = fixture();
    const client = await connect(proxy.url);
    writeFileSync(f.path('here'), '');
    await client.fs.watchMissing([f.path('here')]); // already there: at once
    const appears = client.fs.watchMissing([f.path('later'), f.path('sub/deeper')]);
    writeFileSync(f.path('later'), '');
    await appears;
    // Created while the link is down: the client looks again after the resume.
    const afterCut = client.fs.watchMissing([f.path('during-cut')]);
    proxy.refuse(true);
    proxy.cutAll();
    writeFileSync(f.path('during-cut'), '');
    proxy.refuse(false);
    await afterCut;
    const replaced = client.fs.watchMissing([f.path('x')]);
    const replacing = client.fs.watchMissing([f.path('y')]);
    expect((await rejection(replaced)).name).toBe('AbortError');
    writeFileSync(f.path('y'), '');
    await replacing;
  });
});

describe('client.fs through cuts', () => {
  it('reads and writes a file byte-exact while the link is cut every 0.2-0.5 s', async () => {
    const f = fixture();
    const client = await connect(proxy.url);
    let recoveries = 0;
    client.on('recovered', () => recoveries++);
    const data = bytes(8 * MiB, 7);
    writeFileSync(f.path('src'), data);
    let seed = 42;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    proxy.setLatency(2);
    proxy.cutRandomly({ minMs: 200, maxMs: 500, random });
    try {
      expect(sha(await client.fs.readFile(f.path('src')))).toBe(sha(data));
      const copied: Buffer[] = [];
      for await (const chunk of client.fs.createReadStream(f.path('src'))) {
        // A fast machine can finish a read between two random cuts: cut once for certain
        // in the middle of the block reads, so the resume by offset is always exercised.
        if (copied.length === 0) proxy.cutAll();
        copied.push(chunk as Buffer);
      }
      expect(sha(Buffer.concat(copied))).toBe(sha(data));
      // Block writes resume only where the server keeps handles through drops (tether's fsResume).
      if (!isCodex) {
        await pipeline(client.fs.createReadStream(f.path('src')), client.fs.createWriteStream(f.path('dst')));
        expect(sha(readFileSync(f.path('dst')))).toBe(sha(data));
      }
    } finally {
      proxy.stopCutting();
    }
    expect(recoveries).toBeGreaterThan(0);
  }, 90_000);

  it('a remove whose answer was lost: tether answers the re-send with the original success; Codex’s gets OutcomeUnknownError', async () => {
    const f = fixture();
    writeFileSync(f.path('doomed'), '');
    const client = await connect(proxy.url);
    await client.fs.stat(f.path('doomed')); // connected and warm
    // The answer travels 400 ms: cut the link the moment the file is gone, before it arrives.
    const gone = new Promise<void>((resolve) => {
      const watcher = watch(f.dir, () => {
        if (!existsSync(f.path('doomed'))) {
          watcher.close();
          resolve();
        }
      });
    });
    proxy.setLatency(400);
    const removal = client.fs.rm(f.path('doomed')); // force: false — a second real remove would be ENOENT
    removal.catch(() => {});
    await gone;
    proxy.setLatency(0);
    expect(proxy.cutAll()).toBeGreaterThan(0);
    if (isCodex) {
      const err = await rejection(removal);
      expect(err).toBeInstanceOf(OutcomeUnknownError);
      expect(err.message).toMatch(/outcome unknown/);
    } else {
      await expect(removal).resolves.toBeUndefined();
    }
    expect(existsSync(f.path('doomed'))).toBe(false);
    // The client is usable after either outcome.
    await client.fs.writeFile(f.path('after'), 'ok');
    expect(readFileSync(f.path('after'), 'utf8')).toBe('ok');
  });
});
