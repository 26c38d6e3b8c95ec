/**
 * `tether exec` across a restart of its server (issue #27, "Must show"): a paced producer
 * (60 numbered lines, then exit 7) runs under `tether exec` against a `tether serve` with a
 * state dir; after line 10 the server is killed -9, or gets SIGTERM; a successor starts on
 * the same port and state dir, as the same user. The client exits 7 with every line once and
 * in order; after SIGTERM it said the server was restarting (and never waited out a backoff
 * for nothing: its recovery deadline is far beyond the test's timeout).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { restartingLine } from '../../../src/util/stop-notices.js';
import { ADOPT_WITHIN_MS, execProducer, PRODUCER_LINES, PRODUCER_OUTPUT, startRestartableServer, type RestartableServer } from '../../helpers/restart.js';
import { serverUsers } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 45_000;

let restartables: RestartableServer[] = [];
afterEach(async () => {
  for (const r of restartables.splice(0)) await r.dispose();
});

describe.each(serverUsers())('tether exec across a server restart (server runs as %s)', (user) => {
  for (const ending of ['SIGKILL', 'SIGTERM'] as const) {
    it(
      `${ending}: the successor adopts the process; exec exits 7 with lines 1..${PRODUCER_LINES} once, in order`,
      async () => {
        const server = await startRestartableServer(user);
        restartables.push(server);
        const out = execProducer(server);
        await out.waitStdout('line 10\n');
        const stopped = await server.stop(ending);
        if (ending === 'SIGTERM') expect(stopped, server.current.stderr()).toMatchObject({ code: 0 });
        await server.successor();
        const { code } = await out.closedWithin(20_000, () => `server: ${server.current.stderr().slice(-1500)}`);
        expect(code, out.stderr()).toBe(7);
        expect(out.stdout()).toBe(PRODUCER_OUTPUT);
        if (ending === 'SIGTERM') expect(out.stderr()).toContain(`tether exec: ${restartingLine(ADOPT_WITHIN_MS)}\n`);
        expect(out.stderr()).not.toMatch(/unknown session|session (is )?lost|server stopped/);
      },
      TEST_TIMEOUT_MS,
    );
  }

  it(
    'two crashes in a row (kill -9 after line 10, the successor killed -9 after line 30): a third server adopts, exec exits 7 with every line once',
    async () => {
      const server = await startRestartableServer(user);
      restartables.push(server);
      const out = execProducer(server);
      await out.waitStdout('line 10\n');
      await server.stop('SIGKILL');
      await server.successor();
      await out.waitStdout('line 30\n');
      await server.stop('SIGKILL');
      await server.successor();
      const { code } = await out.closedWithin(20_000, () => `server: ${server.current.stderr().slice(-1500)}`);
      expect(code, out.stderr()).toBe(7);
      expect(out.stdout()).toBe(PRODUCER_OUTPUT);
      expect(server.servers.length).toBe(3);
    },
    TEST_TIMEOUT_MS,
  );
});
