/**
 * The package where no native build fits (macOS, Windows, another architecture): the packed
 * tarball installed (--ignore-scripts), then its native/ and prebuilds/ removed. Every client
 * command — exec, cp, ps, mcp, chaos, gateway — and every library entry works against a
 * server started from this checkout; `tether --version` says so; only `tether serve` refuses,
 * in one line naming the command that builds the native part from source. And that command
 * (a copy keeping native/'s sources) builds it with npm's own node-gyp.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { everything } from '../helpers/mcp-peers.js';
import { cleanEnv, emptyProject, firstLineOf, npmInstall, repoRoot, requireTools, run, startServe } from '../helpers/install.js';

const version = (JSON.parse(readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
const dir = mkdtempSync(path.join(tmpdir(), 'tether-client-only-'));
const app = path.join(dir, 'app');
const installed = path.join(app, 'node_modules', 'tether-exec');
const bin = path.join(app, 'node_modules', '.bin', 'tether');
const env = { ...cleanEnv, TETHER_TOKEN: '' };
let server: TetherTarget;
const children: ChildProcess[] = [];

beforeAll(async () => {
  await npmInstall(emptyProject(app), cleanEnv, '--ignore-scripts');
  rmSync(path.join(installed, 'native'), { recursive: true });
  rmSync(path.join(installed, 'prebuilds'), { recursive: true });
  server = await startTetherServer({});
}, 300_000);

afterAll(async () => {
  for (const c of children) c.kill('SIGTERM');
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts a long-running command; resolves with its first stdout line. */
async function firstLine(args: string[]): Promise<{ line: string; child: ChildProcess }> {
  const child = spawn(bin, args, { cwd: app, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return { line: await firstLineOf(child, `tether ${args.join(' ')}`), child };
}

describe('installed without any native part', () => {
  it('tether --version says: client commands only, and what serve needs', async () => {
    expect(existsSync(path.join(installed, 'native')) || existsSync(path.join(installed, 'prebuilds'))).toBe(false);
    const { stdout } = await run(bin, ['--version'], { cwd: app, env });
    expect(stdout).toBe(`tether ${version} (native: none — client commands only; serve needs: cd ${installed} && npm run build:native)\n`);
  });

  it('tether serve refuses in one line naming the one command that builds it', async () => {
    const failed = await run(bin, ['serve', '--port', '0'], { cwd: app, env }).then(
      () => undefined,
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
    expect(failed).toMatchObject({ code: 1, stdout: '' });
    expect(failed!.stderr.trimEnd().split('\n')).toEqual([expect.stringContaining(`\`cd ${installed} && npm run build:native\``)]);
    expect(failed!.stderr).toContain('has no prebuild for linux-');
  });

  it('tether exec, cp and ps work', async () => {
    const exec = await run(bin, ['exec', '--url', server.url, 'sh', '-c', 'echo "exec ran"; exit 3'], { cwd: app, env }).catch((e: { code: number; stdout: string }) => e);
    expect(exec).toMatchObject({ code: 3, stdout: 'exec ran\n' });

    const local = path.join(dir, 'up.txt');
    writeFileSync(local, 'copied both ways\n');
    await run(bin, ['cp', '-q', '--url', server.url, local, `:${path.join(dir, 'remote.txt')}`], { cwd: app, env });
    const back = await run(bin, ['cp', '--url', server.url, `:${path.join(dir, 'remote.txt')}`, '-'], { cwd: app, env });
    expect(back.stdout).toBe('copied both ways\n');

    // A process left running by a tether exec still connected: ps lists it.
    const marker = `sleep 31.${process.pid}`;
    const { child } = await firstLine(['exec', '--url', server.url, 'sh', '-c', `echo started; exec ${marker}`]);
    const ps = await run(bin, ['ps', '--url', server.url], { cwd: app, env });
    expect(ps.stdout.split('\n')[0]).toMatch(/^SESSION\s+CLIENT/);
    expect(ps.stdout).toContain(marker);
    child.kill('SIGTERM');
  });

  it('tether mcp bridges a remote stdio MCP server', async () => {
    const child = spawn(bin, ['mcp', '--url', server.url, '--', ...[everything.command, ...everything.args]], { cwd: app, env, stdio: ['pipe', 'pipe', 'pipe'] });
    children.push(child);
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]!) as Record<string, unknown>);
      });
      child.once('exit', (code) => reject(new Error(`tether mcp exited ${code}`)));
    });
    child.stdin!.write(`${JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'install-test', version: '0' } } })}\n`);
    expect(await answer).toMatchObject({ jsonrpc: '2.0', id: 1, result: { serverInfo: { name: expect.any(String) } } });
    child.stdin!.end();
  });

  it('tether chaos forwards to the server; tether gateway runs a server through it', async () => {
    const { line: proxied } = await firstLine(['chaos', '--to', server.url, '--latency', '5ms', '--quiet']);
    const through = await run(bin, ['exec', '--url', proxied.startsWith('ws://') ? proxied : `ws://${proxied}`, 'echo', 'through chaos'], { cwd: app, env });
    expect(through.stdout).toBe('through chaos\n');

    const config = path.join(dir, 'mcp.json');
    writeFileSync(config, JSON.stringify({ mcpServers: { everything: { ...everything, tether: { url: server.url } } } }));
    const { line: gatewayUrl } = await firstLine(['gateway', '--listen', 'http://127.0.0.1:0', config]);
    await expect
      .poll(async () => (await fetch(new URL('/readyz', gatewayUrl))).status, { timeout: 30_000, interval: 200 })
      .toBe(200);
  });

  it('every library entry imports; the client, MCP transport and chaos proxy work; startServer refuses as serve does', async () => {
    writeFileSync(
      path.join(app, 'entries.mjs'),
      `import * as root from 'tether-exec';
import { ExecClient } from 'tether-exec/client';
import { ExecStdioClientTransport } from 'tether-exec/mcp';
import { Gateway } from 'tether-exec/gateway';
import { ChaosProxy } from 'tether-exec/chaos';
const url = process.argv[2];
if (root.ExecClient !== ExecClient || root.Gateway !== Gateway || root.ChaosProxy !== ChaosProxy) throw new Error('entries disagree');
const proxy = await ChaosProxy.inFrontOf(url);
const client = await ExecClient.connect(proxy.url);
const proc = client.spawn(['echo', 'library ok']);
let out = '';
proc.stdout.on('data', (chunk) => (out += chunk));
const code = await proc.exited;
await proc.closed;
await client.close();
await proxy.close();
const transport = new ExecStdioClientTransport({ url, command: 'cat' });
const messages = [];
transport.onmessage = (m) => messages.push(m);
await transport.start();
await transport.send({ jsonrpc: '2.0', method: 'echoed/by-cat' });
while (messages.length === 0) await new Promise((r) => setTimeout(r, 20));
await transport.close();
let refused = '';
await root.startServer({ port: 0 }).then((s) => s.close(), (err) => (refused = err.message));
process.stdout.write(JSON.stringify({ code, out, echoed: messages[0].method, gateway: typeof Gateway, refused }));
`,
    );
    const { stdout } = await run('node', ['entries.mjs', server.url], { cwd: app, env });
    expect(JSON.parse(stdout)).toEqual({
      code: 0,
      out: 'library ok\n',
      echoed: 'echoed/by-cat',
      gateway: 'function',
      refused: expect.stringContaining(`cd ${installed} && npm run build:native`),
    });
  });
});

