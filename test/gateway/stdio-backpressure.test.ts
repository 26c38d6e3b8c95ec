/**
 * `tether gateway --stdio` under a host that sends requests and does not read the answers:
 * once stdout holds more than its mark, the gateway stops reading stdin (the requests wait in
 * the host's pipe), its memory stays bounded, no 'drain' listener piles up; when the host
 * reads, every request gets its one answer, in order. SIGTERM still stops it while held.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { constants as fsConstants, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { makeFifo, tryWrite, type Fifo } from '../helpers/fifo.js';
import { node, tetherBin } from '../helpers/mcp-peers.js';

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

/** How each era opens and asks: 2025 (initialize first), 2026-07-28 (the envelope on every request). */
const eras = {
  '2025': {
    log: /stdio host: 2025 era/,
    opening: [
      { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'flood', version: '1' } } },
      { jsonrpc: '2.0', method: 'notifications/initialized' },
    ],
    request: (id: number) => `{"jsonrpc":"2.0","id":${id},"method":"tools/list"}\n`,
    opened: (result: Record<string, unknown>) => typeof result.protocolVersion === 'string',
  },
  '2026-07-28': {
    log: /stdio host: 2026-07-28 era/,
    opening: [{ jsonrpc: '2.0', id: 0, method: 'server/discover', params: { _meta: envelope() } }],
    request: (id: number) => `${JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/list', params: { _meta: envelope() } })}\n`,
    opened: (result: Record<string, unknown>) => Array.isArray(result.supportedVersions),
  },
};
function envelope(): Record<string, unknown> {
  return {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientInfo': { name: 'flood', version: '1' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
}
type Era = (typeof eras)[keyof typeof eras];

interface Flooded {
  child: ChildProcess;
  stdout: Fifo;
  stderr: () => string;
  /** Writes more requests while the pipe takes them; true once all N are sent. */
  pushRequests: () => boolean;
  sent: () => number;
  /** RSS grown since the host opened. */
  held: number;
}

/**
 * Starts the gateway on two FIFOs, opens in `era`, then writes requests as fast as the pipe
 * takes them, never reading stdout. It stops when the gateway has said it paused stdin and a
 * write after that is refused (the pipe full): from then on nothing is read, since nobody
 * drains stdout. On a gateway that reads without bound, all N go in.
 */
async function flood(era: Era): Promise<Flooded> {
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
  const child = spawn(node, [tetherBin, 'gateway', config, '--stdio', '--verbose'], { stdio: [stdin.fd, stdout.fd, 'pipe'] });
  cleanups.push(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const pid = child.pid!;

  expect(tryWrite(stdin.writer, era.opening.map((m) => `${JSON.stringify(m)}\n`).join(''))).toBe(true);
  await expect.poll(() => stderr, { timeout: 20_000 }).toMatch(era.log);
  const baseline = rssBytes(pid);

  let sent = 0;
  const pushRequests = (): boolean => {
    while (sent < N) {
      if (!tryWrite(stdin.writer, era.request(sent + 1))) return false;
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
  return { child, stdout, stderr: () => stderr, pushRequests, sent: () => sent, held };
}

function exitOf(child: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  return new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })));
}

describe('tether gateway --stdio: backpressure from stdout to stdin', () => {
  for (const [name, era] of Object.entries(eras)) {
    it(`${name} host: stops reading stdin while the host does not read stdout, memory bounded; then every request answered once, in order`, async () => {
      const f = await flood(era);
      // Held back: the host's pipe is full and stays so; the gateway did not read on.
      expect(f.sent()).toBeLessThan(N);
      // What was read before the pause, its answers and the heap's own growth (about 20 to
      // 40 MiB here); a gateway reading on holds all N answers (180 MiB and more).
      expect(f.held).toBeLessThan(96 * MiB);
      expect(f.stderr()).not.toMatch(/MaxListenersExceededWarning/);
      expect(f.stderr()).toMatch(/stdout: \d+ bytes not read by the host: stdin paused/);

      // The host reads: every request answered exactly once, in order, and nothing else on stdout.
      const reader = new Socket({ fd: openSync(f.stdout.path, fsConstants.O_RDONLY | fsConstants.O_NONBLOCK), readable: true, writable: false });
      cleanups.push(() => reader.destroy());
      const ids: number[] = [];
      let opened = false;
      const bad: string[] = [];
      createInterface({ input: reader }).on('line', (line) => {
        const msg = JSON.parse(line) as { id?: number; result?: Record<string, unknown> };
        if (msg.id === 0 && msg.result && era.opened(msg.result)) opened = true;
        else if (typeof msg.id === 'number' && Array.isArray(msg.result?.tools)) ids.push(msg.id);
        else bad.push(line.slice(0, 300));
      });
      await expect
        .poll(
          () => {
            f.pushRequests();
            return ids.length + bad.length;
          },
          { timeout: 120_000, interval: 20 },
        )
        .toBe(N);
      expect(bad).toEqual([]);
      expect(opened).toBe(true);
      expect(ids).toEqual(Array.from({ length: N }, (_, i) => i + 1));
      expect(f.stderr()).toMatch(/stdout drained: reading stdin again/);
      expect(f.stderr()).not.toMatch(/MaxListenersExceededWarning/);

      const exited = exitOf(f.child);
      f.child.kill('SIGTERM');
      expect(await exited).toEqual({ code: 0, signal: null });
    }, 240_000);
  }

  it('SIGTERM while held (stdout full, never read): exits at once, 0', async () => {
    const f = await flood(eras['2025']);
    expect(f.sent()).toBeLessThan(N);
    const exited = exitOf(f.child);
    f.child.kill('SIGTERM');
    // Within the 5 s the docs promise (the test's timeout bounds it).
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(f.stderr()).toMatch(/shutting down \(SIGTERM\)/);
  }, 60_000);
});
