/**
 * Streaming benchmark (issue 10, "Must show"): how fast output gets from a remote child to a
 * local pipe, and what it costs the server. One run, everything interleaved so that load
 * from anything else on the machine hits every contender alike:
 *   - `head -c N /dev/zero` for N = 64 and 256 MiB, the ExecClient (as `tether exec` drives
 *     it: output written to a pipe into `wc -c`, a write acknowledged once its callback ran)
 *     against tether with binary frames, against tether in the Codex dialect (`extensions:
 *     []`), against the Codex exec-server; and the Node floor (bench/lib/floor-server.ts:
 *     child pipe → ws binary frames → a client writing to the same kind of pipe);
 *   - 50 sessions × 4 MiB at once (aggregate);
 *   - server RSS peak (VmHWM) minus idle, over the runs above, tether against Codex;
 *   - 64 MiB through the chaos proxy adding 50 ms each way, for output windows of 2, 8 and
 *     32 MiB (`serve --output-window`): per-process throughput is at most window / RTT.
 * Medians of BENCH_STREAM_RUNS (5) runs. Targets (issue 10): binary ≥ 2.5x the same client
 * against Codex and ≥ 90 % of the Node floor; 50 sessions ≥ 1.5x Codex with binary frames and
 * on par (≥ 0.9x) in the Codex dialect; RSS peak − idle ≤ Codex's + 32 MiB.
 */
import { performance } from 'node:perf_hooks';
import { Writable } from 'node:stream';
import { ChaosProxy } from '../src/chaos/proxy.js';
import { ExecClient, type ExecClientOptions } from '../src/client/index.js';
import { EXEC_LIKE, execOnce, FloorClient, startFloorServer, withTimeout } from './lib/binary-stream.js';
import { mib, table, verdict } from './lib/stats.js';
import { cpuMs } from './lib/cpu.js';
import { readMemory } from './lib/rss.js';
import { startCodexProcess, startTetherProcess, type BenchServer } from './lib/servers.js';

