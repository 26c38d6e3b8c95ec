/**
 * How long a successor takes to adopt N kept processes: N `sleep`s started on a server with a
 * state dir, a kept stop, then a successor on the same dir, timed from its `startServer` call
 * until it resolves (it resolves once every keeper is adopted and every session restored).
 * `REPO` (default: this one) lets two versions be compared in alternation:
 *
 *     for r in /path/to/old . /path/to/old .; do npx tsx bench/adopt.ts $r 100; done
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { serverInternals } from '../src/server/server.js';

const repo = resolve(process.argv[2] ?? '.');
const count = Number(process.argv[3] ?? 100);
const { startServer } = (await import(join(repo, 'src/server/index.ts'))) as typeof import('../src/server/index.js');
const { ExecClient } = (await import(join(repo, 'src/client/index.ts'))) as typeof import('../src/client/index.js');
const dir = mkdtempSync(join(tmpdir(), 'tether-adopt-'));
const options = { port: 0, stateDir: dir, adoptWithinMs: 60_000, maxProcessesPerSession: Math.max(1024, count), logger: () => {} };
const first = await startServer(options);
const client = await ExecClient.connect(first.url, { recoveryDeadlineMs: 60_000 });
const procs = Array.from({ length: count }, () => client.spawn(['sleep', '600']));
await Promise.all(procs.map((p) => new Promise((r) => p.once('spawn', r))));
await first.close({ keep: true });
const started = performance.now();
const second = await startServer({ ...options, port: first.port });
const took = performance.now() - started;
const adopted = [...serverInternals(second).sessions.values()].reduce((n, s) => n + s.processes.size, 0);
console.log(`${repo}: adopted ${adopted} of ${count} kept processes in ${took.toFixed(0)} ms`);
await client.close().catch(() => {});
await second.close({ keep: false });
rmSync(dir, { recursive: true, force: true });
process.exit(0);
