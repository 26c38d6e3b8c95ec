/**
 * Spawn→closed of /bin/true against two tether checkouts (say main before and after a change),
 * each its own `tether serve` process, measured in alternating blocks so that load from
 * anything else on the machine hits both alike. Each checkout needs its own `npm ci`.
 *
 *   node --import tsx bench/spawn-ab.ts DIR_A DIR_B      # AB_BLOCKS=20 AB_PER=25
 *   AB_ENV_B=TETHER_KEEPER_LAUNCH=spawn node --import tsx bench/spawn-ab.ts . .
 */
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { startParams, WsRpc } from './lib/ws-rpc.js';

const [dirA, dirB] = process.argv.slice(2);
if (!dirA || !dirB) {
  process.stderr.write('usage: node --import tsx bench/spawn-ab.ts DIR_A DIR_B\n');
  process.exit(2);
}
const BLOCKS = Number(process.env.AB_BLOCKS ?? 20);
const PER_BLOCK = Number(process.env.AB_PER ?? 25);
const envB: Record<string, string> = process.env.AB_ENV_B ? Object.fromEntries([process.env.AB_ENV_B.split('=', 2) as [string, string]]) : {};

async function serve(dir: string, extraEnv: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['bin/tether.js', 'serve', '--listen', 'ws://127.0.0.1:0'], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'ignore'],
    env: { ...process.env, NODE_ENV: 'production', ...extraEnv },
  });
  const url = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve));
  return { child, rpc: await WsRpc.session(url) };
}

let counter = 0;
async function spawnToClosed(rpc: WsRpc): Promise<number> {
  const id = `ab-${++counter}`;
  const closed = new Promise<void>((resolve) => rpc.onProcess(id, (method) => method === 'process/closed' && resolve()));
  const started = performance.now();
  await rpc.request('process/start', startParams(id, ['/bin/true']));
  await closed;
  rpc.offProcess(id);
  return performance.now() - started;
}

const a = await serve(dirA);
const b = await serve(dirB, envB);
try {
  for (let i = 0; i < 10; i++) {
    await spawnToClosed(a.rpc);
    await spawnToClosed(b.rpc);
  }
  const times = { A: [] as number[], B: [] as number[] };
  for (let block = 0; block < BLOCKS; block++) {
    const order = block % 2 === 0 ? (['A', 'B'] as const) : (['B', 'A'] as const);
    for (const side of order) {
      const rpc = side === 'A' ? a.rpc : b.rpc;
      for (let i = 0; i < PER_BLOCK; i++) times[side].push(await spawnToClosed(rpc));
    }
  }
  const quantile = (xs: number[], q: number) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length * q)]!;
  for (const side of ['A', 'B'] as const) {
    const xs = times[side];
    const f = (q: number) => quantile(xs, q).toFixed(2);
    console.log(`${side} ${side === 'A' ? dirA : dirB}: n=${xs.length} p25 ${f(0.25)} ms, p50 ${f(0.5)} ms, p75 ${f(0.75)} ms`);
  }
  console.log(`B/A spawn→closed p50: ${(quantile(times.B, 0.5) / quantile(times.A, 0.5)).toFixed(3)}`);
} finally {
  a.child.kill();
  b.child.kill();
}
process.exit(0);