const MiB = 1024 * 1024;
const RUNS = Number(process.env.BENCH_STREAM_RUNS ?? 5);
const SIZES = [64 * MiB, 256 * MiB];
const SESSIONS = Number(process.env.BENCH_STREAM_SESSIONS ?? 50);
const SESSION_BYTES = 4 * MiB;
const WINDOWS = [2 * MiB, 8 * MiB, 32 * MiB];
const WINDOW_BYTES = 64 * MiB;
const LATENCY_MS = 50;

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const rate = (bytes: number, ms: number): number => bytes / MiB / (ms / 1000);
const fmtRate = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(0)} MiB/s` : 'n/a');
const fmtRatio = (x: number): string => (Number.isFinite(x) ? `${x.toFixed(2)}x` : 'n/a');

/** 50 clients, one session each, each streaming 4 MiB at once; ms from the first spawn to the last close. */
async function sessionsOnce(clients: ExecClient[]): Promise<number> {
  const started = performance.now();
  await withTimeout(
    Promise.all(
      clients.map(async (client) => {
        let got = 0;
        const sink = new Writable({
          write(chunk: Buffer, _encoding, callback) {
            got += chunk.length;
            callback();
          },
        });
        const proc = client.spawn(['head', '-c', String(SESSION_BYTES), '/dev/zero'], { stdout: sink, env: { PATH: '/usr/bin:/bin' } });
        await proc.closed;
        if (got !== SESSION_BYTES) throw new Error(`session: ${got} of ${SESSION_BYTES} bytes`);
      }),
    ),
    'sessions',
  );
  return performance.now() - started;
}

interface Contender {
  name: string;
  server: BenchServer | null;
  /** One exec of `bytes`: ms. */
  exec(bytes: number): Promise<number>;
  /** The serving process, for its CPU time. */
  serverPid: number;
  sessions: ExecClient[] | null;
  close(): Promise<void>;
}

async function clientContender(name: string, server: BenchServer, options: ExecClientOptions): Promise<Contender> {
  const client = await ExecClient.connect(server.url, { ...EXEC_LIKE, ...options });
  const sessions = await Promise.all(Array.from({ length: SESSIONS }, () => ExecClient.connect(server.url, { ...EXEC_LIKE, ...options })));
  return {
    name,
    server,
    serverPid: server.pid,
    exec: (bytes) => execOnce(client, bytes),
    sessions,
    close: async () => {
      await Promise.all([client, ...sessions].map((c) => c.close()));
    },
  };
}

function idleRss(server: BenchServer): number {
  return readMemory(server.pid).rss;
}

export async function run(): Promise<void> {
  const started = performance.now();
  const tether = await startTetherProcess();
  const codex = await startCodexProcess();
  const floor = await startFloorServer();
  const contenders: Contender[] = [];
  const windowServers: BenchServer[] = [];
  const proxies: ChaosProxy[] = [];
  try {
    const binary = await clientContender('tether, binary frames', tether, {});
    if (!binary.sessions![0]!.extensions.has('binaryOutput')) throw new Error('tether did not accept binaryOutput');
    const dialect = await clientContender('tether, Codex dialect', tether, { extensions: [] });
    const onCodex = await clientContender('Codex exec-server', codex, {});
    const floorClient = await FloorClient.connect(floor.url);
    const floorContender: Contender = {
      name: 'Node floor',
      server: null,
      serverPid: floor.child.pid!,
      exec: (b) => floorClient.once(b),
      sessions: null,
      close: async () => floorClient.close(),
    };
    contenders.push(binary, dialect, onCodex, floorContender);
    // Warm up every path once (JIT, first spawns), then take the idle baselines.
    for (const c of contenders) await c.exec(4 * MiB);
    const idle = { tether: idleRss(tether), codex: idleRss(codex) };

    const execTimes = new Map<string, number[]>();
    /** CPU per run (ms): the server process's (user + system, from /proc) and this process's (the client). */
    const execCpu = new Map<string, Array<{ server: number; client: number }>>();
    const sessionTimes = new Map<string, number[]>();
    for (let i = 0; i < RUNS; i++) {
      for (const bytes of SIZES) {
        // Rotate the order each run so no contender always goes first.
        for (let k = 0; k < contenders.length; k++) {
          const c = contenders[(k + i) % contenders.length]!;
          const key = `${c.name}|${bytes}`;
          const serverCpu = c.serverPid ? cpuMs(c.serverPid) : 0;
          const clientCpu = process.cpuUsage();
          execTimes.set(key, [...(execTimes.get(key) ?? []), await c.exec(bytes)]);
          const used = process.cpuUsage(clientCpu);
          execCpu.set(key, [
            ...(execCpu.get(key) ?? []),
            { server: c.serverPid ? cpuMs(c.serverPid) - serverCpu : Number.NaN, client: (used.user + used.system) / 1000 },
          ]);
        }
      }
      for (let k = 0; k < 3; k++) {
        const c = contenders[(k + i) % 3]!;
        sessionTimes.set(c.name, [...(sessionTimes.get(c.name) ?? []), await sessionsOnce(c.sessions!)]);
      }
    }
    const peak = { tether: readMemory(tether.pid).hwm, codex: readMemory(codex.pid).hwm };

    // Through 50 ms each way, per window (one tether server per window).
    const windowTimes = new Map<number, number[]>();
    const windowClients: ExecClient[] = [];
    for (const window of WINDOWS) {
      const server = await startTetherProcess(['--output-window', String(window)]);
      windowServers.push(server);
      // The proxy must not cap the bandwidth-delay product itself: let it queue a whole run.
      const proxy = await ChaosProxy.inFrontOf(server.url, { highWaterMark: 2 * WINDOW_BYTES });
      proxy.setLatency(LATENCY_MS);
      proxies.push(proxy);
      windowClients.push(await ExecClient.connect(proxy.url, { ...EXEC_LIKE, keepaliveTimeoutMs: 30_000 }));
    }
    for (let i = 0; i < RUNS; i++) {
      for (let k = 0; k < WINDOWS.length; k++) {
        const w = (k + i) % WINDOWS.length;
        windowTimes.set(WINDOWS[w]!, [...(windowTimes.get(WINDOWS[w]!) ?? []), await execOnce(windowClients[w]!, WINDOW_BYTES)]);
      }
    }
    await Promise.all(windowClients.map((c) => c.close()));

    // ---- report ----
    const execRate = (name: string, bytes: number) => median((execTimes.get(`${name}|${bytes}`) ?? []).map((t) => rate(bytes, t)));
    console.log(`\nbench/stream.ts: head -c N /dev/zero → ExecClient → a pipe into wc -c (median of ${RUNS} interleaved runs)\n`);
    // CPU per 256 MiB (medians): on a machine shared with other work, what each side costs
    // per byte says more than wall-clock ratios alone.
    const cpuOf = (name: string, side: 'server' | 'client') =>
      median((execCpu.get(`${name}|${SIZES[SIZES.length - 1]}`) ?? []).map((x) => x[side]));
    const last = `${SIZES[SIZES.length - 1]! / MiB} MiB`;
    const rows = [['contender', ...SIZES.map((b) => `${b / MiB} MiB`), `server CPU / ${last}`, `client CPU / ${last}`]];
    for (const c of contenders) {
      rows.push([c.name, ...SIZES.map((b) => fmtRate(execRate(c.name, b))), `${cpuOf(c.name, 'server').toFixed(0)} ms`, `${cpuOf(c.name, 'client').toFixed(0)} ms`]);
    }
    console.log(table(rows));

    const checks: string[][] = [['target', ...SIZES.map((b) => `${b / MiB} MiB`), 'verdict']];
    const ratioRow = (label: string, num: string, den: string, target: number): void => {
      const ratios = SIZES.map((b) => execRate(num, b) / execRate(den, b));
      checks.push([label, ...ratios.map(fmtRatio), verdict(ratios.every((r) => r >= target))]);
    };
    ratioRow('binary ≥ 2.5x the same client against Codex', binary.name, onCodex.name, 2.5);
    ratioRow('binary ≥ 0.90x the Node floor', binary.name, floorContender.name, 0.9);
    ratioRow('Codex dialect vs Codex (no target)', dialect.name, onCodex.name, 0);
    console.log(`\n${table(checks)}`);

    const aggregate = (name: string) => median((sessionTimes.get(name) ?? []).map((t) => rate(SESSIONS * SESSION_BYTES, t)));
    const binAgg = aggregate(binary.name);
    const dialectAgg = aggregate(dialect.name);
    const codexAgg = aggregate(onCodex.name);
    console.log(`\n${SESSIONS} sessions × ${SESSION_BYTES / MiB} MiB at once, aggregate (median of ${RUNS})\n`);
    console.log(
      table([
        ['contender', 'aggregate', 'vs Codex', 'target', 'verdict'],
        [binary.name, fmtRate(binAgg), fmtRatio(binAgg / codexAgg), '≥ 1.5x', verdict(binAgg / codexAgg >= 1.5)],
        [dialect.name, fmtRate(dialectAgg), fmtRatio(dialectAgg / codexAgg), '≥ 0.9x (on par)', verdict(dialectAgg / codexAgg >= 0.9)],
        [onCodex.name, fmtRate(codexAgg), '1.00x', '', ''],
      ]),
    );

    const tetherGrowth = peak.tether - idle.tether;
    const codexGrowth = peak.codex - idle.codex;
    console.log('\nserver RSS over the runs above (VmHWM − RSS after warm-up)\n');
    console.log(
      table([
        ['server', 'idle', 'peak', 'peak − idle', 'target', 'verdict'],
        ['tether', mib(idle.tether), mib(peak.tether), mib(tetherGrowth), `≤ Codex's + 32 MiB (${mib(codexGrowth + 32 * MiB)})`, verdict(tetherGrowth <= codexGrowth + 32 * MiB)],
        ['Codex', mib(idle.codex), mib(peak.codex), mib(codexGrowth), '', ''],
      ]),
    );

    console.log(`\n${WINDOW_BYTES / MiB} MiB through a proxy adding ${LATENCY_MS} ms each way (tether, binary frames; median of ${RUNS})\n`);
    const windowRows = [['--output-window', 'throughput', 'window / RTT', 'of the bound']];
    for (const window of WINDOWS) {
      const r = median((windowTimes.get(window) ?? []).map((t) => rate(WINDOW_BYTES, t)));
      const bound = window / MiB / ((2 * LATENCY_MS) / 1000);
      windowRows.push([mib(window), fmtRate(r), fmtRate(bound), `${((r / bound) * 100).toFixed(0)} %`]);
    }
    console.log(table(windowRows));
    console.log(`\nbench/stream.ts took ${((performance.now() - started) / 1000).toFixed(0)} s`);
  } finally {
    await Promise.allSettled(contenders.map((c) => c.close()));
    await Promise.allSettled(proxies.map((p) => p.close()));
    await Promise.allSettled([tether.stop(), codex.stop(), ...windowServers.map((s) => s.stop())]);
    floor.stop();
  }
}
