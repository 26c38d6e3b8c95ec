/**
 * The package as users get it (issue #23): the tarball `npm run pack` makes, installed into an
 * empty directory on a PATH with no C compiler, make or python3 — once as npm installs it and
 * once with --ignore-scripts. Nothing is compiled at install: the prebuilt keeper and addon
 * serve, npm warns about no install script of ours, and there: `npx tether --version` names
 * the prebuild, `tether serve` + `tether exec`, the library imported from a plain .mjs file,
 * and its types checked by a TypeScript consumer. (Was test/package.test.ts, which packed the
 * repo as it is and compiled the native part at install.)
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { arch, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { barePath, cleanEnv, COMPILER_TOOLS, emptyProject, npmInstall, repoRoot, requireTools, run, startServe, tarball, which } from '../helpers/install.js';

const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { name: string; version: string };
const dir = mkdtempSync(path.join(tmpdir(), 'tether-pack-'));
const PATH = barePath(path.join(dir, 'bin'));
/** The user's environment, but a PATH of node, npm and basic tools only. */
const env = { ...cleanEnv, PATH };
const servers: { kill(): void }[] = [];
const installs: Record<'plain' | 'ignoreScripts', { app: string; npmOutput: string }> = {
  plain: { app: path.join(dir, 'app'), npmOutput: '' },
  ignoreScripts: { app: path.join(dir, 'app-ignore-scripts'), npmOutput: '' },
};
let files: string[] = [];
let packed: Record<string, unknown> = {};

