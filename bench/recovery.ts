/**
 * Recovery benchmark (issue 3): how long a cut link keeps output from flowing. The tether
 * ExecClient drives each server through the chaos proxy; a child prints a numbered line every
 * millisecond, stamped with the time it was printed; the proxy resets every connection
 * (`cutAll()`) CUTS times, each once output flows again. Measured per cut: time from the cut
 * to the arrival of the first line the child printed after the cut (printed while the link was
 * down, it can only arrive through the resume's `process/read` replay; bytes already in flight
 * at the cut do not count), and the client's own downtime (drop noticed → catch-up done).
 * Checked: every line arrives exactly once, in order, and the exit code is right.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { ExecClient } from '../src/client/index.js';
import type { RecoveredEvent } from '../src/client/index.js';
import { ChaosProxy } from '../src/chaos/proxy.js';
import { ms, ratioLowerBetter, summarize, table, type Summary } from './lib/stats.js';
import { exitCleanlyOnSignalsAndCrashes, startCodexProcess, startTetherProcess, type BenchServer } from './lib/servers.js';

const CUTS = Number(process.env.BENCH_RECOVERY_CUTS ?? 25);
/** Pause after output resumes before the next cut, so each cut hits a flowing stream. */
const BETWEEN_CUTS_MS = 150;
/** A line every millisecond: a reconnect takes longer, so output is always printed while the link is down. */
const LINE_INTERVAL_S = 0.001;
/** Enough lines to outlast every cut (each costs recovery + BETWEEN_CUTS_MS). */
const LINES = Number(process.env.BENCH_RECOVERY_LINES ?? 6_000);
const EXIT_CODE = 7;
const RUN_TIMEOUT_MS = 90_000;

interface RecoveryResult {
  firstByte: Summary;
  downtime: Summary;
  cuts: number;
  /** Cuts whose first byte afterwards was printed before the new connection even existed (so replayed). */
  replayedFirst: number;
  linesOk: boolean;
  detail: string;
}

async function measure(server: BenchServer): Promise<RecoveryResult> {
  const proxy = await ChaosProxy.inFrontOf(server.url);
  const client = await ExecClient.connect(proxy.url, { clientName: 'tether-bench-recovery', recoveryDeadlineMs: 20_000 });
  const recoveries: RecoveredEvent[] = [];
  client.on('recovered', (event: RecoveredEvent) => recoveries.push(event));
  try {
    // Each line carries the wall-clock time it was printed (ms), to tell replayed output from live.
    const script =
      `use Time::HiRes qw(time); $|=1; for my $i (0..${LINES - 1}) { printf "line-%d %.3f\\n", $i, time() * 1000; ` +
      `select(undef, undef, undef, ${LINE_INTERVAL_S}); } exit ${EXIT_CODE};`;
    const child = client.spawn(['/usr/bin/perl', '-e', script], { env: { PATH: process.env.PATH ?? '/usr/bin:/bin' } });
    let text = '';
    let lastByteAt = 0;
    /** Offset in `text` of the first line not yet looked at by a waiting cut. */
    let scanned = 0;
    let waiting: { cutWall: number; resolve: (line: { at: number; printedAt: number }) => void } | undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      const at = performance.now();
      lastByteAt = at;
      text += chunk.toString('utf8');
      if (!waiting) return;
      // Whole lines only; the first one printed after the cut ends this cut's wait.
      let end: number;
      while (waiting && (end = text.indexOf('\n', scanned)) >= 0) {
        const printedAt = Number(text.slice(scanned, end).split(' ')[1]);
        scanned = end + 1;
        if (printedAt > waiting.cutWall) {
          const { resolve } = waiting;
          waiting = undefined;
          resolve({ at, printedAt });
        }
      }
    });
    child.stderr.resume();
    let processError: Error | undefined;
    child.on('error', (error: Error) => {
      processError = error;
    });
    const exited = child.exited;
    let running = true;
    void exited.finally(() => {
      running = false;
    });

    const firstByteTimes: number[] = [];
    let replayedFirst = 0;
    let reconnectedAtWall = 0;
    proxy.on('connection', () => {
      reconnectedAtWall = wallNow();
    });
    const deadline = Date.now() + RUN_TIMEOUT_MS;
    // Wait for output to flow before the first cut.
    while (lastByteAt === 0 && Date.now() < deadline) await sleep(5);
    for (let cut = 0; cut < CUTS && running && Date.now() < deadline; cut++) {
      await sleep(BETWEEN_CUTS_MS);
      if (!running) break;
      // Bytes still in flight when the link is cut (already in the client's socket buffer) are
      // not what a cut costs: wait for the first line the child printed after the cut.
      scanned = text.lastIndexOf('\n') + 1;
      reconnectedAtWall = 0;
      const cutWall = wallNow();
      const cutAt = performance.now();
      const firstAfterCut = new Promise<{ at: number; printedAt: number }>((resolve) => {
        waiting = { cutWall, resolve };
      });
      if (proxy.cutAll() === 0) throw new Error('the client had no live connection to cut');
      const first = await Promise.race([firstAfterCut, exited.then(() => undefined)]);
      if (!first) break;
      firstByteTimes.push(first.at - cutAt);
      // Printed before the new connection was even accepted: it came through the resume's process/read.
      if (reconnectedAtWall > 0 && first.printedAt < reconnectedAtWall) replayedFirst++;
    }
    waiting = undefined;
    const exitCode = await exited.catch((error: unknown) => {
      throw new Error(`the benchmark process failed: ${String(processError ?? error)}`);
    });
    await child.closed;

    const lines = text
      .split('\n')
      .filter((line) => line.length > 0)
      .map((line) => line.split(' ')[0]!);
    const expected = Array.from({ length: LINES }, (_, i) => `line-${i}`);
    const received = new Set(lines);
    const missing = expected.filter((line) => !received.has(line)).length;
    const duplicates = lines.length - new Set(lines).size;
    const inOrder = lines.every((line, i) => line === expected[i]);
    const linesOk = lines.length === LINES && missing === 0 && duplicates === 0 && inOrder && exitCode === EXIT_CODE;
    const detail = `${lines.length}/${LINES} lines, ${missing} missing, ${duplicates} duplicated, ${inOrder ? 'in order' : 'OUT OF ORDER'}, exit ${exitCode}`;
    return {
      firstByte: summarize(firstByteTimes),
      downtime: summarize(recoveries.map((r) => r.downtimeMs)),
      cuts: firstByteTimes.length,
      replayedFirst,
      linesOk,
      detail,
    };
  } finally {
    await client.close().catch(() => undefined);
    await proxy.close();
  }
}

