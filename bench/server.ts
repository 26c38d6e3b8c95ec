/**
 * Server benchmark (issue 2): tether and the real Codex exec-server side by side, each a
 * separate process driven by the same raw WebSocket JSON-RPC client on loopback.
 *   - echo round trip through `cat`: process/write → the process/output notification back;
 *   - spawn-to-closed of /bin/true: process/start → process/closed;
 *   - stdout throughput of 64 MiB (`head -c 67108864 /dev/zero`);
 *   - server RSS while a client reads `yes` output slowly (sampled over time), and with
 *     1,000 idle sessions.
 * Targets: echo p50 < 1 ms, spawn p50 < 10 ms, throughput ≥ Codex, RSS flat under a slow reader.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { mib, ms, ratioHigherBetter, ratioLowerBetter, summarize, table, verdict, type Summary } from './lib/stats.js';
import { readMemory, RssSampler } from './lib/rss.js';
import { exitCleanlyOnSignalsAndCrashes, startCodexProcess, startTetherProcess, type BenchServer } from './lib/servers.js';
import { base64Bytes, echoRoundTrip, newProcessId, spawnToClosed, throughputRun, withTimeout } from './lib/measure.js';
import { startParams, WsRpc } from './lib/ws-rpc.js';

const ECHO_SAMPLES = Number(process.env.BENCH_ECHO_SAMPLES ?? 200);
const SPAWN_SAMPLES = Number(process.env.BENCH_SPAWN_SAMPLES ?? 100);
const THROUGHPUT_RUNS = Number(process.env.BENCH_THROUGHPUT_RUNS ?? 5);
const SLOW_READER_MS = Number(process.env.BENCH_SLOW_READER_MS ?? 10_000);
const IDLE_SESSIONS = Number(process.env.BENCH_IDLE_SESSIONS ?? 1_000);

interface SlowReaderResult {
  samples: number[];
  min: number;
  max: number;
  hwm: number;
  /** Max RSS in the last third of the run minus max RSS in the first third. */
  growth: number;
  bytesRead: number;
}

/**
 * `yes` (an endless fast producer) while the client reads slowly: its TCP socket is paused
 * whenever it has taken SLOW_READ_BYTES_PER_TICK in the current 100 ms tick (about 640 KiB/s).
 * A server that buffers whatever the child writes grows without bound; one with backpressure
 * (or one that drops output) stays flat.
 */
const SLOW_READ_BYTES_PER_TICK = 64 * 1024;

async function slowReader(server: BenchServer, durationMs: number): Promise<SlowReaderResult> {
  const rpc = await WsRpc.session(server.url);
  const processId = newProcessId('yes');
  let bytesRead = 0;
  rpc.onProcess(processId, (method, params) => {
    if (method === 'process/output') bytesRead += base64Bytes(params.chunk);
  });
  let tickBytes = 0;
  const onData = (chunk: Buffer): void => {
    tickBytes += chunk.length;
    if (tickBytes >= SLOW_READ_BYTES_PER_TICK) rpc.socket.pause();
  };
  rpc.socket.on('data', onData);
  await rpc.request('process/start', startParams(processId, ['/usr/bin/yes', 'tether slow reader line']));
  const sampler = new RssSampler(server.pid, 250);
  const throttle = setInterval(() => {
    tickBytes = 0;
    rpc.socket.resume();
  }, 100);
  await sleep(durationMs);
  clearInterval(throttle);
  rpc.socket.off('data', onData);
  const { samples, min, max, hwm } = sampler.stop();
  rpc.socket.resume();
  // terminate waits behind queued output on the socket; do not let a slow drain stall the run.
  await withTimeout(rpc.request('process/terminate', { processId }), 'terminate after slow reader', 30_000).catch(() => undefined);
  await rpc.close();
  const third = Math.max(1, Math.floor(samples.length / 3));
  const growth = Math.max(...samples.slice(-third)) - Math.max(...samples.slice(0, third));
  return { samples, min, max, hwm, growth, bytesRead };
}

/** RSS before and after opening `count` initialized sessions that then sit idle. */
async function idleSessions(server: BenchServer, count: number): Promise<{ before: number; after: number; hwm: number; perSession: number }> {
  await sleep(200);
  const before = readMemory(server.pid).rss;
  const clients: WsRpc[] = [];
  const batch = 50;
  for (let i = 0; i < count; i += batch) {
    const opened = await Promise.all(
      Array.from({ length: Math.min(batch, count - i) }, () => withTimeout(WsRpc.session(server.url), 'idle session')),
    );
    clients.push(...opened);
  }
  await sleep(1_000);
  const { rss: after, hwm } = readMemory(server.pid);
  await Promise.all(clients.map((client) => client.close()));
  return { before, after, hwm, perSession: (after - before) / count };
}

