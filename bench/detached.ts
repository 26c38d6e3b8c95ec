/**
 * What an idle detached session costs (sessions kept as long as their client asks,
 * `--max-session-ttl`): a fresh `tether serve` (with `--state-dir none`, then with a state
 * dir, where each process has a keeper), N sessions each asking a 1 h keep (`sessionKeep`),
 * each running one process that finishes (`true`), then dropped. The server's RSS and open
 * descriptors before and after (and, with a state dir, the keepers': every process descended
 * from the server), per session. A figure, not a speed: sampled after the load settled.
 * `BENCH_ONLY_MODULE=detached npm run bench` (or `node --import tsx bench/detached.ts`);
 * knobs `BENCH_DETACHED_SESSIONS` (`500`), `BENCH_DETACHED_SETTLE_MS` (`3000`).
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readMemory } from './lib/rss.js';
import { exitCleanlyOnSignalsAndCrashes, startTetherProcess, type BenchServer } from './lib/servers.js';
import { startParams, WsRpc } from './lib/ws-rpc.js';

const SESSIONS = Number(process.env.BENCH_DETACHED_SESSIONS ?? 500);
const SETTLE_MS = Number(process.env.BENCH_DETACHED_SETTLE_MS ?? 3000);
const AT_ONCE = 32;

interface Footprint {
  rss: number;
  fds: number;
  /** Processes below the server (keepers, the zygote): how many, their RSS and descriptors. */
  below: { count: number; rss: number; fds: number };
}

function fdCount(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return 0;
  }
}

/** Every process descended from `root` (by the ppid in /proc/PID/stat). */
function descendants(root: number): number[] {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parent.set(Number(name), ppid);
    } catch {
      // gone meanwhile
    }
  }
  const below = (pid: number): boolean => {
    for (let p = parent.get(pid), hops = 0; p !== undefined && hops < 64; p = parent.get(p), hops++) if (p === root) return true;
    return false;
  };
  return [...parent.keys()].filter(below);
}

function footprint(server: BenchServer): Footprint {
  const below = { count: 0, rss: 0, fds: 0 };
  for (const pid of descendants(server.pid)) {
    try {
      below.rss += readMemory(pid).rss;
      below.fds += fdCount(pid);
      below.count++;
    } catch {
      // gone meanwhile
    }
  }
  return { rss: readMemory(server.pid).rss, fds: fdCount(server.pid), below };
}

/** One idle detached session: initialize asking a 1 h keep, one process that finishes, the socket dropped. */
async function detachedSession(url: string, index: number): Promise<void> {
  const rpc = await WsRpc.connect(url);
  const init = await rpc.request('initialize', { clientName: 'bench-detached', tether: { version: 1, extensions: ['sessionKeep'], keepMs: 3_600_000 } });
  if (init.tether?.keepMs !== 3_600_000) throw new Error(`keep not granted: ${JSON.stringify(init.tether)}`);
  rpc.notify('initialized', {});
  const closed = new Promise<void>((resolve) => rpc.onProcess(`p${index}`, (method) => method === 'process/closed' && resolve()));
  await rpc.request('process/start', startParams(`p${index}`, ['true']));
  await closed;
  rpc.ws.terminate();
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;
const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

export async function run(): Promise<void> {
  const stateDir = mkdtempSync(join(tmpdir(), 'tether-bench-detached-'));
  console.log(`\n## idle detached sessions: ${SESSIONS} sessions, each with one finished process, kept 1 h\n`);
  console.log('| server | RSS before → after | per session | descriptors before → after | per session | below the server (keepers) |');
  console.log('|---|---|---|---|---|---|');
  try {
    for (const [name, args] of [
      ['--state-dir none', ['--state-dir', 'none']],
      ['with a state dir', ['--state-dir', join(stateDir, 'd')]],
    ] as const) {
      const server = await startTetherProcess(['--max-session-ttl', '2h', '--max-sessions-per-token', String(SESSIONS + 8), ...args]);
      try {
        await sleep(SETTLE_MS);
        const before = footprint(server);
        for (let i = 0; i < SESSIONS; i += AT_ONCE) {
          await Promise.all(Array.from({ length: Math.min(AT_ONCE, SESSIONS - i) }, (_, k) => detachedSession(server.url, i + k)));
        }
        await sleep(SETTLE_MS);
        const after = footprint(server);
        const belowText =
          after.below.count === before.below.count && after.below.fds === before.below.fds
            ? `${after.below.count} processes, unchanged`
            : `${before.below.count} → ${after.below.count} processes, ${mib(before.below.rss)} → ${mib(after.below.rss)}, ${before.below.fds} → ${after.below.fds} descriptors`;
        console.log(
          `| ${name} | ${mib(before.rss)} → ${mib(after.rss)} | ${kib((after.rss - before.rss) / SESSIONS)} | ${before.fds} → ${after.fds} | ${((after.fds - before.fds) / SESSIONS).toFixed(2)} | ${belowText} |`,
        );
      } finally {
        await server.stop();
      }
    }
  } finally {
    rmSync(stateDir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  exitCleanlyOnSignalsAndCrashes();
  await run();
}
