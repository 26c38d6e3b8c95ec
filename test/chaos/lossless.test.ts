/**
 * Lose nothing (issue 10). A producer runs flat out while a proxy cuts the link after every
 * 1-8 MiB it forwarded (seeded), and now and then black-holes it instead (nothing flows,
 * nothing closes: the client's keepalive, shortened here, has to notice). At every cut the
 * server's bytes sent but not acknowledged are recorded — what a server without acks would
 * have dropped — and at least 15 cuts must have had 1 MiB or more of them. Every byte arrives
 * exactly once and in order, with the right exit code: through pipes, through a pty in raw
 * mode, under a fast-check property choosing the cut points, and for `tether exec` end to end
 * (compared with cmp); with output as binary frames (extension binaryOutput, what the tether
 * client asks for) and, for pipes, as JSON + base64 too. Bounded: seeded, loopback, a few runs.
 */
import { createHash } from 'node:crypto';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy, type ConnectionReport } from '../../src/chaos/proxy.js';
import { seededRandom } from '../../src/chaos/random.js';
import { ExecClient, type ExecProcess } from '../../src/client/index.js';
import { KnownExtensions } from '../../src/protocol/index.js';
import type { ManagedProcess } from '../../src/server/output/process.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { tetherShell } from '../helpers/cli.js';
import { serverInternals } from '../../src/server/server.js';

const MiB = 1024 * 1024;
/** `seq 1 N`: about 95 MB, deterministic and cheap to produce on both sides. */
const LINES = Number(process.env.TETHER_LOSSLESS_LINES ?? 12_000_000);

let target: TetherTarget;
let proxy: ChaosProxy;
let dir: string;

beforeAll(async () => {
  // A dead socket's session is freed quickly for the resume (black holes).
  target = await startTetherServer({ livenessProbeMs: 300 });
  proxy = await ChaosProxy.inFrontOf(target.url);
  dir = mkdtempSync(join(tmpdir(), 'tether-lossless-'));
});