beforeAll(async () => {
  requireTools('tar');
  const listing = execFileSync('tar', ['tzf', tarball()], { encoding: 'utf8' });
  files = listing.split('\n').filter(Boolean).map((f) => f.replace(/^package\//, ''));
  packed = JSON.parse(execFileSync('tar', ['xzf', tarball(), '-O', 'package/package.json'], { encoding: 'utf8' })) as Record<string, unknown>;
  installs.plain.npmOutput = await npmInstall(emptyProject(installs.plain.app), env);
  installs.ignoreScripts.npmOutput = await npmInstall(emptyProject(installs.ignoreScripts.app), env, '--ignore-scripts');
}, 300_000);

afterAll(() => {
  for (const s of servers) s.kill();
  rmSync(dir, { recursive: true, force: true });
});

describe('the packed package', () => {
  it('has a package.json with nothing that runs at install and no devDependencies', () => {
    const scripts = (packed.scripts ?? {}) as Record<string, string>;
    for (const lifecycle of ['preinstall', 'install', 'postinstall', 'prepare', 'prepack', 'postpack']) expect(scripts).not.toHaveProperty(lifecycle);
    expect(scripts).toEqual({ 'build:native': 'node-gyp rebuild --directory=native' });
    expect(packed).not.toHaveProperty('devDependencies');
    expect(packed).not.toHaveProperty('private'); // the clone's is, as a guard; the tarball is published
    expect(packed).not.toHaveProperty('gypfile');
    expect(Object.keys(packed.dependencies as object)).not.toContain('bufferutil');
    expect(packed.version).toBe(pkg.version);
  });

  it('holds what runs, the native sources, the six prebuilds, and nothing else', () => {
    expect(files).toEqual(expect.arrayContaining(['package.json', 'LICENSE', 'README.md', 'bin/tether.js', 'dist/index.js', 'dist/index.d.ts', 'dist/cli/main.js', 'dist/bundle/main.js']));
    // Every source of the native part (for `npm run build:native`), whatever it grows to.
    const native = execFileSync('git', ['ls-files', 'native'], { cwd: repoRoot, encoding: 'utf8' }).split('\n').filter(Boolean);
    expect(native.length).toBeGreaterThan(0);
    expect(files).toEqual(expect.arrayContaining(native));
    const prebuilds = ['x64', 'arm64'].flatMap((a) => ['tether-keeper', 'tether_native.glibc.node', 'tether_native.musl.node'].map((f) => `prebuilds/linux-${a}/${f}`));
    expect(files.filter((f) => f.startsWith('prebuilds/')).sort()).toEqual(prebuilds.sort());
    const strays = files.filter((f) => !/^(package\.json|LICENSE|README\.md|bin\/tether\.js|dist\/.+\.(js|d\.ts)|native\/[^/]+\.(c|h|gyp|sh))$/.test(f) && !prebuilds.includes(f));
    expect(strays).toEqual([]);
    expect(files.some((f) => f.startsWith('src/') || f.startsWith('test/') || f.startsWith('scripts/') || f.includes('tsbuildinfo'))).toBe(false);
  });

  it('installs on a PATH without a compiler, make or python3, and npm names no script of ours', () => {
    // The PATH really has none of them (else this test proves nothing).
    expect(COMPILER_TOOLS.filter((t) => which(t, PATH))).toEqual([]);
    for (const { npmOutput, app } of Object.values(installs)) {
      const warnings = npmOutput.split('\n').filter((l) => /^npm (warn|WARN|error|ERR)/.test(l));
      expect(warnings.filter((l) => l.includes(pkg.name))).toEqual([]);
      // npm 11 lists every dependency whose install script it did not run: none should have one.
      expect(warnings.filter((l) => /install-scripts|install:|postinstall|preinstall|node-gyp/.test(l))).toEqual([]);
      const installed = path.join(app, 'node_modules', pkg.name);
      expect(statSync(path.join(installed, 'prebuilds', `linux-${arch()}`, 'tether-keeper')).mode & 0o111).toBe(0o111);
      expect(() => statSync(path.join(installed, 'native', 'build'))).toThrow(); // nothing was compiled
    }
  });

  it.each(['plain', 'ignoreScripts'] as const)('installed (%s): npx tether --version names the prebuild; tether serve + tether exec; the library from a plain .mjs', async (which) => {
    const { app } = installs[which];
    const { stdout: versionOut } = await run('npx', ['tether', '--version'], { cwd: app, env });
    expect(versionOut).toBe(`tether ${pkg.version} (native: prebuild linux-${arch()} glibc)\n`);

    const bin = path.join(app, 'node_modules', '.bin', 'tether');
    const { url, child } = await startServe(bin, env, app);
    servers.push(child);
    expect(url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    const { stdout: execOut } = await run(bin, ['exec', '--url', url, 'sh', '-c', 'echo "ran $0 remotely"'], { cwd: app, env });
    expect(execOut).toBe('ran sh remotely\n');

    // The library from plain Node: the root export and a subpath, no TypeScript loader.
    writeFileSync(
      path.join(app, 'use.mjs'),
      `import * as root from 'tether-exec';
import * as sub from 'tether-exec/client';
const { ExecClient, startServer, ExecStdioClientTransport, Gateway, ChaosProxy } = root;
for (const [name, value] of Object.entries({ startServer, ExecStdioClientTransport, Gateway, ChaosProxy })) {
  if (typeof value !== 'function') throw new Error(name + ' is not exported');
}
// What a client user catches comes from the client subpath too, the same classes as the root's.
const clientExports = ['ExecClient', 'ExecProcess', 'RpcError', 'ErrorCode', 'SessionLostError', 'OutputLostError', 'AuthRefusedError', 'RemoteFsError', 'OutcomeUnknownError'];
for (const name of clientExports) {
  if (sub[name] === undefined) throw new Error(name + ' is not exported from tether-exec/client');
  if (name in root && root[name] !== sub[name]) throw new Error('two ' + name + ' from tether-exec and tether-exec/client');
}
if (!('RpcError' in root) || !('ErrorCode' in root)) throw new Error('RpcError or ErrorCode gone from tether-exec');
const client = await ExecClient.connect(process.argv[2]);
const proc = client.spawn(['echo', 'from a plain .mjs']);
let out = '';
proc.stdout.on('data', (chunk) => (out += chunk));
const code = await proc.exited;
await proc.closed;
// A start failure is an RpcError a user can test for with the class from tether-exec/client.
const failed = await client.spawn(['/no/such/program']).exited.then(() => 'started', (err) => err instanceof sub.RpcError && err.code === sub.ErrorCode.InternalError ? err.message : 'other: ' + err);
await client.close();
process.stdout.write(code + ' ' + out + failed + '\\n');
`,
    );
    const { stdout: libOut } = await run('node', ['use.mjs', url], { cwd: app, env });
    expect(libOut).toBe("0 from a plain .mjs\ncannot start '/no/such/program': No such file or directory (os error 2)\n");
    child.kill('SIGTERM');
  });

  it('ships types that resolve through the exports map', async () => {
    const { app } = installs.plain;
    writeFileSync(
      path.join(app, 'consumer.ts'),
      `import { ExecClient, SessionLostError, type ExecClientOptions } from 'tether-exec';
import { ExecStdioClientTransport } from 'tether-exec/mcp';
import { ErrorCode, RpcError, type StartErrorDetail } from 'tether-exec/client';
export function stage(err: unknown): string | undefined {
  return err instanceof RpcError && err.code === ErrorCode.InternalError ? (err.data as StartErrorDetail | undefined)?.stage : undefined;
}
const options: ExecClientOptions = { recoveryDeadlineMs: 5000 };
export async function main(url: string): Promise<number> {
  const client = await ExecClient.connect(url, options);
  const code: number = await client.spawn(['true']).exited;
  new ExecStdioClientTransport({ url, command: 'cat' });
  return code + (new SessionLostError('closed') instanceof Error ? 0 : 1);
}
`,
    );
    const tsc = path.join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc');
    const args = ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--typeRoots', path.join(repoRoot, 'node_modules', '@types'), 'consumer.ts'];
    await expect(run(process.execPath, [tsc, ...args], { cwd: app, env })).resolves.toBeDefined();
  });
});
