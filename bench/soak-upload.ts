/**
 * Soak: uploads through a flaky link with a state dir (kept mode). `tether exec sha256sum <
 * FILE` through `tether chaos --reset-every 300ms --bandwidth 20MiB/s`, RUNS times, each
 * bounded: a run that has not ended within its deadline is reported as a hang (with what
 * `tether ps` says of it: the bytes the server took, whether the child still runs) and killed.
 * Every hash is checked against the file's. Not part of `npm run bench` (minutes):
 *
 *     npm run prebench && node --import tsx bench/soak-upload.ts
 *
 * Knobs: SOAK_RUNS (50), SOAK_MB (50, in 10^6 bytes as the report measured), SOAK_RUN_TIMEOUT_S
 * (120: 50 MB at 20 MiB/s is ~2.5 s, plus a reconnect per 300 ms cut), SOAK_STATE_DIR=none
 * (for comparison: without a state dir), SOAK_SEED (the chaos proxy's seed, default 1),
 * SOAK_RESET (300ms), SOAK_BANDWIDTH (20MiB/s). Exit status 1 if any run hung or hashed wrong.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { openSync, closeSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { performance } from 'node:perf_hooks';

const BIN = join(import.meta.dirname, '..', 'bin', 'tether.js');
const RUNS = Number(process.env.SOAK_RUNS ?? 50);
const BYTES = Number(process.env.SOAK_MB ?? 50) * 1_000_000;
const RUN_TIMEOUT_MS = Number(process.env.SOAK_RUN_TIMEOUT_S ?? 120) * 1000;
const SEED = process.env.SOAK_SEED ?? '1';
const RESET = process.env.SOAK_RESET ?? '300ms';
const BANDWIDTH = process.env.SOAK_BANDWIDTH ?? '20MiB/s';

/** Starts `tether ARGS` and resolves with its first stdout line (its URL) once printed. */
async function startTether(args: string[], log: string[]): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, [BIN, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stderr!.on('data', (d: Buffer) => log.push(d.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`tether ${args[0]} exited ${code}: ${log.join('')}`)));
  });
  return { child, url: url.trim() };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

/** `tether ps` of the server, direct (not through the proxy): what a hung run looks like there. */
async function ps(url: string): Promise<string> {
  const child = spawn(process.execPath, [BIN, 'ps', '--url', url], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (out += d));
  await once(child, 'exit');
  return out.trim();
}

interface Outcome {
  ms: number;
  status: number | null;
  hash: string;
  hung: boolean;
  reconnects: number;
  stderr: string;
}

async function upload(url: string, file: string, serverUrl: string): Promise<Outcome & { ps?: string }> {
  const input = openSync(file, 'r');
  const t0 = performance.now();
  const child = spawn(process.execPath, [BIN, 'exec', '--url', url, 'sha256sum'], { stdio: [input, 'pipe', 'pipe'] });
  closeSync(input);
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (err += d));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<'hang'>((resolve) => (timer = setTimeout(() => resolve('hang'), RUN_TIMEOUT_MS)));
  const first = await Promise.race([exited, hang]);
  clearTimeout(timer);
  const reconnects = (err.match(/reconnected after/g) ?? []).length;
  if (first === 'hang') {
    const seen = await ps(serverUrl);
    child.kill('SIGKILL');
    await exited;
    return { ms: performance.now() - t0, status: null, hash: '', hung: true, reconnects, stderr: err, ps: seen };
  }
  return { ms: performance.now() - t0, status: first, hash: out.split(/\s+/)[0] ?? '', hung: false, reconnects, stderr: err };
}

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'tether-soak-'));
  const file = join(work, 'big.bin');
  const data = randomBytes(BYTES);
  writeFileSync(file, data);
  const expected = createHash('sha256').update(data).digest('hex');
  const stateDir = process.env.SOAK_STATE_DIR === 'none' ? 'none' : join(work, 'state');
  const serverLog: string[] = [];
  const chaosLog: string[] = [];
  const server = await startTether(['serve', '--listen', 'ws://127.0.0.1:0', '--state-dir', stateDir, '--log-level', 'warn'], serverLog);
  const chaos = await startTether(['chaos', '--to', server.url, '--reset-every', RESET, '--bandwidth', BANDWIDTH, '--seed', SEED, '--quiet'], chaosLog);
  const proxyUrl = chaos.url.startsWith('ws://') ? chaos.url : `ws://${chaos.url}`;
  console.log(`soak-upload: ${RUNS} × ${BYTES} bytes through tether chaos --reset-every ${RESET} --bandwidth ${BANDWIDTH} (seed ${SEED}), state dir ${stateDir}, ${RUN_TIMEOUT_MS / 1000} s per run`);
  const outcomes: Outcome[] = [];
  try {
    for (let i = 0; i < RUNS; i++) {
      const o = await upload(proxyUrl, file, server.url);
      outcomes.push(o);
      const verdict = o.hung ? 'HANG' : o.status !== 0 ? `EXIT ${o.status}` : o.hash === expected ? 'ok' : 'WRONG HASH';
      console.log(`run ${String(i + 1).padStart(2)}: ${verdict.padEnd(10)} ${(o.ms / 1000).toFixed(1).padStart(6)} s, ${o.reconnects} reconnects`);
      if (verdict !== 'ok') console.log(`  client stderr (last lines):\n${o.stderr.split('\n').slice(-6).join('\n')}`);
      if ('ps' in o && o.ps) console.log(`  tether ps at the hang:\n${o.ps}`);
    }
  } finally {
    await stop(chaos.child);
    await stop(server.child);
    rmSync(work, { recursive: true, force: true });
  }
  const ok = outcomes.filter((o) => !o.hung && o.status === 0 && o.hash === expected);
  const hung = outcomes.filter((o) => o.hung).length;
  const times = ok.map((o) => o.ms / 1000).sort((a, b) => a - b);
  const median = times.length ? times[times.length >> 1]! : NaN;
  console.log(
    `soak-upload: ${ok.length}/${outcomes.length} right, ${hung} hung, ${outcomes.length - ok.length - hung} failed or wrong; ` +
      `time per run median ${median.toFixed(1)} s, max ${times.length ? times[times.length - 1]!.toFixed(1) : 'n/a'} s; ` +
      `${outcomes.reduce((n, o) => n + o.reconnects, 0)} reconnects in all`,
  );
  process.exitCode = ok.length === outcomes.length ? 0 : 1;
}

await main();
