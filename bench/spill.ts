/**
 * Output beyond the window goes to disk: what the disk log costs and how fast it replays.
 * One run, two `tether serve`s with a state dir: one with the spill (`--output-disk 4GiB`),
 * one without (`--output-disk 0`: the process pauses at the window, as with `--state-dir none`).
 *
 * - live: `tether exec head -c SIZE /dev/zero` into /dev/null, a client that keeps up, on
 *   each server: MiB/s, and the ratio with / without the disk log (a client that keeps up
 *   should pay nothing: ~1.0).
 * - replay: the same producer with the client SIGSTOPped at its first output; once the
 *   producer is gone (its output on disk), SIGCONT: the client's time to exit is the replay
 *   from disk, in MiB/s, beside the live rate.
 *
 * `node --import tsx bench/spill.ts` (after `npm run build`); knob `BENCH_SPILL_MIB` (`1024`).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitCleanlyOnSignalsAndCrashes, startTetherProcess } from './lib/servers.js';

const MIB = Number(process.env.BENCH_SPILL_MIB ?? 1024);
const repoRoot = fileURLToPath(new URL('../', import.meta.url));

/** Pids whose argv holds `marker`, run by `program`. */
function running(marker: string, program: string): boolean {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'latin1').split('\0');
      if (argv[0]!.endsWith(program) && argv.some((a) => a.includes(marker))) return true;
    } catch {
      // gone meanwhile
    }
  }
  return false;
}

/** Runs the producer under `tether exec` (stdout to /dev/null); with `stopFirst`, stopped at its first output until the producer is gone. Returns ms from start (or from SIGCONT) to exit. */
async function run(url: string, stopFirst: boolean): Promise<number> {
  const marker = `spill-bench-${process.pid}-${Math.random().toString(36).slice(2)}`;
  const started = performance.now();
  const child = spawn(process.execPath, ['bin/tether.js', 'exec', '--url', url, 'sh', '-c', `head -c ${MIB}m /dev/zero | cat; exit 7`, marker], {
    cwd: repoRoot,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let from = started;
  const closed = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  if (stopFirst) {
    await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
    child.kill('SIGSTOP');
    while (running(marker, 'sh')) await new Promise((r) => setTimeout(r, 50));
    from = performance.now();
    child.kill('SIGCONT');
  }
  child.stdout!.resume();
  const code = await closed;
  if (code !== 7) throw new Error(`tether exec exited ${code}`);
  return performance.now() - from;
}

async function main(): Promise<void> {
  exitCleanlyOnSignalsAndCrashes();
  const dirs = [mkdtempSync(join(tmpdir(), 'tether-spill-bench-')), mkdtempSync(join(tmpdir(), 'tether-spill-bench-'))];
  const withDisk = await startTetherProcess(['--state-dir', dirs[0]!, '--output-disk', '4GiB', '--output-disk-total', '8GiB']);
  const without = await startTetherProcess(['--state-dir', dirs[1]!, '--output-disk', '0']);
  try {
    const rate = (ms: number) => (MIB / ms) * 1000;
    // Interleaved, best of three each: the machine is shared.
    const live = { with: 0, without: 0 };
    for (let i = 0; i < 3; i++) {
      live.without = Math.max(live.without, rate(await run(without.url, false)));
      live.with = Math.max(live.with, rate(await run(withDisk.url, false)));
    }
    const replay = rate(await run(withDisk.url, true));
    console.log(`spill bench: ${MIB} MiB through tether exec (stdout to a pipe)`);
    console.log(`  live, client keeps up, without the disk log: ${live.without.toFixed(0)} MiB/s`);
    console.log(`  live, client keeps up, with the disk log:    ${live.with.toFixed(0)} MiB/s (ratio with/without ${(live.with / live.without).toFixed(2)})`);
    console.log(`  replay from disk after a stop:               ${replay.toFixed(0)} MiB/s (${(replay / live.with).toFixed(2)} x live)`);
  } finally {
    await withDisk.stop();
    await without.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

await main();
