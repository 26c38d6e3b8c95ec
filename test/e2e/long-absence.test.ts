/**
 * Output beyond the window goes to disk, not into a pause ("a night in a minute", scaled to
 * CI): `tether exec` runs a producer of about 128 MB (`seq`, then exit 7) against `tether serve
 * --memory-budget 64MiB` with a state dir. The client process is SIGSTOPped as soon as its
 * first output arrives. The producer FINISHES while the client is stopped (its pid is gone:
 * an event, polled, never a fixed wait): its output past the 8 MiB window went to the state
 * dir's spill instead of pausing it. The server's peak RSS (VmHWM, /proc) stays under the
 * budget plus a fixed overhead. After SIGCONT the client prints every byte exactly once and
 * in order (sha256) and exits 7. Without the spill the producer blocks in write(2) at the
 * window until the client reads, so it never finishes while the client is stopped.
 */
import { execSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cleanupsAfterEach, reapAfter } from '../helpers/cleanups.js';
import { spawnTether } from '../helpers/cli.js';
import { startRestartableServer } from '../helpers/restart.js';
import { disposeStateDir, eventually, makeStateDir, processesWithMarker, serverUsers, startServerProcess, type ServerProcess } from '../helpers/server-process.js';

// `seq 1 COUNT`: 115 MB in CI; TETHER_NIGHT_COUNT=120000000 runs the full night (1.09 GB,
// past the default --output-disk of 1 GiB: the servers here allow 2 GiB).
const COUNT = Number(process.env.TETHER_NIGHT_COUNT ?? 14_000_000);
/** The deadlines grow with the night. */
const SCALE = Math.max(1, COUNT / 14_000_000);
const BUDGET_MIB = 64;
/** What the server may hold beyond its budget: Node, its heap and code, read buffers (measured: a peak of 112 MiB in all with a 115 MB producer). */
const OVERHEAD_MIB = 96;

const cleanups = cleanupsAfterEach();
const reap = (child: ChildProcess): void => reapAfter(cleanups, child);

/** How many files the spill directory holds (segments under one directory per keeper). */
function spilledFiles(spill: string): number {
  try {
    return readdirSync(spill, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).length;
  } catch {
    return 0; // not made yet
  }
}

/** The peak resident memory of `pid` (VmHWM), in MiB. */
function peakRssMib(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/**
 * Runs the producer under `tether exec`, stops the client at its first output (`midRun` then
 * runs, while the producer still runs), waits for the producer to finish (`whileStopped` then
 * runs, e.g. a server crash and its successor),
 * continues the client: returns the server's peak RSS measured when the producer was done.
 */
async function night(
  server: () => ServerProcess,
  url: string,
  whileStopped: () => Promise<void> = async () => {},
  midRun: (marker: string) => Promise<void> = async () => {},
): Promise<{ peak: number; peakAfterReplay: number; bytes: number }> {
  const marker = `night-${randomBytes(6).toString('hex')}`;
  const child = spawnTether(['exec', '--url', url, '--recovery-deadline', '10m', 'sh', '-c', `seq 1 ${COUNT}; exit 7`, marker], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  reap(child);
  const hash = createHash('sha256');
  let bytes = 0;
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const first = new Promise<void>((resolve) => {
    child.stdout!.on('data', (d: Buffer) => {
      if (bytes === 0) {
        child.kill('SIGSTOP');
        resolve();
      }
      hash.update(d);
      bytes += d.length;
    });
  });
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  await first;
  await midRun(marker);
  // The producer runs on and finishes while nobody reads: its pid goes.
  // (Its keeper shows the command too, and stays until the client has everything: the shell counts.)
  const finished = await eventually(() => processesWithMarker(marker, 'sh').length === 0, 120_000 * SCALE, 100);
  expect(finished, `the producer still runs while its client is stopped; server: ${server().stderr().slice(-1500)}`).toBe(true);
  const peak = peakRssMib(server().pid);
  await whileStopped();
  child.kill('SIGCONT');
  const { code } = await closed;
  // Through the replay too (reported, not bounded here: the catch-up's peak is the next step).
  const peakAfterReplay = peakRssMib(server().pid);
  expect(code, stderr.slice(-1500)).toBe(7);
  expect(bytes).toBe(Number(execSync(`seq 1 ${COUNT} | wc -c`).toString().trim()));
  expect(hash.digest('hex')).toBe(expected);
  // Measured once the producer was done: everything past the window was on disk, not in memory.
  expect(peak).toBeLessThan(BUDGET_MIB + OVERHEAD_MIB);
  return { peak, peakAfterReplay, bytes };
}

const expected = execSync(`seq 1 ${COUNT} | sha256sum`).toString().split(' ')[0]!;

describe.each(serverUsers())('a night in a minute (server runs as %s)', (user) => {
  it(
    `seq 1 ${COUNT} finishes while its client is stopped; the server stays under ${BUDGET_MIB} MiB + ${OVERHEAD_MIB} MiB; on SIGCONT every byte once, in order, exit 7`,
    async () => {
      const stateDir = makeStateDir(user);
      cleanups.push(() => disposeStateDir(stateDir));
      const server = await startServerProcess({ user, stateDir, args: ['--memory-budget', `${BUDGET_MIB}MiB`, '--output-disk', '2GiB', '--session-ttl', '10m'] });
      cleanups.push(() => server.dispose());
      const { peak, peakAfterReplay, bytes } = await night(() => server, server.url);
      process.stderr.write(`long-absence: server peak RSS ${peak.toFixed(1)} MiB by the producer's end, ${peakAfterReplay.toFixed(1)} MiB after the replay (budget ${BUDGET_MIB} MiB), ${bytes} bytes\n`);
    },
    240_000 * SCALE,
  );

  it.each(['SIGKILL', 'SIGTERM'] as const)(
    'the same with the server stopped (%s) once the producer is done and a successor on the same port and state dir while the client is stopped: every byte once, exit 7',
    async (ending) => {
      const server = await startRestartableServer(user, ['--memory-budget', `${BUDGET_MIB}MiB`, '--output-disk', '2GiB', '--session-ttl', '10m']);
      cleanups.push(() => server.dispose());
      await night(
        () => server.current,
        server.url,
        async () => {
          await server.stop(ending);
          await server.successor();
        },
      );
    },
    240_000 * SCALE,
  );
  it(
    'the server killed -9 mid-run (the producer still writing, part of its output already on disk) and a successor started on the same port and state dir while the client is stopped: the producer finishes under the successor, every byte once, exit 7',
    async () => {
      const server = await startRestartableServer(user, ['--memory-budget', `${BUDGET_MIB}MiB`, '--output-disk', '2GiB', '--session-ttl', '10m']);
      cleanups.push(() => server.dispose());
      await night(
        () => server.current,
        server.url,
        async () => {},
        async (marker) => {
          // Mid-run by events: the spill has its first segment (the window is full and the
          // output goes to disk); the server is then stopped, so it reads no more and the
          // producer cannot finish, and the producer is seen running before the kill.
          const spill = join(server.stateDir, 'spill');
          const spilling = await eventually(() => spilledFiles(spill) > 0, 60_000 * SCALE, 5);
          expect(spilling, `no spill segment under ${spill}`).toBe(true);
          process.kill(server.current.pid, 'SIGSTOP');
          expect(processesWithMarker(marker, 'sh').length, 'the producer runs at the kill').toBe(1);
          await server.stop('SIGKILL');
          await server.successor();
        },
      );
    },
    240_000 * SCALE,
  );
});
