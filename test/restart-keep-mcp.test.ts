/**
 * An MCP server under `tether mcp` across a restart of its tether server (issue #27): the
 * bridge's server is `tether serve` with a state dir, run as a child process; a long-running
 * tools/call is in flight when the server is killed -9 and a successor starts on the same
 * port and state dir. The call is answered once (a second answer would reach the host as a
 * response to an unknown id, an error) — by the same MCP server process, the only one that
 * knows the call — and the host never sees the bridge close.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterEach, describe, expect, it } from 'vitest';
import { tetherArgs } from './helpers/cli.js';
import { everything, node, repoRoot, tetherBin, text } from './helpers/mcp-peers.js';

const children: ChildProcess[] = [];
const dirs: string[] = [];
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {});
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function serve(dir: string, port: number): Promise<{ child: ChildProcess; url: string; exited: Promise<void> }> {
  const child = spawn(node, tetherArgs(['serve', '--port', String(port), '--state-dir', dir, '--adopt-within', '10s']), {
    stdio: ['ignore', 'pipe', 'ignore'],
    env: { ...process.env, TETHER_TOKEN: '' },
  });
  children.push(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    void exited.then(() => reject(new Error('tether serve exited before printing its URL')));
  });
  return { child, url, exited };
}

describe('tether mcp across a restart of its server (state dir)', () => {
  it('a tools/call in flight across kill -9 is answered once, by the same MCP server', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-keep-mcp-'));
    dirs.push(dir);
    const first = await serve(dir, 0);
    const transport = new StdioClientTransport({
      command: node,
      args: [tetherBin, 'mcp', '--url', first.url, '--', everything.command, ...everything.args],
      cwd: repoRoot,
      stderr: 'pipe',
    });
    transport.stderr!.on('data', () => {});
    const client = new Client({ name: 'mcp-host', version: '0.0.0' });
    const errors: Error[] = [];
    let closes = 0;
    client.onerror = (e) => errors.push(e);
    client.onclose = () => closes++;
    await client.connect(transport);
    cleanups.push(() => client.close());
    let firstProgress!: () => void;
    const progressed = new Promise<void>((resolve) => (firstProgress = resolve));
    const progress: number[] = [];
    const long = client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 1.5, steps: 5 } }, undefined, {
      onprogress: (p) => {
        progress.push(p.progress);
        firstProgress();
      },
      timeout: 30_000,
    });
    await progressed;
    first.child.kill('SIGKILL');
    await first.exited;
    const second = await serve(dir, Number(new URL(first.url).port));
    expect(text(await long)).toBe('Long running operation completed. Duration: 1.5 seconds, Steps: 5.');
    expect(text(await client.callTool({ name: 'echo', arguments: { message: 'after' } }))).toBe('Echo: after');
    expect(errors.filter((e) => !/progress notification for an unknown token/.test(e.message))).toEqual([]);
    expect(closes).toBe(0);
    expect(progress).toEqual(progress.map((_, i) => i + 1));
    second.child.kill('SIGKILL');
  }, 40_000);
});
