/**
 * `tether relay` while its upstream is down, under session churn: 8 clients create and
 * close downstream sessions as fast as they can during an outage (the upstream behind a
 * chaos proxy refusing every connection), beside sessions that stay open throughout (the
 * innocents). Reports the relay process's peak RSS and CPU during the outage, then heals the
 * link and reports how many innocents are served and how many upstream sessions exist.
 *
 *   node --import tsx bench/relay-outage.ts
 *
 * BENCH_OUTAGE_S (20), BENCH_CAP (the upstream's sessions per token, 64), BENCH_INNOCENTS
 * (10), BENCH_NO_OUTAGE=1 (the same churn with the upstream up: the baseline), TETHER_BIN
 * (another checkout's bin/tether.js, to measure a build before a change). Loopback only.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { ChaosProxy } from '../src/chaos/proxy.js';
import { ExecClient } from '../src/client/index.js';
import { startServer } from '../src/server/index.js';
import { tetherArgs } from '../test/helpers/cli.js';
import { serverInternals } from '../src/server/server.js';

const outageS = Number(process.env.BENCH_OUTAGE_S ?? 20);
const cap = Number(process.env.BENCH_CAP ?? 64);
const innocentCount = Number(process.env.BENCH_INNOCENTS ?? 10);

const upstream = await startServer({ port: 0, maxSessionsPerToken: cap });
const proxy = await ChaosProxy.inFrontOf(upstream.url);
const bin = process.env.TETHER_BIN ? [process.env.TETHER_BIN] : tetherArgs([]);
const relay = spawn(process.execPath, [...bin, 'relay', '--to', proxy.url, '--insecure-no-token', '--log-level', 'error'], {
  stdio: ['ignore', 'pipe', 'inherit'],
  env: { ...process.env, TETHER_TOKEN: '' },
});
const url = await new Promise<string>((resolve) => createInterface({ input: relay.stdout }).once('line', resolve));

/** CPU seconds and RSS (MiB) of the relay process, from /proc. */
function usage(): { cpuS: number; rssMiB: number } {
  const stat = readFileSync(`/proc/${relay.pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { cpuS: (Number(fields[11]) + Number(fields[12])) / 100, rssMiB: (Number(fields[21]) * 4096) / 2 ** 20 };
}

const cpuAtStart = usage().cpuS;
if (!process.env.BENCH_NO_OUTAGE) proxy.refuse(true);
const innocents: ExecClient[] = [];
for (let i = 0; i < innocentCount; i++) innocents.push(await ExecClient.connect(url, { clientName: `innocent-${i}` }));
let churned = 0;
let peakMiB = 0;
const end = Date.now() + outageS * 1000;
await Promise.all(
  Array.from({ length: 8 }, async () => {
    while (Date.now() < end) {
      try {
        const client = await ExecClient.connect(url, { clientName: 'churn', recoveryDeadlineMs: 5000 });
        await client.close();
        churned++;
      } catch {
        // refused by the relay's own caps: counted as not churned
      }
      peakMiB = Math.max(peakMiB, usage().rssMiB);
    }
  }),
);
console.log(`${churned} sessions created and closed in ${outageS} s${process.env.BENCH_NO_OUTAGE ? ' (no outage)' : ' of outage'}; relay peak RSS ${peakMiB.toFixed(0)} MiB, CPU ${(usage().cpuS - cpuAtStart).toFixed(1)} s`);
proxy.refuse(false);
const served = await Promise.all(
  innocents.map(async (client) => {
    try {
      let out = '';
      for await (const chunk of client.spawn(['sh', '-c', 'echo ok']).stdout) out += String(chunk);
      return out === 'ok\n';
    } catch {
      return false;
    }
  }),
);
console.log(`innocents served: ${served.filter(Boolean).length}/${innocentCount}; upstream sessions now: ${serverInternals(upstream).sessions.size} (cap ${cap})`);
await Promise.all(innocents.map((client) => client.close().catch(() => {})));
relay.kill('SIGTERM');
await proxy.close();
await upstream.close();
process.exit(0);
