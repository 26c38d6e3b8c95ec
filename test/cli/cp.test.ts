/**
 * `tether cp` end to end: the real CLI (node bin/tether.js) against an in-process tether
 * server through the chaos proxy. The big test copies a file up and back down while the link
 * is cut after every 3-9 MiB (seeded) and checks it byte for byte. Its size is
 * TETHER_CP_TEST_MIB (default 32; the 200 MiB run: TETHER_CP_TEST_MIB=200).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync, createWriteStream, existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { seededRandom } from '../../src/chaos/random.js';
import { parseCpArgs } from '../../src/cli/cp.js';
import { UsageError } from '../../src/cli/usage.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

const MiB = 1024 * 1024;
const SIZE_MIB = Number(process.env.TETHER_CP_TEST_MIB ?? 32);
let target: TetherTarget;
let proxy: ChaosProxy;
let root: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'tether-cp-'));
  target = await startTetherServer();
  proxy = await ChaosProxy.inFrontOf(target.url);
});
afterAll(async () => {
  await proxy?.close();
  await target?.stop();
  rmSync(root, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: Buffer;
  stderr: string;
}

function tether(args: string[], input?: Buffer): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bin/tether.js', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => out.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout: Buffer.concat(out), stderr }));
    child.stdin.end(input);
  });
}

/** A file of `mib` MiB in which every MiB differs (a block written twice or misplaced shows). */
async function bigFile(path: string, mib: number, seed: number): Promise<string> {
  const random = seededRandom(seed);
  const base = Buffer.alloc(MiB);
  for (let i = 0; i < MiB; i += 4) base.writeUInt32LE(Math.floor(random() * 2 ** 32), i);
  const hash = createHash('sha256');
  const out = createWriteStream(path);
  for (let block = 0; block < mib; block++) {
    const chunk = Buffer.from(base);
    for (let at = 0; at < MiB; at += 4096) chunk.writeUInt32LE(block, at);
    hash.update(chunk);
    if (!out.write(chunk)) await new Promise<void>((resolve) => out.once('drain', () => resolve()));
  }
  await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  return hash.digest('hex');
}

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

