/**
 * Watchers never slow the process they watch (extension `attach`): one run, alternating
 * blocks, the writer's stream measured three ways on one server:
 *
 * - alone: `tether exec --name W -- head -c SIZE /dev/zero` read by its own client;
 * - a stopped watcher: the same, with `tether attach --watch W` SIGSTOPped at its first
 *   output for the whole stream (a watcher pulls, so it cannot hold the producer back); once
 *   the writer is done the watcher is continued and must end with the process's status,
 *   having printed every byte or said the exact gap on stderr;
 * - a hundred watchers: 100 library watchers (`ExecClient.attach(url, W, {role: 'watcher'})`
 *   in this process) reading live, on a smaller stream (BENCH_WATCHERS_HUNDRED_MIB).
 *
 * Prints the writer's MiB/s per block, each ratio against the alone block of the same round,
 * and the server's CPU and peak RSS. On two cores a hundred live watchers share the CPU with
 * the writer: their ratio is what serving a hundred copies costs, not a pause.
 *
 * `node --import tsx bench/watchers.ts` (after `npm run build`); knobs BENCH_WATCHERS_MIB
 * (256), BENCH_WATCHERS_HUNDRED_MIB (128), BENCH_WATCHERS_ROUNDS (3), BENCH_WATCHERS_COUNT (100).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { ExecClient } from '../src/client/index.js';
import { cpuMs } from './lib/cpu.js';
import { readMemory, RssSampler } from './lib/rss.js';
import { exitCleanlyOnSignalsAndCrashes, startTetherProcess, type BenchServer } from './lib/servers.js';

const MIB = Number(process.env.BENCH_WATCHERS_MIB ?? 256);
const HUNDRED_MIB = Number(process.env.BENCH_WATCHERS_HUNDRED_MIB ?? 128);
const ROUNDS = Number(process.env.BENCH_WATCHERS_ROUNDS ?? 3);
const COUNT = Number(process.env.BENCH_WATCHERS_COUNT ?? 100);
const repoRoot = fileURLToPath(new URL('../', import.meta.url));

function tether(args: string[], stdio: ('pipe' | 'ignore' | 'inherit')[]): ChildProcess {
  return spawn(process.execPath, ['bin/tether.js', ...args], { cwd: repoRoot, stdio });
}

const closed = (child: ChildProcess) => new Promise<number | null>((resolve) => (child.exitCode !== null ? resolve(child.exitCode) : child.once('close', (code) => resolve(code))));

/** Attaches a library watcher to `name` once the session exists (the writer connects first). */
async function attachWatcher(url: string, name: string): Promise<ExecClient> {
  for (let i = 0; ; i++) {
    try {
      return await ExecClient.attach(url, name, { role: 'watcher', clientName: 'bench-watcher' });
    } catch (err) {
      if (i > 200) throw err;
      await new Promise((r) => setTimeout(r, 25)); // polling for the writer's session to exist
    }
  }
}

interface Block {
  mibPerS: number;
  serverCpuMs: number;
  note: string;
}

