/**
 * Memory under many detached producers (issue 13): N sessions each start `yes` and go away
 * (the socket closes, the session is detached), on a fresh tether server with its default
 * memory budget and caps, and on a fresh Codex exec-server, one after the other in this run.
 * Per server and load: how many processes started and how many were refused (and why), the
 * server's RSS sampled while they are detached (flat?), what tether holds against its budget,
 * whether the server still answers a new client (initialize, environment/status, a process),
 * and — tether — the heap and RSS each paused detached process costs beyond its output.
 *
 * Bounded in time: sessions are set up 64 at a time, each step has a deadline, the sampling
 * lasts BENCH_BUDGET_SAMPLE_MS, and each server is stopped after its load (its children die
 * with it). Codex keeps detached sessions about 80 s, so everything is measured well within.
 *   BENCH_ONLY_MODULE=budget npm run bench
 * Knobs: BENCH_BUDGET_SESSIONS (1000,5000), BENCH_BUDGET_SETTLE_MS (10000),
 * BENCH_BUDGET_SAMPLE_MS (10000), BENCH_ONLY=tether|codex.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { mib, table } from './lib/stats.js';
import { readMemory } from './lib/rss.js';
import { startCodexProcess, startTetherProcess, type BenchServer } from './lib/servers.js';
import { startParams, WsRpc } from './lib/ws-rpc.js';

const LOADS = (process.env.BENCH_BUDGET_SESSIONS ?? '1000,5000').split(',').map(Number);
const SETTLE_MS = Number(process.env.BENCH_BUDGET_SETTLE_MS ?? 10_000);
const SAMPLE_MS = Number(process.env.BENCH_BUDGET_SAMPLE_MS ?? 10_000);
const CONCURRENCY = 64;
/** Longest a single connect/initialize/start may take before it counts as failed. */
const STEP_TIMEOUT_MS = 20_000;
/** Longest the whole setup of one load may take (Codex expires detached sessions after ~80 s). */
const SETUP_DEADLINE_MS = 90_000;

interface LoadResult {
  server: 'tether' | 'codex';
  sessions: number;
  setupMs: number;
  started: number;
  /** Refusals and failures by message (first 160 characters). */
  refused: Map<string, number>;
  rssBefore: number;
  rssFirst: number;
  rssLast: number;
  rssMin: number;
  rssMax: number;
  /** The server was alive at the end (its process exists). */
  alive: boolean;
  probe: string;
  tether?: { budget: number; held: number; pressured: boolean; pausedProcesses: number; heapBefore: number; heapAfter: number; processes: number };
}

