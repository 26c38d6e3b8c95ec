/**
 * `tether exec --keep-last SIZE` end to end: a producer writes numbered lines far past the
 * keep-last size (and past the window and the state dir's output disk quota) while its client
 * is SIGSTOPped. The producer is never paused: it FINISHES while the client is stopped (its pid
 * is gone: an event, polled, never a fixed wait). After SIGCONT the client says on stderr
 * exactly which output seqs were dropped, and what it printed is an exact prefix of the
 * producer's output followed by an exact suffix of it (every byte after the gap, in order,
 * up to the last line), and it exits with the producer's status. Without --keep-last the
 * producer would pause at the quota (test/server/output/disk-quota-pause.test.ts) and never finish
 * while its client is stopped.
 */
import { execSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { cleanupsAfterEach } from '../helpers/cleanups.js';
import { expectOneGapThenSuffix, spawnStoppedAtFirstOutput } from '../helpers/keep-last-client.js';
import { disposeStateDir, eventually, makeStateDir, processesWithMarker, serverUsers, startServerProcess } from '../helpers/server-process.js';

const COUNT = 1_500_000; // `seq 1 COUNT`: about 10.9 MB
const expected = execSync(`seq 1 ${COUNT}`, { maxBuffer: 64 * 1024 * 1024 });

const cleanups = cleanupsAfterEach();

describe.each(serverUsers())('tether exec --keep-last (server runs as %s)', (user) => {
  it(
    'the producer finishes while the client is stopped; the client is told the exact dropped seqs and every byte after the gap is exact and in order',
    async () => {
      const stateDir = makeStateDir(user);
      cleanups.push(() => disposeStateDir(stateDir));
      const server = await startServerProcess({ user, stateDir, args: ['--output-window', '256KiB', '--output-disk', '1MiB', '--session-ttl', '10m'] });
      cleanups.push(() => server.dispose());
      const marker = `keeplast-${randomBytes(6).toString('hex')}`;
      const client = spawnStoppedAtFirstOutput(['exec', '--url', server.url, '--recovery-deadline', '10m', '--keep-last', '512KiB', 'sh', '-c', `seq 1 ${COUNT}; exit 7`, marker], cleanups);
      await client.first;
      // Never paused: the producer runs to its end while nobody reads.
      const finished = await eventually(() => processesWithMarker(marker, 'sh').length === 0, 120_000, 100);
      expect(finished, `the producer still runs while its client is stopped; server: ${server.stderr().slice(-1500)}`).toBe(true);
      client.child.kill('SIGCONT');
      const code = await client.closed;
      const stderr = client.stderr();
      expect(code, stderr.slice(-1500)).toBe(7);

      // Exactly one gap, said with its seqs, and nothing else said; what was printed: an exact
      // prefix, then (after the dropped bytes) an exact suffix to the end.
      const got = Buffer.concat(client.out);
      expect(got.length).toBeLessThan(expected.length);
      const { from, prefix, suffix } = expectOneGapThenSuffix(stderr, got, expected, String(COUNT));
      expect(from).toBeGreaterThan(0);
      expect(stderr.split('\n').filter(Boolean)).toHaveLength(1);
      process.stderr.write(`keep-last: ${stderr.trim()}; printed ${prefix} + ${suffix} of ${expected.length} bytes\n`);
    },
    180_000,
  );
});
