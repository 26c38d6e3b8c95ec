/**
 * One checkout against another (say main before and after a change), in the same run: each
 * checkout serves with its own `tether serve` and runs its own CLI (bundled, as installed), and
 * every row is measured in alternating blocks (A then B, B then A, …) so that load from anything
 * else on the machine hits both alike. Each checkout needs its own `npm ci` and build.
 *
 *   node --import tsx bench/ab.ts DIR_A DIR_B            # AB_BLOCKS=10 AB_PER=5 AB_ROWS=…
 *   AB_ENV_B=TETHER_KEEPER_LAUNCH=spawn node --import tsx bench/ab.ts . .
 *   AB_SERVE_B='--state-dir /tmp/ab-kept' node --import tsx bench/ab.ts OLD .   # B's extra serve flags
 *
 * Rows (AB_ROWS=start,spawn,stream,binary picks some):
 *   start   `tether exec --url U -- true`, spawn to exit: start-up, connect, one process;
 *   spawn   `process/start` of /bin/true → `process/closed` over a raw ws client (the server alone);
 *   stream  64 MiB of `head -c` output over a raw ws client in the Codex dialect (base64 JSON;
 *           the server alone), start → closed;
 *   binary  `tether exec -- head -c 64 MiB /dev/zero` from the side's CLI, binary output frames
 *           (the default): client and server.
 * Printed: medians per side and B/A (below 1 means B is faster).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { summarize, table, ms } from './lib/stats.js';
import { spawnToClosed, throughputRun } from './lib/measure.js';
import { WsRpc } from './lib/ws-rpc.js';

const [dirA, dirB] = process.argv.slice(2);
if (!dirA || !dirB) {
  process.stderr.write('usage: node --import tsx bench/ab.ts DIR_A DIR_B\n');
  process.exit(2);
}
const BLOCKS = Number(process.env.AB_BLOCKS ?? 10);
const PER_BLOCK = Number(process.env.AB_PER ?? 5);
const STREAM_BYTES = 64 * 1024 * 1024;
const ROWS = (process.env.AB_ROWS ?? 'start,spawn,stream,binary').split(',');
const envB: Record<string, string> = process.env.AB_ENV_B ? Object.fromEntries([process.env.AB_ENV_B.split('=', 2) as [string, string]]) : {};
const baseEnv = { ...process.env, NODE_ENV: 'production', TETHER_TOKEN: '' };

interface Side {
  dir: string;
  url: string;
  env: NodeJS.ProcessEnv;
  rpc: WsRpc;
  stop(): void;
}

/** Extra `tether serve` flags of one side (AB_SERVE_A / AB_SERVE_B, split on spaces). */
const serveArgs = (name: 'AB_SERVE_A' | 'AB_SERVE_B'): string[] => (process.env[name] ?? '').split(' ').filter(Boolean);

async function serve(dir: string, extraEnv: Record<string, string>, extraArgs: string[]): Promise<Side> {
  // Each side its own default state dir (issue #27: a server locks it; an older checkout ignores it).
  const env = { ...baseEnv, XDG_STATE_HOME: mkdtempSync(join(tmpdir(), 'tether-ab-state-')), ...extraEnv };
  const child = spawn(process.execPath, ['bin/tether.js', 'serve', '--listen', 'ws://127.0.0.1:0', ...extraArgs], { cwd: dir, stdio: ['ignore', 'pipe', 'ignore'], env });
  const url = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve));
  return { dir, url, env, rpc: await WsRpc.session(url), stop: () => child.kill() };
}

/** Wall time of `tether …` run from the side's checkout; with `countBytes`, its stdout must be that long. */
function runCli(side: Side, args: string[], countBytes?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, ['bin/tether.js', ...args], { cwd: side.dir, env: side.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let bytes = 0;
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (bytes += d.length));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('close', (code) => {
      if (code !== 0) reject(new Error(`${side.dir}: tether ${args.join(' ')} exited ${code}: ${stderr}`));
      else if (countBytes !== undefined && bytes !== countBytes) reject(new Error(`${side.dir}: ${bytes} bytes, expected ${countBytes}`));
      else resolve(performance.now() - t0);
    });
  });
}

/** Milliseconds of one 64 MiB run (throughputRun gives MiB/s). */
async function streamCodex(side: Side): Promise<number> {
  return ((STREAM_BYTES / 1024 / 1024) / (await throughputRun(side.rpc, STREAM_BYTES))) * 1000;
}

const rows: Record<string, (side: Side) => Promise<number>> = {
  start: (side) => runCli(side, ['exec', '--url', side.url, '--', 'true']),
  spawn: async (side) => (await spawnToClosed(side.rpc, 1, 0))[0]!,
  stream: streamCodex,
  binary: (side) => runCli(side, ['exec', '--url', side.url, '--', 'head', '-c', String(STREAM_BYTES), '/dev/zero'], STREAM_BYTES),
};
for (const name of ROWS) if (!rows[name]) throw new Error(`unknown row ${name}; rows: ${Object.keys(rows).join(', ')}`);

const a = await serve(dirA, {}, serveArgs('AB_SERVE_A'));
const b = await serve(dirB, envB, serveArgs('AB_SERVE_B'));
try {
  const samples = Object.fromEntries(ROWS.map((name) => [name, { A: [] as number[], B: [] as number[] }]));
  for (const name of ROWS) {
    await rows[name]!(a); // warm caches once per side
    await rows[name]!(b);
  }
  for (let block = 0; block < BLOCKS; block++) {
    const order = block % 2 === 0 ? ([['A', a], ['B', b]] as const) : ([['B', b], ['A', a]] as const);
    for (const name of ROWS) {
      for (const [label, side] of order) {
        for (let i = 0; i < PER_BLOCK; i++) samples[name]![label].push(await rows[name]!(side));
      }
    }
  }
  process.stdout.write(`A = ${dirA}\nB = ${dirB}${process.env.AB_ENV_B ? ` (${process.env.AB_ENV_B})` : ''}${process.env.AB_SERVE_B ? ` (serve ${process.env.AB_SERVE_B})` : ''}\n`);
  process.stdout.write(`${BLOCKS} alternating blocks of ${PER_BLOCK} per row and side, ${process.version}\n`);
  process.stdout.write(
    table([
      ['row', 'A p50', 'B p50', 'B/A p50', 'A min', 'B min'],
      ...ROWS.map((name) => {
        const sa = summarize(samples[name]!.A);
        const sb = summarize(samples[name]!.B);
        return [name, ms(sa.p50), ms(sb.p50), (sb.p50 / sa.p50).toFixed(3), ms(sa.min), ms(sb.min)];
      }),
    ]) + '\n',
  );
} finally {
  a.stop();
  b.stop();
}
process.exit(0);
