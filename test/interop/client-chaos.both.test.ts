/**
 * Property test (issue 3): several processes stream numbered lines and echo written input
 * while the chaos proxy cuts the link at random. Whatever the schedule, every byte arrives
 * exactly once and in order per process, every write lands exactly once, exit codes are
 * right. Bounded: a handful of runs, each a second or two. Runs against tether and Codex.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { seededRandom } from '../../src/chaos/random.js';
import { startTarget, type Target } from '../helpers/target.js';
import { collect } from '../helpers/client-util.js';

let target: Target;
let proxy: ChaosProxy;

beforeAll(async () => {
  target = await startTarget();
  proxy = await ChaosProxy.inFrontOf(target.url);
});

afterAll(async () => {
  await proxy?.close();
  await target?.stop();
});

const scenario = fc.record({
  counters: fc.array(fc.record({ lines: fc.integer({ min: 40, max: 200 }), code: fc.integer({ min: 0, max: 9 }) }), { minLength: 1, maxLength: 3 }),
  echoes: fc.array(fc.record({ writes: fc.integer({ min: 3, max: 16 }), code: fc.integer({ min: 0, max: 9 }) }), { minLength: 1, maxLength: 2 }),
  // A link that dies faster than a resume handshake completes can never recover (Codex serves one
  // request at a time per connection, ~40 ms each): cut at most every ~100 ms.
  cutMinMs: fc.integer({ min: 100, max: 200 }),
  cutSpanMs: fc.integer({ min: 10, max: 200 }),
  // Latency keeps answers in flight longer, so cuts often land between a request and its
  // answer (lost start and write answers: the settle and re-send paths).
  latencyMs: fc.integer({ min: 0, max: 25 }),
  seed: fc.integer(),
});

describe('ExecClient under random cuts', () => {
  it('delivers every byte once and in order, lands every write once, keeps exit codes', async () => {
    let totalCuts = 0;
    let totalRecoveries = 0;
    await fc.assert(
      fc.asyncProperty(scenario, async ({ counters, echoes, cutMinMs, cutSpanMs, latencyMs, seed }) => {
        proxy.setLatency(latencyMs);
        const client = await ExecClient.connect(proxy.url, { clientName: 'client-chaos-test' });
        client.on('recovered', () => totalRecoveries++);
        const cutsBefore = proxy.cuts;
        try {
          const streams = counters.map((c, k) => {
            const script = `$|=1; for my $i (1..${c.lines}) { print "c${k}-$i\\n"; select(undef,undef,undef,0.003); } exit ${c.code};`;
            const proc = client.spawn(['perl', '-e', script]);
            return { proc, out: collect(proc.stdout), expected: Array.from({ length: c.lines }, (_, i) => `c${k}-${i + 1}\n`).join('') };
          });
          const echoers = echoes.map((e) => {
            const script = `$|=1; my $n = 0; while (my $l = <STDIN>) { print "echo $l"; exit ${e.code} if ++$n == ${e.writes}; }`;
            const proc = client.spawn(['perl', '-e', script], { pipeStdin: true });
            return { proc, out: collect(proc.stdout) };
          });
          // A resume needs ~4 round trips (upgrade, initialize, catch-up read): with latency, the
          // link must stay up a little longer between cuts or no recovery could ever finish.
          const minMs = cutMinMs + 12 * latencyMs;
          proxy.cutRandomly({ minMs, maxMs: minMs + cutSpanMs, random: seededRandom(seed) });
          const writers = echoers.map(async ({ proc }, k) => {
            for (let j = 1; j <= echoes[k]!.writes; j++) {
              await new Promise<void>((resolve, reject) => proc.stdin!.write(`w${k}-${j}\n`, (err) => (err ? reject(err) : resolve())));
              await new Promise((resolve) => setTimeout(resolve, 10)); // pacing, so cuts land between and during writes
            }
          });
          await Promise.all(writers);
          for (const [k, s] of streams.entries()) {
            expect(await s.proc.exited).toBe(counters[k]!.code);
            expect(await s.out).toBe(s.expected);
          }
          for (const [k, e] of echoers.entries()) {
            expect(await e.proc.exited).toBe(echoes[k]!.code);
            const expected = Array.from({ length: echoes[k]!.writes }, (_, j) => `echo w${k}-${j + 1}\n`).join('');
            expect(await e.out).toBe(expected);
          }
        } finally {
          proxy.stopCutting();
          proxy.setLatency(0);
          totalCuts += proxy.cuts - cutsBefore;
          await client.close();
        }
      }),
      { numRuns: Number(process.env.TETHER_CHAOS_RUNS ?? 6), endOnFailure: true },
    );
    // The property is only meaningful if the link was actually cut under the client.
    expect(totalCuts).toBeGreaterThan(0);
    expect(totalRecoveries).toBeGreaterThan(0);
  }, 120_000);
});