/** One writer stream of `mib` MiB, with `mode`'s watchers. */
const dbg = (m: string) => process.env.BENCH_DEBUG && console.error(`[${new Date().toISOString()}] ${m}`);
async function block(server: BenchServer, mode: 'alone' | 'stopped' | 'hundred', mib: number): Promise<Block> {
  const name = `bench-${randomUUID().slice(0, 8)}`;
  // The process waits for a line on stdin: the watchers attach before its first byte.
  const writer = tether(['exec', '--url', server.url, '--name', name, 'sh', '-c', `read go; head -c ${mib}m /dev/zero; exit 7`], ['pipe', 'pipe', 'inherit']);
  let writerBytes = 0;
  writer.stdout!.on('data', (d: Buffer) => (writerBytes += d.length));
  const writerClosed = closed(writer);
  // Ready: a watcher can attach (the session exists); it also serves as the first of a hundred.
  dbg(`${mode}: attaching the probe`);
  const probe = await attachWatcher(server.url, name);
  dbg(`${mode}: probe attached`);
  const watchers: ExecClient[] = [probe];
  let watchedBytes = 0;
  let stopped: ChildProcess | undefined;
  let stoppedErr = '';
  let stoppedBytes = 0;
  if (mode === 'hundred') {
    while (watchers.length < COUNT) watchers.push(await attachWatcher(server.url, name));
  } else if (mode === 'stopped') {
    stopped = tether(['attach', '--url', server.url, '--watch', name], ['ignore', 'pipe', 'pipe']);
    stopped.stderr!.on('data', (d: Buffer) => (stoppedErr += d.toString()));
    stopped.stdout!.on('data', (d: Buffer) => {
      if (stoppedBytes === 0) stopped!.kill('SIGSTOP');
      stoppedBytes += d.length;
    });
  }
  // Library watchers follow the process in the session (mode hundred: all; else the probe only, which then detaches).
  const follows: Promise<void>[] = [];
  for (const w of mode === 'hundred' ? watchers : []) {
    for (const proc of w.processes()) {
      proc.stdout!.on('data', (d: Buffer) => (watchedBytes += d.length));
      follows.push(new Promise((resolve) => proc.once('exit', () => resolve())));
    }
  }
  if (mode === 'stopped') {
    // `tether attach` is attached once the session lists a second watcher (the probe is one).
    const watching = async () => ((await probe.listSessions()).sessions.find((s) => s.name === name)?.watchers ?? 0) >= 2;
    for (let i = 0; !(await watching()); i++) {
      if (i > 400) throw new Error(`tether attach --watch did not attach: ${stoppedErr}`);
      await new Promise((r) => setTimeout(r, 25)); // polling the listing for the attach
    }
  }
  if (mode !== 'hundred') await probe.close();
  const cpu0 = cpuMs(server.pid);
  const t0 = performance.now();
  dbg(`${mode}: go`);
  writer.stdin!.end('go\n');
  const code = await writerClosed;
  dbg(`${mode}: writer exited ${code}`);
  const ms = performance.now() - t0;
  const serverCpuMs = cpuMs(server.pid) - cpu0;
  if (code !== 7) throw new Error(`the writer's tether exec exited ${code}`);
  if (writerBytes !== mib * 1024 * 1024) throw new Error(`the writer got ${writerBytes} bytes of ${mib} MiB`);
  let note = '';
  if (mode === 'hundred') {
    await Promise.all(follows);
    note = `watchers got ${(watchedBytes / COUNT / 1024 / 1024).toFixed(1)} MiB each of ${mib}`;
    await Promise.all(watchers.map((w) => w.close()));
  } else if (mode === 'stopped') {
    stopped!.kill('SIGCONT');
    const watcherCode = await closed(stopped!);
    const gap = /\S*gap\S*[^\n]*/i.exec(stoppedErr)?.[0] ?? /[^\n]*(dropped|no longer)[^\n]*/i.exec(stoppedErr)?.[0];
    note = `watcher resumed: exit ${watcherCode}, ${(stoppedBytes / 1024 / 1024).toFixed(1)} MiB printed${gap ? `, said: ${gap.trim()}` : ''}`;
  }
  return { mibPerS: (mib / ms) * 1000, serverCpuMs, note };
}

async function main(): Promise<void> {
  exitCleanlyOnSignalsAndCrashes();
  const server = await startTetherProcess([]);
  const rss = new RssSampler(server.pid, 50);
  try {
    console.log(`watchers bench: the writer's stream (${MIB} MiB; ${HUNDRED_MIB} MiB with ${COUNT} watchers), ${ROUNDS} rounds in alternating blocks`);
    for (let round = 1; round <= ROUNDS; round++) {
      const alone = await block(server, 'alone', MIB);
      const stopped = await block(server, 'stopped', MIB);
      const aloneSmall = await block(server, 'alone', HUNDRED_MIB);
      const hundred = await block(server, 'hundred', HUNDRED_MIB);
      console.log(`round ${round}:`);
      console.log(`  alone                 ${alone.mibPerS.toFixed(0)} MiB/s, server CPU ${alone.serverCpuMs} ms`);
      console.log(`  one stopped watcher   ${stopped.mibPerS.toFixed(0)} MiB/s (${(stopped.mibPerS / alone.mibPerS).toFixed(2)} x alone), server CPU ${stopped.serverCpuMs} ms; ${stopped.note}`);
      console.log(`  alone (${HUNDRED_MIB} MiB)        ${aloneSmall.mibPerS.toFixed(0)} MiB/s`);
      console.log(`  ${COUNT} live watchers     ${hundred.mibPerS.toFixed(0)} MiB/s (${(hundred.mibPerS / aloneSmall.mibPerS).toFixed(2)} x alone), server CPU ${hundred.serverCpuMs} ms; ${hundred.note}`);
    }
    const r = rss.stop();
    console.log(`server peak RSS ${(r.hwm / 1024 / 1024).toFixed(0)} MiB (now ${(readMemory(server.pid).rss / 1024 / 1024).toFixed(0)} MiB)`);
  } finally {
    await server.stop();
  }
}

await main();
