/**
 * A pty process across a crash of its server (issue #27, "Must show"): `tether exec --tty`
 * runs an interactive bash; the test sets a variable and reads `$$`, kills the server -9 (or
 * sends it SIGTERM),
 * starts a successor on the same port and state dir, and the same shell (same `$$`) still
 * has the variable and its history.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { spawnTether } from '../../helpers/cli.js';
import { startRestartableServer, watchOutput, type RestartableServer } from '../../helpers/restart.js';
import { serverUsers } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 45_000;

let restartables: RestartableServer[] = [];
afterEach(async () => {
  for (const r of restartables.splice(0)) await r.dispose();
});

describe.each(serverUsers())('a shell on a pty across a restart of its server (server runs as %s)', (user) => {
  for (const ending of ['SIGKILL', 'SIGTERM'] as const) {
    it(
      `${ending}: keeps its $$, its variables and its history; exits with its own status`,
      async () => {
        const server = await startRestartableServer(user);
        restartables.push(server);
        const tag = randomUUID().slice(0, 8);
        const cli = spawnTether(
          ['exec', '--url', server.url, '--recovery-deadline', '120s', '--tty', '-e', 'PS1=$ ', '-e', `TAG=${tag}`, 'bash', '--norc', '--noprofile', '-i'],
          { stdio: ['pipe', 'pipe', 'pipe'] },
        );
        const out = watchOutput(cli);
        cli.stdin!.write('echo "pid=$$ tag=$TAG"; x=41\n');
        await out.waitStdout(new RegExp(`pid=\\d+ tag=${tag}\\r?\\n`));
        const before = new RegExp(`pid=(\\d+) tag=${tag}`).exec(out.stdout())![1];

        await server.stop(ending);
        await server.successor();

        cli.stdin!.write('echo "r=$((x+1)) pid2=$$ h=[$(fc -ln 1 1)]"\n');
        const after = /r=(\d+) pid2=(\d+) h=\[\s*(.*?)\]/;
        await out.waitStdout(after);
        const [, sum, pid, history] = after.exec(out.stdout())!;
        expect(sum).toBe('42');
        expect(pid).toBe(before);
        expect(history).toBe('echo "pid=$$ tag=$TAG"; x=41');

        cli.stdin!.write('exit 3\n');
        const { code } = await out.closedWithin(20_000, () => `server: ${server.current.stderr().slice(-1500)}`);
        expect(code, out.stderr()).toBe(3);
        expect(out.stderr()).not.toMatch(/unknown session|session (is )?lost|server stopped/);
      },
      TEST_TIMEOUT_MS,
    );
  }
});
