/**
 * `npm run bench`: runs every bench module in turn (each prints its own table to stdout).
 * BENCH_ONLY_MODULE=server|recovery|chaos|start|budget|stream|hoard|relay|keep|detached|floors|mcp runs one of them.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { exitCleanlyOnSignalsAndCrashes } from './lib/servers.js';

interface BenchModule {
  run(): Promise<void>;
}

const modules: Array<{ name: string; load: () => Promise<BenchModule> }> = [
  { name: 'server', load: () => import('./server.js') },
  { name: 'recovery', load: () => import('./recovery.js') },
  { name: 'chaos', load: () => import('./chaos.js') },
  { name: 'start', load: () => import('./start.js') },
  { name: 'budget', load: () => import('./budget.js') },
  { name: 'stream', load: () => import('./stream.js') },
  { name: 'hoard', load: () => import('./hoard.js') },
  { name: 'relay', load: () => import('./relay.js') },
  { name: 'keep', load: () => import('./keep.js') },
  { name: 'detached', load: () => import('./detached.js') },
  { name: 'floors', load: () => import('./floors.js') },
];
// bench/mcp.ts belongs to the MCP work and may not exist yet in every checkout.
if (existsSync(fileURLToPath(new URL('./mcp.ts', import.meta.url)))) {
  modules.push({ name: 'mcp', load: () => import(/* optional */ './mcp.js' as string) as Promise<BenchModule> });
}

exitCleanlyOnSignalsAndCrashes();
const only = process.env.BENCH_ONLY_MODULE;
const started = Date.now();
let failed = false;
for (const module of modules) {
  if (only !== undefined && module.name !== only) continue;
  try {
    await (await module.load()).run();
  } catch (error) {
    failed = true;
    console.error(`bench ${module.name} failed:`, error);
  }
}
console.log(`bench finished in ${((Date.now() - started) / 1000).toFixed(0)} s`);
// Servers and sockets are stopped by each module; exit explicitly so a stray timer cannot hold the run.
process.exit(failed ? 1 : 0);