interface SpeedResults {
  echo: Summary;
  spawn: Summary;
  throughput: { best: number; median: number; all: number[] };
  /** Server memory right after the throughput runs. */
  afterThroughput: { rss: number; hwm: number };
}

interface MemoryResults {
  slow: SlowReaderResult;
  idle: { before: number; after: number; hwm: number; perSession: number };
}

type ServerResults = SpeedResults & MemoryResults;

const NO_SUMMARY: Summary = { n: 0, p50: NaN, p99: NaN, min: NaN, max: NaN, mean: NaN };
const EMPTY_SPEED: SpeedResults = {
  echo: NO_SUMMARY,
  spawn: NO_SUMMARY,
  throughput: { best: NaN, median: NaN, all: [] },
  afterThroughput: { rss: NaN, hwm: NaN },
};
const EMPTY_MEMORY: MemoryResults = {
  slow: { samples: [], min: NaN, max: NaN, hwm: NaN, growth: NaN, bytesRead: NaN },
  idle: { before: NaN, after: NaN, hwm: NaN, perSession: NaN },
};

/**
 * Latency and throughput: both servers run at once and are measured in alternating blocks,
 * so load from anything else on the machine hits both alike. Each memory scenario gets a
 * fresh server process so its baseline is not inflated by heap the throughput runs left.
 */
const BLOCKS = 10;

async function measureSpeed(): Promise<{ tether: SpeedResults; codex: SpeedResults }> {
  const only = process.env.BENCH_ONLY;
  const servers: BenchServer[] = [];
  try {
    if (only !== 'codex') servers.push(await startTetherProcess());
    if (only !== 'tether') servers.push(await startCodexProcess());
    const rpcs = await Promise.all(servers.map((server) => WsRpc.session(server.url)));
    const results = servers.map(() => ({ echo: [] as number[], spawn: [] as number[], rates: [] as number[] }));
    for (let block = 0; block < BLOCKS; block++) {
      for (let i = 0; i < servers.length; i++) {
        results[i]!.echo.push(...(await echoRoundTrip(rpcs[i]!, Math.ceil(ECHO_SAMPLES / BLOCKS), block === 0 ? 20 : 2)));
        results[i]!.spawn.push(...(await spawnToClosed(rpcs[i]!, Math.ceil(SPAWN_SAMPLES / BLOCKS), block === 0 ? 5 : 1)));
      }
    }
    for (let run = 0; run < THROUGHPUT_RUNS; run++) {
      for (let i = 0; i < servers.length; i++) results[i]!.rates.push(await throughputRun(rpcs[i]!));
    }
    const memory = servers.map((server) => readMemory(server.pid));
    await Promise.all(rpcs.map((rpc) => rpc.close()));
    const byName = (name: 'tether' | 'codex'): SpeedResults => {
      const i = servers.findIndex((server) => server.name === name);
      if (i < 0) return EMPTY_SPEED;
      const r = results[i]!;
      return {
        echo: summarize(r.echo),
        spawn: summarize(r.spawn),
        throughput: { best: Math.max(...r.rates), median: summarize(r.rates).p50, all: r.rates },
        afterThroughput: memory[i]!,
      };
    };
    return { tether: byName('tether'), codex: byName('codex') };
  } finally {
    await Promise.all(servers.map((server) => server.stop()));
  }
}

async function measureMemory(start: () => Promise<BenchServer>): Promise<MemoryResults> {
  const withServer = async <T>(fn: (server: BenchServer) => Promise<T>): Promise<T> => {
    const server = await start();
    try {
      return await fn(server);
    } finally {
      await server.stop();
    }
  };
  const slow = await withServer((server) => slowReader(server, SLOW_READER_MS));
  const idle = await withServer((server) => idleSessions(server, IDLE_SESSIONS));
  return { slow, idle };
}