afterAll(async () => {
  await proxy?.close();
  await target?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** sha256 and length of `seq 1 n` as this machine prints it. */
function expectedSeq(n: number): { sha: string; bytes: number } {
  const out = execFileSync('seq', ['1', String(n)], { maxBuffer: 1 << 30 });
  return { sha: createHash('sha256').update(out).digest('hex'), bytes: out.length };
}

interface CutRecord {
  action: 'reset' | 'blackhole';
  /** Bytes the server had sent but the client had not acknowledged at the cut. */
  inFlight: number;
  /** Everything unacknowledged (in flight, and not sent yet). */
  unacknowledged: number;
  forwarded: number;
}

/** The server's side of the producer: the one process of the server's sessions. */
function serverProcess(): ManagedProcess | undefined {
  for (const session of serverInternals(target.server).sessions.values()) for (const proc of session.processes.values()) return proc;
  return undefined;
}

/** Records, at each cut of the proxy, what the server had not had acknowledged of the producer. */
function recordCuts(): { cuts: CutRecord[]; stop: () => void } {
  const cuts: CutRecord[] = [];
  const snapshot = (action: CutRecord['action'], report: ConnectionReport) => {
    const proc = serverProcess();
    cuts.push({
      action,
      inFlight: proc ? proc.unacknowledged - proc.unsent : 0,
      unacknowledged: proc?.unacknowledged ?? 0,
      forwarded: report.down.forwarded,
    });
  };
  const onClose = (report: ConnectionReport, reason: string) => {
    if (reason === 'quota') snapshot('reset', report);
  };
  const onHole = (report: ConnectionReport) => snapshot('blackhole', report);
  proxy.on('close', onClose);
  proxy.on('blackholed', onHole);
  return {
    cuts,
    stop: () => {
      proxy.off('close', onClose);
      proxy.off('blackholed', onHole);
    },
  };
}

/** Hashes a process's stdout as it streams (nothing kept: 95 MB stays out of the test's memory). */
function digest(proc: ExecProcess): Promise<{ sha: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  proc.stdout.on('data', (chunk: Buffer) => {
    hash.update(chunk);
    bytes += chunk.length;
  });
  return new Promise((resolve, reject) => {
    proc.stdout.on('end', () => resolve({ sha: hash.digest('hex'), bytes }));
    proc.stdout.on('error', reject);
  });
}

/** What `sha256sum` reading the process's output from a local pipe printed (bytes: checked by the hash). */
async function sinkDigest(hasher: ChildProcess, proc: ExecProcess, bytes: number): Promise<{ sha: string; bytes: number }> {
  let out = '';
  hasher.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  await proc.closed;
  hasher.stdin!.end();
  await new Promise((resolve) => hasher.once('close', resolve));
  return { sha: out.split(' ')[0]!, bytes };
}

/** Cuts after every 1-8 MiB forwarded to the client; one cut in five is a black hole. */
function everyOneToEightMiB(seed: number): void {
  const random = seededRandom(seed);
  proxy.cutEachAfter(() => MiB + random() * 7 * MiB, {
    direction: 'down',
    action: () => (random() < 0.2 ? 'blackhole' : 'reset'),
  });
}

const summary = (cuts: CutRecord[]) =>
  `${cuts.length} cuts (${cuts.filter((c) => c.action === 'blackhole').length} black holes); in flight at each, KiB: ${cuts
    .map((c) => Math.round(c.inFlight / 1024))
    .join(' ')}`;

describe('lose nothing under cuts while a producer runs flat out', () => {
  // Output as binary frames (extension binaryOutput, the default), and as JSON + base64.
  // `sink`: output written to a local pipe (as `tether exec` does), the client's reused-memory
  // path (client/frame-demux.ts): bytes copied into blocks that are reused once written.
  for (const { tty, binary, sink } of [
    { tty: false, binary: true, sink: false },
    { tty: false, binary: false, sink: false },
    { tty: true, binary: true, sink: false },
    { tty: false, binary: true, sink: true },
  ]) {
    const what = `${tty ? 'a pty in raw mode' : 'pipes'}, ${binary ? 'binary frames' : 'JSON output'}${sink ? ', into a local pipe' : ''}`;
    it(`${what}: every byte once and in order through cuts after every 1-8 MiB and black holes`, async () => {
      // With binary frames the client keeps up better (a pty is read in small pieces besides),
      // so less is in flight at each cut: twice the output gives as many cuts with 1 MiB or more.
      const lines = binary ? 2 * LINES : LINES;
      const expected = expectedSeq(lines);
      let client: ExecClient | undefined;
      const { cuts, stop } = recordCuts();
      try {
        client = await ExecClient.connect(proxy.url, {
          clientName: 'lossless',
          keepaliveIntervalMs: 100,
          keepaliveTimeoutMs: 400,
          extensions: binary ? KnownExtensions : KnownExtensions.filter((name) => name !== 'binaryOutput'),
        });
        expect(client.extensions.has('acks')).toBe(true);
        expect(client.extensions.has('binaryOutput')).toBe(binary);
        everyOneToEightMiB(tty ? 2 : binary ? 1 : 4);
        const argv = tty ? ['sh', '-c', `stty raw -echo; exec seq 1 ${lines}`] : ['seq', '1', String(lines)];
        const hasher = sink ? spawn('sha256sum', [], { stdio: ['pipe', 'pipe', 'inherit'] }) : null;
        const proc = client.spawn(argv, { tty, ...(hasher ? { stdout: hasher.stdin! } : {}) });
        const got = hasher ? sinkDigest(hasher, proc, expected.bytes) : digest(proc);
        expect(await proc.exited).toBe(0);
        expect(await got).toEqual(expected);
        console.log(`${what}: ${summary(cuts)}`);
        expect(cuts.filter((c) => c.inFlight >= MiB).length).toBeGreaterThanOrEqual(15);
        expect(cuts.some((c) => c.action === 'blackhole')).toBe(true);
      } finally {
        stop();
        proxy.heal();
        await client?.close();
      }
    }, 180_000);
  }

  it('any cut points (property): every byte once and in order, the right exit code', async () => {
    const lines = 2_500_000; // about 19 MB per run
    const expected = expectedSeq(lines);
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ after: fc.integer({ min: 16 * 1024, max: 6 * MiB }), hole: fc.boolean() }), { minLength: 2, maxLength: 6 }),
        fc.integer({ min: 0, max: 9 }),
        async (points, code) => {
          let client: ExecClient | undefined;
          const queue = [...points];
          const next = queue[0];
          // Cut point k applies to the k-th connection; after the last one the link stays up.
          proxy.cutEachAfter(() => queue[0]?.after ?? Number.MAX_SAFE_INTEGER, {
            direction: 'down',
            action: () => (queue.shift()?.hole ? 'blackhole' : 'reset'),
          });
          try {
            client = await ExecClient.connect(proxy.url, { clientName: 'lossless-property', keepaliveIntervalMs: 100, keepaliveTimeoutMs: 400 });
            const proc = client.spawn(['sh', '-c', `seq 1 ${lines}; exit ${code}`]);
            const got = digest(proc);
            expect(await proc.exited).toBe(code);
            expect(await got).toEqual(expected);
            expect(next === undefined || queue.length < points.length).toBe(true); // the link was cut
          } finally {
            proxy.heal();
            await client?.close();
          }
        },
      ),
      { numRuns: Number(process.env.TETHER_LOSSLESS_RUNS ?? 3), seed: 10, endOnFailure: true },
    );
  }, 240_000);

  it('tether exec end to end: the output file is identical (cmp) through cuts after every 1-8 MiB and black holes', async () => {
    const expectedFile = join(dir, 'expected');
    const outFile = join(dir, 'out');
    execFileSync('sh', ['-c', `seq 1 ${LINES} > '${expectedFile}'`]);
    const { cuts, stop } = recordCuts();
    everyOneToEightMiB(3);
    try {
      const run = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
        const child = spawn(
          'bash',
          ['-c', `${tetherShell(['exec', '--url', proxy.url, '--keepalive-timeout', '400ms', '--', 'seq', '1', String(LINES)])} > '${outFile}'`],
          { stdio: ['ignore', 'ignore', 'pipe'] },
        );
        let stderr = '';
        child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
        child.on('error', reject);
        child.on('close', (code) => resolve({ code, stderr }));
      });
      expect(run.code, run.stderr).toBe(0);
      execFileSync('cmp', [expectedFile, outFile]); // throws (exit 1) at the first differing byte
      console.log(`tether exec: ${summary(cuts)}`);
      expect(cuts.filter((c) => c.inFlight >= MiB).length).toBeGreaterThanOrEqual(15);
    } finally {
      stop();
      proxy.heal();
    }
  }, 180_000);
});