describe('the command the error names', () => {
  it('builds the native part from source (npm run build:native: npm provides node-gyp), and serve then runs', async () => {
    requireTools('cc', 'make', 'python3');
    const copy = path.join(dir, 'app-source-build');
    await npmInstall(emptyProject(copy), cleanEnv, '--ignore-scripts');
    const pkgDir = path.join(copy, 'node_modules', 'tether-exec');
    rmSync(path.join(pkgDir, 'prebuilds'), { recursive: true });
    expect(existsSync(path.join(pkgDir, 'node_modules', '.bin', 'node-gyp')) || existsSync(path.join(copy, 'node_modules', '.bin', 'node-gyp'))).toBe(false);
    await run('sh', ['-c', `cd ${pkgDir} && npm run build:native`], { env: cleanEnv, timeout: 240_000 });
    const copyBin = path.join(copy, 'node_modules', '.bin', 'tether');
    expect((await run(copyBin, ['--version'], { cwd: copy, env })).stdout).toBe(`tether ${version} (native: source build)\n`);
    const { url, child } = await startServe(copyBin, env, copy);
    children.push(child);
    expect((await run(copyBin, ['exec', '--url', url, 'echo', 'source build serves'], { cwd: copy, env })).stdout).toBe('source build serves\n');
  }, 300_000);
});