export async function run(): Promise<void> {
  console.log('## Server: tether vs Codex exec-server 0.169 (loopback, separate processes, raw ws JSON-RPC client, measured in alternating blocks)\n');
  // BENCH_ONLY=tether|codex measures one side (the other column shows n/a).
  const only = process.env.BENCH_ONLY;
  const speed = await measureSpeed();
  const tether: ServerResults = { ...speed.tether, ...(only === 'codex' ? EMPTY_MEMORY : await measureMemory(() => startTetherProcess())) };
  const codex: ServerResults = { ...speed.codex, ...(only === 'tether' ? EMPTY_MEMORY : await measureMemory(startCodexProcess)) };

  console.log(
    table([
      ['metric', 'tether', 'codex', 'tether vs codex', 'target', 'status'],
      [`echo p50 (n=${tether.echo.n})`, ms(tether.echo.p50), ms(codex.echo.p50), ratioLowerBetter(tether.echo.p50, codex.echo.p50), '< 1 ms', verdict(tether.echo.p50 < 1)],
      ['echo p99', ms(tether.echo.p99), ms(codex.echo.p99), ratioLowerBetter(tether.echo.p99, codex.echo.p99), '', ''],
      [`spawn→closed p50 (n=${tether.spawn.n})`, ms(tether.spawn.p50), ms(codex.spawn.p50), ratioLowerBetter(tether.spawn.p50, codex.spawn.p50), '< 10 ms', verdict(tether.spawn.p50 < 10)],
      ['spawn→closed p99', ms(tether.spawn.p99), ms(codex.spawn.p99), ratioLowerBetter(tether.spawn.p99, codex.spawn.p99), '', ''],
      [
        `64 MiB stdout, median of ${THROUGHPUT_RUNS}`,
        `${tether.throughput.median.toFixed(0)} MiB/s`,
        `${codex.throughput.median.toFixed(0)} MiB/s`,
        ratioHigherBetter(tether.throughput.median, codex.throughput.median),
        '≥ codex',
        verdict(tether.throughput.median >= codex.throughput.median),
      ],
      [
        `64 MiB stdout, best of ${THROUGHPUT_RUNS}`,
        `${tether.throughput.best.toFixed(0)} MiB/s`,
        `${codex.throughput.best.toFixed(0)} MiB/s`,
        ratioHigherBetter(tether.throughput.best, codex.throughput.best),
        '',
        '',
      ],
      ['RSS / peak after the throughput runs', `${mib(tether.afterThroughput.rss)} / ${mib(tether.afterThroughput.hwm)}`, `${mib(codex.afterThroughput.rss)} / ${mib(codex.afterThroughput.hwm)}`, '', '', ''],
      [
        `slow reader RSS min/max (${SLOW_READER_MS / 1000} s)`,
        `${mib(tether.slow.min)} / ${mib(tether.slow.max)}`,
        `${mib(codex.slow.min)} / ${mib(codex.slow.max)}`,
        '',
        'flat',
        verdict(tether.slow.growth < 16 * 1024 * 1024),
      ],
      ['slow reader RSS growth (last third − first third)', mib(tether.slow.growth), mib(codex.slow.growth), '', '< 16 MiB', ''],
      ['slow reader peak RSS (VmHWM)', mib(tether.slow.hwm), mib(codex.slow.hwm), '', '', ''],
      ['slow reader bytes delivered', mib(tether.slow.bytesRead), mib(codex.slow.bytesRead), '', '', ''],
      [`RSS idle → ${IDLE_SESSIONS} idle sessions`, `${mib(tether.idle.before)} → ${mib(tether.idle.after)}`, `${mib(codex.idle.before)} → ${mib(codex.idle.after)}`, '', '', ''],
      ['  per idle session', `${(tether.idle.perSession / 1024).toFixed(1)} KiB`, `${(codex.idle.perSession / 1024).toFixed(1)} KiB`, '', '', ''],
      ['  peak RSS (VmHWM) after sessions', mib(tether.idle.hwm), mib(codex.idle.hwm), '', '', ''],
    ]),
  );
  const series = (r: SlowReaderResult): string => r.samples.map((s) => (s / 1024 / 1024).toFixed(0)).join(' ');
  console.log(`\nslow-reader RSS series, MiB every 250 ms:\n  tether: ${series(tether.slow)}\n  codex:  ${series(codex.slow)}`);
  console.log(
    `\nthroughput runs, MiB/s: tether ${tether.throughput.all.map((r) => r.toFixed(0)).join(', ')}; codex ${codex.throughput.all.map((r) => r.toFixed(0)).join(', ')}`,
  );
  console.log(
    `echo min/mean/max: tether ${ms(tether.echo.min)}/${ms(tether.echo.mean)}/${ms(tether.echo.max)}; codex ${ms(codex.echo.min)}/${ms(codex.echo.mean)}/${ms(codex.echo.max)}\n`,
  );
}

// Runnable on its own: `node --import tsx bench/server.ts`.
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