function withTimeout<T>(promise: Promise<T>, what: string, timeoutMs = STEP_TIMEOUT_MS): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${timeoutMs} ms`)), timeoutMs);
    }),
  ]).finally(() => clearTimeout(timer));
}

const short = (e: unknown): string => (e instanceof Error ? e.message : String(e)).replace(/\d+(\.\d+)?(MiB|KiB|GiB|B)\b/g, 'N$2').slice(0, 160);

/** One detached producer: connect, initialize, start `yes`, drop the socket. */
async function detachedProducer(url: string, i: number): Promise<string | null> {
  let rpc: WsRpc | undefined;
  try {
    rpc = await withTimeout(WsRpc.connect(url), 'connect');
    await withTimeout(rpc.request('initialize', { clientName: `budget-bench-${i}` }), 'initialize');
    rpc.notify('initialized', {});
    await withTimeout(rpc.request('process/start', startParams(`yes-${i}`, ['yes'])), 'process/start');
    return null;
  } catch (error) {
    return short(error);
  } finally {
    rpc?.ws.terminate(); // the socket dies: the session is detached, its process runs on
  }
}

async function load(server: BenchServer, sessions: number): Promise<{ setupMs: number; started: number; refused: Map<string, number> }> {
  const refused = new Map<string, number>();
  let started = 0;
  let next = 0;
  const t0 = performance.now();
  const worker = async (): Promise<void> => {
    while (next < sessions && performance.now() - t0 < SETUP_DEADLINE_MS) {
      const i = next++;
      const failure = await detachedProducer(server.url, i);
      if (failure === null) started++;
      else refused.set(failure, (refused.get(failure) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  if (next < sessions) refused.set('not attempted: the setup deadline passed', sessions - next);
  return { setupMs: performance.now() - t0, started, refused };
}

/** A new client on the loaded server: initialize, environment/status, and a process start (its answer, whatever it is). */
async function probe(url: string): Promise<string> {
  const t0 = performance.now();
  let rpc: WsRpc | undefined;
  try {
    rpc = await withTimeout(WsRpc.connect(url), 'connect');
    await withTimeout(rpc.request('initialize', { clientName: 'budget-bench-probe' }), 'initialize');
    rpc.notify('initialized', {});
    await withTimeout(rpc.request('environment/status', {}), 'environment/status');
    const answered = `answers in ${(performance.now() - t0).toFixed(0)} ms`;
    const closed = new Promise<void>((resolve) => rpc!.onProcess('probe', (method) => method === 'process/closed' && resolve()));
    try {
      await withTimeout(rpc.request('process/start', startParams('probe', ['true'])), 'process/start');
      await withTimeout(closed, 'process/closed of the probe');
      return `${answered}; a new process ran (${(performance.now() - t0).toFixed(0)} ms)`;
    } catch (error) {
      return `${answered}; a new process: ${short(error)}`;
    }
  } catch (error) {
    return `NOT answering: ${short(error)}`;
  } finally {
    await rpc?.close();
  }
}

/** tether's own view, from GET /metrics. */
async function tetherMetrics(url: string): Promise<Record<string, number>> {
  const res = await withTimeout(fetch(url.replace(/^ws/, 'http') + '/metrics'), 'GET /metrics');
  const text = await res.text();
  const out: Record<string, number> = {};
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$/.exec(line);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

const sumOf = (metrics: Record<string, number>, prefix: string): number =>
  Object.entries(metrics)
    .filter(([k]) => k.startsWith(prefix))
    .reduce((n, [, v]) => n + v, 0);

async function measure(kind: 'tether' | 'codex', sessions: number): Promise<LoadResult> {
  // tether: detached sessions outlive the whole measurement (Codex keeps them ~80 s).
  const server = kind === 'tether' ? await startTetherProcess(['--session-ttl', '5m', '--log-level', 'warn']) : await startCodexProcess();
  try {
    await sleep(500);
    const rssBefore = readMemory(server.pid).rss;
    const before = kind === 'tether' ? await tetherMetrics(server.url) : {};
    const { setupMs, started, refused } = await load(server, sessions);
    await sleep(SETTLE_MS);
    const samples: number[] = [];
    let alive = true;
    const sampleEnd = performance.now() + SAMPLE_MS;
    while (performance.now() < sampleEnd) {
      try {
        samples.push(readMemory(server.pid).rss);
      } catch {
        alive = false;
        break;
      }
      await sleep(500);
    }
    const result: LoadResult = {
      server: kind,
      sessions,
      setupMs,
      started,
      refused,
      rssBefore,
      rssFirst: samples[0] ?? NaN,
      rssLast: samples[samples.length - 1] ?? NaN,
      rssMin: Math.min(...samples),
      rssMax: Math.max(...samples),
      alive,
      probe: alive ? await probe(server.url) : 'the server died',
    };
    if (kind === 'tether' && alive) {
      const after = await tetherMetrics(server.url);
      result.tether = {
        budget: after['tether_budget_limit{budget="memory_bytes"}'] ?? NaN,
        held: sumOf(after, 'tether_memory_held_bytes'),
        pressured: after.tether_memory_pressured === 1,
        pausedProcesses: after.tether_output_paused_processes ?? NaN,
        heapBefore: before.nodejs_heap_size_used_bytes ?? NaN,
        heapAfter: after.nodejs_heap_size_used_bytes ?? NaN,
        processes: after['tether_budget_used{budget="processes"}'] ?? NaN,
      };
    }
    try {
      readMemory(server.pid);
    } catch {
      result.alive = false;
    }
    return result;
  } finally {
    await server.stop();
  }
}

export async function run(): Promise<void> {
  console.log('## Memory budget: N detached sessions, each running `yes` (fresh server per row, default budget and caps)\n');
  const only = process.env.BENCH_ONLY;
  const results: LoadResult[] = [];
  for (const sessions of LOADS) {
    for (const kind of ['tether', 'codex'] as const) {
      if (only !== undefined && only !== kind) continue;
      try {
        results.push(await measure(kind, sessions));
      } catch (error) {
        console.log(`${kind} with ${sessions} sessions: the run failed: ${short(error)}`);
      }
    }
  }
  console.log(
    table([
      ['server', 'sessions', 'setup', 'processes started', 'refused / failed', `RSS before → over ${SAMPLE_MS / 1000} s detached (min-max)`, 'held / budget', 'alive and answering'],
      ...results.map((r) => [
        r.server,
        String(r.sessions),
        `${(r.setupMs / 1000).toFixed(1)} s`,
        String(r.started),
        String([...r.refused.values()].reduce((a, b) => a + b, 0)),
        `${mib(r.rssBefore)} → ${mib(r.rssFirst)} … ${mib(r.rssLast)} (${mib(r.rssMin)}-${mib(r.rssMax)})`,
        r.tether ? `${mib(r.tether.held)} / ${mib(r.tether.budget)}${r.tether.pressured ? ', producers paused' : ''}` : 'n/a (no budget)',
        `${r.alive ? 'alive' : 'DEAD'}: ${r.probe}`,
      ]),
    ]),
  );
  for (const r of results) {
    for (const [message, count] of r.refused) console.log(`- ${r.server} ${r.sessions}: ${count} × ${message}`);
  }
  const perProcess = results.filter((r) => r.tether && r.started > 0);
  if (perProcess.length > 0) {
    console.log('\nFixed cost of a paused detached process (tether): (after − before − bytes held under the budget) / processes');
    console.log(
      table([
        ['sessions', 'live processes', 'paused', 'heap per process (its session included)', 'RSS per process (beyond output held)'],
        ...perProcess.map((r) => {
          const t = r.tether!;
          const n = t.processes;
          return [
            String(r.sessions),
            String(n),
            String(t.pausedProcesses),
            `${((t.heapAfter - t.heapBefore) / n / 1024).toFixed(1)} KiB`,
            `${((r.rssLast - r.rssBefore - t.held) / n / 1024).toFixed(1)} KiB`,
          ];
        }),
      ]),
    );
  }
  const codex = results.filter((r) => r.server === 'codex');
  for (const r of codex) {
    console.log(`\nCodex ${r.sessions}: RSS ${mib(r.rssFirst)} → ${mib(r.rssLast)} over ${SAMPLE_MS / 1000} s, ${r.alive ? 'alive' : 'DEAD'}; per process ${((r.rssLast - r.rssBefore) / Math.max(1, r.started) / 1024).toFixed(0)} KiB`);
  }
}
