/**
 * `tether gateway --stdio` under a host that sends requests and does not read the answers:
 * once stdout holds more than its mark, the gateway stops reading stdin (the requests wait in
 * the host's pipe), its memory stays bounded, no 'drain' listener piles up; when the host
 * reads, every request gets its one answer, in order.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants as fsConstants, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { makeFifo, tryWrite } from './helpers/fifo.js';
import { node, tetherBin } from './helpers/mcp-peers.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function rssBytes(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

const MiB = 1 << 20;
/** Requests the host sends: their answers (about 2.3 KB each) are far more than the mark. */
const N = 20_000;
const request = (id: number) => `{"jsonrpc":"2.0","id":${id},"method":"tools/list"}\n`;

describe('tether gateway --stdio: backpressure from stdout to stdin', () => {
  it('stops reading stdin while its host does not read stdout; bounded memory; then every request answered once, in order', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-backpressure-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const config = path.join(dir, 'tether.json');
    writeFileSync(config, JSON.stringify({ mcpServers: {} }));
    const stdin = makeFifo(dir, 'stdin');
    const stdout = makeFifo(dir, 'stdout');
    cleanups.push(() => {
      stdin.close();
      stdout.close();
    });
    const child: ChildProcess = spawn(node, [tetherBin, 'gateway', config, '--stdio', '--verbose'], { stdio: [stdin.fd, stdout.fd, 'pipe'] });
    cleanups.push(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const pid = child.pid!;

    const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'flood', version: '1' } } };
    expect(tryWrite(stdin.writer, `${JSON.stringify(initialize)}\n{"jsonrpc":"2.0","method":"notifications/initialized"}\n`)).toBe(true);
    await expect.poll(() => stderr, { timeout: 20_000 }).toMatch(/stdio host: 2025 era/);
    const baseline = rssBytes(pid);

    // The host writes as fast as the pipe takes, never reading stdout. It stops when the
    // gateway has said it paused stdin and a write after that is refused (the pipe full): from
    // then on nothing is read, since nobody drains stdout. On a gateway that reads without
    // bound, all N go in.
    let sent = 0;
    const pushRequests = (): boolean => {
      while (sent < N) {
        if (!tryWrite(stdin.writer, request(sent + 1))) return false;
        sent++;
      }
      return true;
    };
    await expect
      .poll(
        () => {
          const pausedBefore = /stdin paused/.test(stderr);
          return pushRequests() || pausedBefore;
        },
        { timeout: 60_000, interval: 20 },
      )
      .toBe(true);
    const held = rssBytes(pid) - baseline;
    if (process.env.TETHER_TEST_VERBOSE) console.log(`stopped after ${sent} of ${N} requests; RSS +${(held / MiB).toFixed(1)} MiB`);
    expect(sent).toBeLessThan(N);
    expect(tryWrite(stdin.writer, request(sent + 1))).toBe(false);
    expect(held).toBeLessThan(64 * MiB);
    expect(stderr).not.toMatch(/MaxListenersExceededWarning/);
    expect(stderr).toMatch(/stdout: \d+ bytes not read by the host: stdin paused/);

    // The host reads: every request answered exactly once, in order, and nothing else on stdout.
    const readFd = openSync(stdout.path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK);
    const reader = new Socket({ fd: readFd, readable: true, writable: false });
    cleanups.push(() => reader.destroy());
    const ids: number[] = [];
    let initialized = false;
    const bad: string[] = [];
    createInterface({ input: reader }).on('line', (line) => {
      const msg = JSON.parse(line) as { id?: number; result?: { tools?: unknown[]; protocolVersion?: string } };
      if (msg.id === 0 && msg.result?.protocolVersion) initialized = true;
      else if (typeof msg.id === 'number' && Array.isArray(msg.result?.tools)) ids.push(msg.id);
      else bad.push(line.slice(0, 200));
    });
    await expect
      .poll(
        () => {
          pushRequests();
          return ids.length;
        },
        { timeout: 120_000, interval: 20 },
      )
      .toBe(N);
    expect(initialized).toBe(true);
    expect(bad).toEqual([]);
    expect(ids).toEqual(Array.from({ length: N }, (_, i) => i + 1));
    expect(stderr).toMatch(/stdout drained: reading stdin again/);
    expect(stderr).not.toMatch(/MaxListenersExceededWarning/);

    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  }, 240_000);
});
