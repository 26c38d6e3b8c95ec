/**
 * Another client's echo while one client hoards (issue 22, item 6): a fresh tether server,
 * and a client that reads its output but never acknowledges it runs producers until the
 * memory budget is pressed; then a second client times `echo hi`, start → closed, and the
 * same on an idle fresh server. The ratio (hoarded / idle) is the figure: before fair shares
 * the echo under hoarding never closed (n/a).
 *   BENCH_ONLY_MODULE=hoard npm run bench
 * Knobs: BENCH_HOARD_SAMPLES (50), BENCH_HOARD_BUDGET (64MiB: small, so it fills fast; the
 * producers are `head -c 100M /dev/zero`, 16 of them).
 */
import { performance } from 'node:perf_hooks';
import { ms, ratioLowerBetter, summarize, table } from './lib/stats.js';
import { startTetherProcess, type BenchServer } from './lib/servers.js';
import { startParams, WsRpc } from './lib/ws-rpc.js';

const SAMPLES = Number(process.env.BENCH_HOARD_SAMPLES ?? 50);
const BUDGET = process.env.BENCH_HOARD_BUDGET ?? '64MiB';
const PRODUCERS = 16;
/** An echo that has not closed by then counts as never (the old behaviour). */
const ECHO_DEADLINE_MS = 10_000;

async function pressured(url: string): Promise<boolean> {
  const text = await (await fetch(`${url.replace(/^ws/, 'http')}/metrics`)).text();
  return /^tether_memory_pressured 1$/m.test(text);
}

/** `echo hi`, start → closed, SAMPLES times on one session; NaN for one that does not close in time. */
async function echoes(url: string): Promise<number[]> {
  const rpc = await WsRpc.session(url, 'hoard-bench-echo');
  const out: number[] = [];
  try {
    for (let i = 0; i < SAMPLES; i++) {
      const id = `echo-${i}`;
      const t0 = performance.now();
      const closed = new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), ECHO_DEADLINE_MS);
        rpc.onProcess(id, (method) => method === 'process/closed' && (clearTimeout(timer), resolve(true)));
      });
      await rpc.request('process/start', startParams(id, ['echo', 'hi']));
      const ok = await closed;
      rpc.offProcess(id);
      out.push(ok ? performance.now() - t0 : Number.NaN);
      if (!ok) break; // one that never closes is the answer
    }
  } finally {
    await rpc.close();
  }
  return out;
}

async function withServer<T>(fn: (server: BenchServer) => Promise<T>): Promise<T> {
  const server = await startTetherProcess(['--memory-budget', BUDGET, '--log-level', 'warn']);
  try {
    return await fn(server);
  } finally {
    await server.stop();
  }
}

export async function run(): Promise<void> {
  console.log(`## Another client's echo while one client hoards (budget ${BUDGET}, ${PRODUCERS} never-acknowledged producers)\n`);
  const idle = await withServer((s) => echoes(s.url));
  const hoarded = await withServer(async (s) => {
    const hoarder = await WsRpc.connect(s.url);
    await hoarder.request('initialize', { clientName: 'hoarder', tether: { version: 1, extensions: ['acks'] } });
    hoarder.notify('initialized', {});
    for (let i = 0; i < PRODUCERS; i++) await hoarder.request('process/start', startParams(`p${i}`, ['head', '-c', '100M', '/dev/zero']));
    const deadline = performance.now() + 60_000;
    while (!(await pressured(s.url))) if (performance.now() > deadline) throw new Error('the budget was never pressed');
    try {
      return await echoes(s.url);
    } finally {
      await hoarder.close();
    }
  });
  const a = summarize(idle.filter(Number.isFinite));
  const b = summarize(hoarded.filter(Number.isFinite));
  const never = hoarded.some((v) => !Number.isFinite(v));
  console.log(
    table([
      ['server', 'echo start→closed p50', 'p99', 'samples'],
      ['idle', ms(a.p50), ms(a.p99), String(a.n)],
      ['one client hoarding', never ? `never (> ${ECHO_DEADLINE_MS} ms)` : ms(b.p50), never ? 'n/a' : ms(b.p99), String(b.n)],
    ]),
  );
  console.log(`\nhoarded / idle (p50): ${never ? 'n/a (never closed)' : ratioLowerBetter(a.p50, b.p50)}\n`);
}
