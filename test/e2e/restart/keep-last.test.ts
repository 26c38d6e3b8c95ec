/**
 * `tether exec --keep-last` across kill -9 of its server (and a SIGTERM hand-over) while the
 * client is away (SIGSTOPped): a producer writes numbered lines far past its keep-last size and
 * the state dir's output disk quota under the first server, the server is killed -9 (or
 * stopped with SIGTERM, handing its keepers over), a successor adopts the process, and
 * the producer writes as much again under the successor. It is never paused: it runs to its end
 * while the client is still stopped (each phase's end is an event the test waits on: a file the
 * producer creates, then its pid gone; the producer waits for the successor on a file the test
 * creates). A successor that forgot `--keep-last` pauses it at its disk quota (it then never
 * finishes). After SIGCONT the client says exactly which seqs were dropped (one gap, continuous
 * with what the first server dropped), and what it printed is an exact prefix of the
 * producer's output then an exact suffix of it: every byte after the gap, in order, to the end.
 */
import { execSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cleanupsAfterEach } from '../../helpers/cleanups.js';
import { expectGapsBetweenExactRuns, spawnStoppedAtFirstOutput } from '../../helpers/keep-last-client.js';
import { restartablesAfterEach } from '../../helpers/restart-per-test.js';
import { eventually, processesWithMarker, serverUsers } from '../../helpers/server-process.js';

const HALF = 1_200_000; // each phase: `seq` of 1.2M numbers, about 8.5 MB
const expected = execSync(`seq 1 ${2 * HALF}`, { maxBuffer: 64 * 1024 * 1024 });

const restartables = restartablesAfterEach();
const cleanups = cleanupsAfterEach();

const cases = serverUsers().flatMap((user) => (['SIGKILL', 'SIGTERM'] as const).map((signal) => [user, signal] as const));

describe.each(cases)('tether exec --keep-last across a restart of its server (server runs as %s, stopped with %s)', (user, signal) => {
  it(
    'the producer is never paused, before or after the restart; the client gets one exact gap and every byte after it, in order',
    async () => {
      const server = await restartables.start(user, ['--output-window', '256KiB', '--output-disk', '1MiB', '--session-ttl', '10m']);
      const gate = mkdtempSync(join(tmpdir(), 'tether-keeplast-'));
      chmodSync(gate, 0o777); // the producer runs as the server's user
      cleanups.push(() => rmSync(gate, { recursive: true, force: true }));
      const firstDone = join(gate, 'first-done');
      const go = join(gate, 'go');
      const marker = `keeplast-restart-${randomBytes(6).toString('hex')}`;
      const producer = `seq 1 ${HALF}; : > ${firstDone}; while [ ! -e ${go} ]; do sleep 0.05; done; seq ${HALF + 1} ${2 * HALF}; exit 7`;
      const client = spawnStoppedAtFirstOutput(['exec', '--url', server.url, '--recovery-deadline', '10m', '--keep-last', '512KiB', 'sh', '-c', producer, marker], cleanups);
      await client.first;
      const context = () => `server stderr: ${server.current.stderr().slice(-1500)}`;

      // Under the first server: far past its keep-last and the disk quota, never paused.
      expect(await eventually(() => existsSync(firstDone), 120_000, 100), `the first half was not written while the client is stopped; ${context()}`).toBe(true);
      await server.stop(signal);
      await server.successor();
      // Under the successor: as much again, to its end, the client still stopped.
      writeFileSync(go, '');
      const finished = await eventually(() => processesWithMarker(marker, 'sh').length === 0, 120_000, 100);
      expect(finished, `the producer was paused under the successor while its client is stopped; ${context()}`).toBe(true);

      client.child.kill('SIGCONT');
      const code = await client.closed;
      const stderr = client.stderr();
      expect(code, stderr.slice(-1500)).toBe(7);

      // The gaps, said with their seqs (the first server's, and the successor's after it): one,
      // or two when output the first server sent was still in the client's socket when it
      // dropped it; and what was printed: exact runs of the producer's output between them,
      // from its first byte to its last.
      const got = Buffer.concat(client.out);
      const { gaps, runs } = expectGapsBetweenExactRuns(stderr, got, expected);
      expect(got.subarray(0, 2).toString()).toBe('1\n');
      expect(got.subarray(-String(2 * HALF).length - 1).toString()).toBe(`${2 * HALF}\n`);
      process.stderr.write(`keep-last across a restart (${signal}): ${stderr.trim()}; ${gaps} gap(s), printed ${got.length} of ${expected.length} bytes in ${runs} exact runs\n`);
    },
    300_000,
  );
});
