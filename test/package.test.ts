/**
 * The package as users get it: `npm pack`, the tarball installed into an empty directory
 * (dependencies from npm's cache, the native keeper compiled by its install script), then
 * there: `npx tether --version`, `tether serve` + `tether exec`, the library imported from a
 * plain .mjs file (the root and a subpath), and its types checked by a TypeScript consumer.
 *
 * The tarball is packed from the dist/ the global setup just built from the current sources
 * (`--ignore-scripts`: `prepare` would only build the same again).
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const repoRoot = path.join(import.meta.dirname, '..');
const pkg = JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { name: string; version: string };
const dir = mkdtempSync(path.join(tmpdir(), 'tether-pack-'));
const app = path.join(dir, 'app');
/** npm's own variables from `npm test` would steer the nested npm (prefix, scripts); drop them. */
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'INIT_CWD'));
let files: string[] = [];
let server: ReturnType<typeof spawn> | undefined;

beforeAll(async () => {
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: repoRoot, env });
  const [packed] = JSON.parse(stdout) as [{ filename: string; files: { path: string }[] }];
  files = packed.files.map((f) => f.path);
  mkdirSync(app);
  writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  await run('npm', ['install', path.join(dir, packed.filename), '--no-audit', '--no-fund', '--prefer-offline'], { cwd: app, env, timeout: 240_000 });
}, 300_000);

afterAll(() => {
  server?.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
});

describe('the packed package', () => {
  it('holds what runs and nothing else', () => {
    expect(files).toEqual(expect.arrayContaining(['package.json', 'LICENSE', 'README.md', 'bin/tether.js', 'dist/index.js', 'dist/index.d.ts', 'dist/cli/main.js', 'dist/bundle/main.js', 'native/keeper.c', 'native/binding.gyp']));
    // Every source of the native part (compiled at install) is there, whatever it grows to.
    const native = execFileSync('git', ['ls-files', 'native'], { cwd: repoRoot, encoding: 'utf8' }).split('\n').filter(Boolean);
    expect(native.length).toBeGreaterThan(0);
    expect(files).toEqual(expect.arrayContaining(native));
    const strays = files.filter((f) => !/^(package\.json|LICENSE|README\.md|bin\/tether\.js|dist\/.+\.(js|d\.ts)|native\/[^/]+\.(c|h|gyp|sh))$/.test(f));
    expect(strays).toEqual([]);
    expect(files.some((f) => f.startsWith('src/') || f.startsWith('test/') || f.includes('tsbuildinfo'))).toBe(false);
  });

  it('installed in an empty directory: npx tether --version, tether serve + tether exec', async () => {
    const { stdout: versionOut } = await run('npx', ['tether', '--version'], { cwd: app, env });
    expect(versionOut).toBe(`tether ${pkg.version}\n`);

    const bin = path.join(app, 'node_modules', '.bin', 'tether');
    server = spawn(bin, ['serve', '--port', '0'], { cwd: app, env: { ...env, TETHER_TOKEN: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      let err = '';
      server!.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      server!.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.split('\n')[0]!);
      });
      server!.once('exit', (code) => reject(new Error(`tether serve exited ${code}: ${err}`)));
    });
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
    const { stdout: libOut } = await run(process.execPath, ['use.mjs', url], { cwd: app, env });
    expect(libOut).toBe("0 from a plain .mjs\ncannot start '/no/such/program': No such file or directory (os error 2)\n");
  }, 120_000);

  it('ships types that resolve through the exports map', async () => {
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
  }, 120_000);
});
