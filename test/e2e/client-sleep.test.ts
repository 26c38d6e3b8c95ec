/**
 * The client survives its own sleep: a laptop whose link drops, which starts reconnecting,
 * then sleeps far longer than its recovery deadline. `tether exec` (recovery deadline 4 s)
 * runs a paced producer (40 numbered lines, then exit 7) through a chaos proxy in front of a
 * `tether serve --session-ttl 2m`. After line 5 the proxy cuts the link and refuses new
 * ones; at the first refused reconnect the client process is SIGSTOPped, and stays stopped
 * for 16 s (four deadlines: the stop's length is the scenario). The producer finishes on the
 * server meanwhile; the proxy lets connections through again; SIGCONT. The recovery deadline
 * counts running time, so the client goes on recovering: it prints every line once, in
 * order, and exits 7. (A deadline on wall-clock time gives up at once on waking.) The same
 * for the first connect, which counts the same deadline: stopped while the server cannot be
 * reached, on SIGCONT it goes on trying and connects.
 */
import type { ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/index.js';
import { cleanupsAfterEach, reapAfter } from '../helpers/cleanups.js';
import { spawnTether } from '../helpers/cli.js';
import { watchOutput } from '../helpers/restart.js';
import { serverUsers, startServerProcess, type ServerProcess } from '../helpers/server-process.js';

const LINES = 40;
const OUTPUT = Array.from({ length: LINES }, (_, i) => `line ${i + 1}\n`).join('');
/** TETHER_SLEEP_FULL=1 runs the figures: stopped 60 s against a 25 s deadline. */
const FULL = process.env.TETHER_SLEEP_FULL === '1';
const DEADLINE_MS = FULL ? 25_000 : 4_000;
/** How long the client stays stopped: four recovery deadlines (60 s with TETHER_SLEEP_FULL). */
const STOP_MS = FULL ? 60_000 : 4 * DEADLINE_MS;

const cleanups = cleanupsAfterEach();
const reap = (child: ChildProcess): void => reapAfter(cleanups, child);

/** The client's sleep: stopped for STOP_MS; the proxy lets connections through again; SIGCONT. */
async function sleepThenWake(child: ChildProcess, proxy: ChaosProxy): Promise<void> {
  child.kill('SIGSTOP');
  await new Promise((resolve) => setTimeout(resolve, STOP_MS)); // the sleep itself, not a synchronisation
  proxy.refuse(false);
  child.kill('SIGCONT');
}

describe.each(serverUsers())('a client stopped longer than its recovery deadline (server runs as %s)', (user) => {
  it(
    `SIGSTOP for ${STOP_MS / 1000} s mid-recovery against a ${DEADLINE_MS / 1000} s deadline: on SIGCONT exec resumes, prints lines 1..${LINES} once, in order, exits 7`,
    async () => {
      const server: ServerProcess = await startServerProcess({ user, args: ['--session-ttl', FULL ? '10m' : '2m'] });
      cleanups.push(() => server.dispose());
      const proxy = await ChaosProxy.inFrontOf(server.url);
      cleanups.push(() => proxy.close());
      const producer = `for i in $(seq 1 ${LINES}); do echo "line $i"; sleep 0.1; done; exit 7`;
      const child = spawnTether(['exec', '--url', proxy.url, '--recovery-deadline', `${DEADLINE_MS / 1000}s`, 'sh', '-c', producer], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      reap(child);
      const out = watchOutput(child);
      await out.waitStdout('line 5\n');

      // The link drops and the client starts reconnecting; at its first refused attempt, it sleeps.
      const reconnecting = new Promise<void>((resolve) => proxy.once('refused', () => resolve()));
      proxy.refuse(true);
      proxy.cutAll();
      await reconnecting;
      await sleepThenWake(child, proxy);

      const { code } = await out.closedWithin(20_000, () => `server: ${server.stderr().slice(-1500)}`);
      expect(code, out.stderr()).toBe(7);
      expect(out.stdout()).toBe(OUTPUT);
      expect(out.stderr()).toMatch(/connection lost/);
      expect(out.stderr()).not.toMatch(/recovery deadline|session (is )?lost|unknown session/);
    },
    STOP_MS + 30_000,
  );

  it(
    `the first connect too: SIGSTOP for ${STOP_MS / 1000} s while the server cannot be reached, against a ${DEADLINE_MS / 1000} s deadline: on SIGCONT exec connects, runs the command, exits 7`,
    async () => {
      const server: ServerProcess = await startServerProcess({ user, args: ['--session-ttl', FULL ? '10m' : '2m'] });
      cleanups.push(() => server.dispose());
      const proxy = await ChaosProxy.inFrontOf(server.url);
      cleanups.push(() => proxy.close());
      proxy.refuse(true);
      const refused = new Promise<void>((resolve) => proxy.once('refused', () => resolve()));
      const child = spawnTether(['exec', '--url', proxy.url, '--recovery-deadline', `${DEADLINE_MS / 1000}s`, 'sh', '-c', 'echo hello; exit 7'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      reap(child);
      const out = watchOutput(child);
      await refused;
      await sleepThenWake(child, proxy);

      const { code } = await out.closedWithin(20_000, () => `server: ${server.stderr().slice(-1500)}`);
      expect(code, out.stderr()).toBe(7);
      expect(out.stdout()).toBe('hello\n');
      expect(out.stderr()).toMatch(/cannot reach/);
    },
    STOP_MS + 30_000,
  );
});