/** Wall-clock milliseconds with a fraction (comparable with the child's Time::HiRes stamps). */
function wallNow(): number {
  return performance.timeOrigin + performance.now();
}

async function measureOn(start: () => Promise<BenchServer>): Promise<RecoveryResult> {
  const server = await start();
  try {
    return await measure(server);
  } finally {
    await server.stop();
  }
}

export async function run(): Promise<void> {
  console.log(`## Recovery: cut → first byte printed after the cut (tether ExecClient through the chaos proxy, ${CUTS} cuts, a line every ${LINE_INTERVAL_S * 1000} ms)\n`);
  const only = process.env.BENCH_ONLY;
  const tether = only === 'codex' ? undefined : await measureOn(() => startTetherProcess());
  const codex = only === 'tether' ? undefined : await measureOn(startCodexProcess);
  const cell = (r: RecoveryResult | undefined, f: (r: RecoveryResult) => string): string => (r ? f(r) : 'n/a');
  console.log(
    table([
      ['metric', 'tether server', 'codex server', 'tether vs codex'],
      ['cuts measured', cell(tether, (r) => String(r.cuts)), cell(codex, (r) => String(r.cuts)), ''],
      [
        'first new line was printed before the reconnect (replayed)',
        cell(tether, (r) => `${r.replayedFirst}/${r.cuts}`),
        cell(codex, (r) => `${r.replayedFirst}/${r.cuts}`),
        '',
      ],
      [
        'cut → first new byte p50',
        cell(tether, (r) => ms(r.firstByte.p50)),
        cell(codex, (r) => ms(r.firstByte.p50)),
        tether && codex ? ratioLowerBetter(tether.firstByte.p50, codex.firstByte.p50) : '',
      ],
      [
        'cut → first new byte max',
        cell(tether, (r) => ms(r.firstByte.max)),
        cell(codex, (r) => ms(r.firstByte.max)),
        tether && codex ? ratioLowerBetter(tether.firstByte.max, codex.firstByte.max) : '',
      ],
      ['client downtime p50 (drop → caught up)', cell(tether, (r) => ms(r.downtime.p50)), cell(codex, (r) => ms(r.downtime.p50)), ''],
      ['client downtime max', cell(tether, (r) => ms(r.downtime.max)), cell(codex, (r) => ms(r.downtime.max)), ''],
      ['every line exactly once', cell(tether, (r) => (r.linesOk ? 'yes' : 'NO')), cell(codex, (r) => (r.linesOk ? 'yes' : 'NO')), ''],
    ]),
  );
  console.log(`\ntether: ${cell(tether, (r) => r.detail)}\ncodex:  ${cell(codex, (r) => r.detail)}\n`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  exitCleanlyOnSignalsAndCrashes();
  run().then(
    () => process.exit(0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