describe('tether cp', () => {
  it(`copies a ${SIZE_MIB} MiB file up and back down byte-exact while the link is cut after every 3-9 MiB`, async () => {
    const local = join(root, 'big.bin');
    const digest = await bigFile(local, SIZE_MIB, 200);
    // Cut by bytes, not by time: a fast copy cannot slip between two cuts (seeded quotas).
    const random = seededRandom(9);
    proxy.cutEachAfter(() => (3 + random() * 6) * MiB, { direction: 'both' });
    const cutsBefore = proxy.stats().quotaCuts;
    try {
      const up = await tether(['cp', '--url', proxy.url, local, `:${join(root, 'remote.bin')}`]);
      expect(up.stderr).toMatch(/copied 1 file, /);
      expect(up.code, up.stderr).toBe(0);
      expect(sha256(join(root, 'remote.bin'))).toBe(digest);
      const down = await tether(['cp', '--url', proxy.url, `:${join(root, 'remote.bin')}`, join(root, 'back.bin')]);
      expect(down.code, down.stderr).toBe(0);
      expect(sha256(join(root, 'back.bin'))).toBe(digest);
    } finally {
      proxy.stopCuttingAfterBytes();
    }
    // The cuts really happened during the copies (at least one per copy at this size).
    expect(proxy.stats().quotaCuts - cutsBefore).toBeGreaterThanOrEqual(SIZE_MIB >= 32 ? 2 : 1);
    expect(readdirSync(root).filter((name) => name.includes('tether-partial'))).toEqual([]);
  }, 30_000 + SIZE_MIB * 1_500);

  it('copies directories both ways with cp -r naming, and files through stdin and stdout', async () => {
    const tree = join(root, 'tree');
    mkdirSync(join(tree, 'a/b'), { recursive: true });
    writeFileSync(join(tree, 'top.txt'), 'top');
    writeFileSync(join(tree, 'a/b/deep.bin'), Buffer.from([0, 1, 2, 255]));
    mkdirSync(join(tree, 'empty'));
    symlinkSync('top.txt', join(tree, 'link'));
    const remote = join(root, 'remote-tree');
    const up = await tether(['cp', '--url', target.url, tree, `:${remote}`]);
    expect(up.code, up.stderr).toBe(0);
    expect(up.stderr).toMatch(/skipped .*link \(a symbolic link\)/);
    expect(readFileSync(join(remote, 'a/b/deep.bin'))).toEqual(Buffer.from([0, 1, 2, 255]));
    expect(statSync(join(remote, 'empty')).isDirectory()).toBe(true);
    expect(existsSync(join(remote, 'link'))).toBe(false);
    // Into an existing directory the source keeps its name.
    const again = await tether(['cp', '--url', target.url, '-q', tree, `:${remote}`]);
    expect([again.code, again.stderr]).toEqual([0, '']);
    expect(readFileSync(join(remote, 'tree/top.txt'), 'utf8')).toBe('top');

    const down = join(root, 'down');
    mkdirSync(down);
    const back = await tether(['cp', '--url', target.url, `:${remote}`, down]);
    expect(back.code, back.stderr).toBe(0);
    expect(readFileSync(join(down, 'remote-tree/a/b/deep.bin'))).toEqual(Buffer.from([0, 1, 2, 255]));
    expect(readFileSync(join(down, 'remote-tree/tree/top.txt'), 'utf8')).toBe('top');

    const cat = await tether(['cp', '--url', target.url, `:${join(tree, 'top.txt')}`, '-']);
    expect([cat.code, cat.stdout.toString()]).toEqual([0, 'top']);
    const fromStdin = await tether(['cp', '--url', target.url, '-', `:${join(root, 'from-stdin')}`], Buffer.from('piped'));
    expect(fromStdin.code, fromStdin.stderr).toBe(0);
    expect(readFileSync(join(root, 'from-stdin'), 'utf8')).toBe('piped');
  }, 60_000);

  it('fails clearly: a missing source exits 1, usage errors exit 2 on one line, an unreachable server 255', async () => {
    const missing = await tether(['cp', '--url', target.url, `:${join(root, 'nope')}`, join(root, 'x')]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/^tether cp: ENOENT: No such file or directory \(os error 2\), stat '.*nope'\n$/);
    expect(existsSync(join(root, 'x'))).toBe(false);
    const usage = await tether(['cp', '--url', target.url, 'a', 'b']);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toBe("tether cp: one side must be remote: write it with a leading colon, e.g. ':/srv/file'\nrun 'tether cp --help' for usage\n");
    const help = await tether(['cp', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout.toString()).toMatch(/^usage: tether cp \[options\] SOURCE DESTINATION/);
    const unreachable = await tether(['cp', '--url', 'ws://127.0.0.1:9', '--recovery-deadline', '1s', join(root, 'from-stdin'), ':/tmp/x']);
    expect(unreachable.code).toBe(255);
    expect(unreachable.stderr).toMatch(/cannot connect to ws:\/\/127\.0\.0\.1:9/);
  }, 60_000);

  it('parses its command line like a POSIX utility', () => {
    const env = { TETHER_URL: 'ws://127.0.0.1:1' };
    expect(parseCpArgs(['a', ':/b'], env)).toMatchObject({ url: 'ws://127.0.0.1:1', source: { side: 'local', path: 'a' }, destination: { side: 'remote', path: '/b' } });
    expect(parseCpArgs(['-r', ':/a', '-'], env)).toMatchObject({ source: { side: 'remote', path: '/a' }, destination: { side: 'stdio' } });
    // Options end at the first operand: a later '-q' is a file name.
    expect(() => parseCpArgs(['a', '-q', ':/b'], env)).toThrow(/expected SOURCE and DESTINATION, got 3 operands/);
    expect(parseCpArgs(['--', '-q', ':/b'], env)).toMatchObject({ source: { side: 'local', path: '-q' } });
    for (const [args, message] of [
      [[':/a', ':/b'], /both sides are remote/],
      [['a'], /got 1 operand$/],
      [['--bogus', 'a', ':/b'], /unknown option '--bogus'/],
      [['a', ':'], /remote path is missing/],
      [['--url'], /--url needs a value/],
    ] as const) {
      expect(() => parseCpArgs([...args], env)).toThrow(message);
      expect(() => parseCpArgs([...args], env)).toThrow(UsageError);
    }
    // No --url and no TETHER_URL: where tether serve listens by default.
    expect(parseCpArgs(['a', ':/b'], {})).toMatchObject({ url: 'ws://127.0.0.1:8765' });
    expect(parseCpArgs(['--help'], env)).toBe('help');
  });
});
