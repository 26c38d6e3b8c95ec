/**
 * Start-up benchmark (issues 9, 23): what a command costs before it does anything, measured
 * the way users run it (`node bin/tether.js …`, the bundled dist/bundle/: `npm run bench`
 * builds it, `prebench`; run alone, build first: `npx tsc -p tsconfig.build.json && node
 * scripts/bundle-cli.mjs`), each beside its floor:
 *   - `node -e 0`: Node itself;
 *   - `tether exec --url U -- true` vs a minimal Node WebSocket client doing the same
 *     exchange (bench/lib/min-exec-client.mjs: connect, initialize, start `true`, wait for
 *     closed). Target: at most 1.5x;
 *   - `tether mcp`: from spawn to its answer to `initialize`, vs the same MCP server
 *     (server-everything) spawned locally;
 *   - `tether serve`: resident memory once idle, vs a bare `node` with a `ws` server.
 * Samples of the rows are interleaved (round robin), so load from elsewhere on the machine
 * hits every row alike; medians are reported.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { mib, ms, summarize, table, verdict } from './lib/stats.js';
import { readMemory } from './lib/rss.js';
import { startTetherProcess } from './lib/servers.js';

const SAMPLES = Number(process.env.BENCH_START_SAMPLES ?? 15);
const IDLE_MS = Number(process.env.BENCH_START_IDLE_MS ?? 2000);
const repoRoot = fileURLToPath(new URL('../', import.meta.url));
const tether = path.join(repoRoot, 'bin/tether.js');
const floorClient = path.join(repoRoot, 'bench/lib/min-exec-client.mjs');
const everything = [path.join(repoRoot, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js'), 'stdio'];
const env = { ...process.env, NODE_ENV: 'production', TETHER_TOKEN: '' };

/** Wall time of a process from spawn to exit (it must exit 0). */
function timeToExit(args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      if (code === 0) resolve(performance.now() - t0);
      else reject(new Error(`${args.join(' ')} exited ${code}: ${stderr}`));
    });
  });
}

const INITIALIZE = `${JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '0' } },
})}\n`;

/** Wall time from spawning an MCP server (stdio) to the line answering `initialize`. */
function timeToInitialize(args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: ['pipe', 'pipe', 'ignore'] });
    child.once('error', reject);
    let elapsed: number | undefined;
    const lines = createInterface({ input: child.stdout! });
    lines.on('line', (line) => {
      if (elapsed !== undefined || !line.includes('"id":1')) return;
      elapsed = performance.now() - t0;
      child.stdin!.end(); // the host is done: the bridge closes the remote server and exits
    });
    // The next sample starts once this one is gone (a bridge ends its session first).
    child.once('exit', (code) => {
      if (elapsed !== undefined) resolve(elapsed);
      else reject(new Error(`${args.join(' ')} exited ${code} before answering initialize`));
    });
    child.stdin!.write(INITIALIZE);
  });
}

/** RSS of a server process once it has been idle for IDLE_MS after printing its first line. */
async function idleRss(args: string[]): Promise<number> {
  const child = spawn(process.execPath, args, { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    await new Promise<void>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once('line', () => resolve());
      child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}`)));
    });
    await new Promise((r) => setTimeout(r, IDLE_MS));
    return readMemory(child.pid!).rss;
  } finally {
    child.kill('SIGTERM');
  }
}

const BARE_WS_SERVER = `import('ws').then(({ WebSocketServer }) => {
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  server.on('listening', () => console.log(server.address().port));
});`;

export async function run(): Promise<void> {
  const server = await startTetherProcess();
  try {
    const rows: Record<string, { args: () => Promise<number> }> = {
      'node -e 0': { args: () => timeToExit(['-e', '0']) },
      'tether --version': { args: () => timeToExit([tether, '--version']) },
      'minimal ws client (floor)': { args: () => timeToExit([floorClient, server.url]) },
      'tether exec -- true': { args: () => timeToExit([tether, 'exec', '--url', server.url, '--', 'true']) },
      'MCP server, local': { args: () => timeToInitialize(everything) },
      'MCP server via tether mcp': { args: () => timeToInitialize([tether, 'mcp', '--url', server.url, process.execPath, ...everything]) },
    };
    const samples: Record<string, number[]> = Object.fromEntries(Object.keys(rows).map((name) => [name, []]));
    for (const row of Object.values(rows)) await row.args(); // warm the page cache once
    for (let i = 0; i < SAMPLES; i++) {
      for (const [name, row] of Object.entries(rows)) samples[name]!.push(await row.args());
    }
    const p50 = (name: string) => summarize(samples[name]!).p50;
    const base = p50('node -e 0');
    const beside = (name: string, floor: string) => `${(p50(name) / p50(floor)).toFixed(2)}x ${floor}`;
    process.stdout.write(`\nstart-up, wall time spawn → done (${SAMPLES} interleaved samples each, p50; bundled dist/bundle/, ${process.version})\n`);
    process.stdout.write(
      table([
        ['command', 'p50', 'min', 'vs node -e 0', 'vs its floor'],
        ...Object.keys(rows).map((name) => {
          const s = summarize(samples[name]!);
          const floor = name === 'tether exec -- true' ? beside(name, 'minimal ws client (floor)') : name === 'MCP server via tether mcp' ? beside(name, 'MCP server, local') : '';
          return [name, ms(s.p50), ms(s.min), name === 'node -e 0' ? '' : signed(s.p50 - base), floor];
        }),
      ]) + '\n',
    );
    const ratio = p50('tether exec -- true') / p50('minimal ws client (floor)');
    process.stdout.write(`target: tether exec -- true <= 1.5x the minimal ws client: ${verdict(ratio <= 1.5)} (${ratio.toFixed(2)}x)\n`);

    const tetherRss = await idleRss([tether, 'serve', '--port', '0']);
    const bareRss = await idleRss(['-e', BARE_WS_SERVER]);
    process.stdout.write(`\nidle server memory (RSS ${IDLE_MS} ms after it printed its address)\n`);
    process.stdout.write(
      table([
        ['server', 'RSS', 'vs bare'],
        ['node + ws (bare)', mib(bareRss), ''],
        ['tether serve', mib(tetherRss), `${tetherRss >= bareRss ? '+' : '-'}${mib(Math.abs(tetherRss - bareRss))} (${(tetherRss / bareRss).toFixed(2)}x)`],
      ]) + '\n',
    );
  } finally {
    await server.stop();
  }
}

// `node --import tsx bench/start.ts` runs just this one.
if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  await run();
}

/** A difference with its sign (noise can put a command below `node -e 0`). */
function signed(delta: number): string {
  return `${delta < 0 ? '-' : '+'}${ms(Math.abs(delta))}`;
}
