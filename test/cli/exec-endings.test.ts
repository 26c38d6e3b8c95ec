/**
 * How `tether exec` and `tether mcp` end: after every byte was written locally, with the
 * remote status, and with their session ended on the server whatever the way out (normal
 * exit, failure to start, Ctrl-C, a reader gone, the host closing stdin, a signal while
 * still connecting). The real CLI against an in-process server that allows 3 sessions.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { runShell, runTether, spawnTether, tetherShell, type CliRun } from '../helpers/cli.js';
import { spawnServe, type ServeProcess } from '../helpers/serve-process.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

let target: TetherTarget;
let proxy: ChaosProxy;

beforeAll(async () => {
  target = await startTetherServer({ maxSessions: 3 });
  proxy = await ChaosProxy.inFrontOf(target.url);
});
afterEach(() => proxy.heal());
afterAll(async () => {
  await proxy?.close();
  await target?.stop();
});

describe('tether exec output', () => {
  let serve: ServeProcess;
  beforeAll(async () => {
    serve = await spawnServe(['--listen', 'ws://127.0.0.1:0']);
  });
  afterAll(() => serve?.stop());

  // The reader sleeps 2 s, then reads 64 KiB per millisecond: slower than the link, so the
  // client still holds megabytes for it when the remote command closes (with a reader
  // faster than the link, as `(sleep 2; wc -c)`, that happens only now and then).
  const slowReader = `perl -e 'sleep 2; my $n = 0; while (my $r = sysread(STDIN, my $b, 65536)) { $n += $r; select(undef, undef, undef, 0.001) } print "$n\\n"'`;

  it('exits only after every byte reached a reader that waits 2 s before reading: 30 MB, 3 runs, exit 0', { timeout: 60_000 }, async () => {
    const command = `${tetherShell(['exec', '--url', serve.url, '--', 'head', '-c', '30000000', '/dev/zero'])} | ${slowReader}; echo "status=\${PIPESTATUS[0]}"`;
    for (let run = 1; run <= 3; run++) {
      const { stdout, stderr } = await runShell(command);
      expect(stdout.split(/\s+/).filter(Boolean), `run ${run}: ${stderr}`).toEqual(['30000000', 'status=0']);
    }
  });
});

describe('every way out ends the session', () => {
  /** Ten in a row against --max-sessions 3: a session left behind would make the 4th fail. */
  const ways: { name: string; run: () => Promise<CliRun>; code: number; stdout?: string }[] = [
    { name: 'a command that succeeds', run: () => runTether(['exec', '--url', target.url, '--', 'true']), code: 0 },
    { name: 'a command that fails', run: () => runTether(['exec', '--url', target.url, '--', 'sh', '-c', 'exit 3']), code: 3 },
    { name: 'stdin to EOF', run: () => runTether(['exec', '--url', target.url, '--', 'cat'], { input: 'in\n' }), code: 0, stdout: 'in\n' },
    { name: 'a pty', run: () => runTether(['exec', '--url', target.url, '--tty', '--', 'echo', 'on-tty']), code: 0 },
    { name: 'a program that does not exist', run: () => runTether(['exec', '--url', target.url, '--', '/no/such/program']), code: 127 },
    {
      name: 'Ctrl-C',
      run: () =>
        // One process (not sh -c '…; sleep'): a shell that is forking its child when the
        // SIGINT lands loses it in the child, as it would locally.
        runTether(['exec', '--url', target.url, '--', 'perl', '-e', '$| = 1; print "ready\\n"; sleep 30'], {
          onStdout: (text, child) => text === 'ready\n' && child.kill('SIGINT'),
        }),
      code: 130,
    },
    {
      name: 'a reader that goes away (EPIPE)',
      run: () => runShell(`${tetherShell(['exec', '--url', target.url, '--', 'yes'])} | head -1; exit \${PIPESTATUS[0]}`),
      code: 141,
      stdout: 'y\n',
    },
    { name: 'mcp: the host closes stdin', run: () => runTether(['mcp', '--url', target.url, '--', 'cat'], { input: '{"jsonrpc":"2.0","method":"ping"}\n' }), code: 0 },
    {
      name: 'mcp: the host sends SIGTERM',
      run: () =>
        runTether(['mcp', '--url', target.url, '--', 'sh', '-c', 'echo "{}"; sleep 30'], {
          onStdout: (text, child) => text === '{}\n' && child.kill('SIGTERM'),
        }),
      code: 143,
    },
    { name: 'again, a command that succeeds', run: () => runTether(['exec', '--url', target.url, '--', 'echo', 'last']), code: 0, stdout: 'last\n' },
  ];

  it('ten sequential runs against --max-sessions 3 all succeed and leave no session behind', async () => {
    expect(ways).toHaveLength(10);
    for (const way of ways) {
      const run = await way.run();
      expect({ way: way.name, code: run.code }, run.stderr).toEqual({ way: way.name, code: way.code });
      if (way.stdout !== undefined) expect(run.stdout).toBe(way.stdout);
      expect(target.server.sessionCount, `${way.name} left its session behind`).toBe(0);
    }
  });

  it('Ctrl-C while the first connect is still retrying exits 130 at once, leaving nothing', async () => {
    proxy.refuse(true);
    const child = spawnTether(['exec', '--url', proxy.url, '--', 'true'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
    await new Promise<void>((resolve) =>
      child.stderr!.on('data', (d: Buffer) => {
        stderr += d.toString();
        if (/retrying/.test(stderr)) resolve();
      }),
    );
    expect(stderr).toMatch(/^tether exec: cannot reach ws:\/\/127\.0\.0\.1:\d+ \(.*\); retrying for up to 25 s$/m);
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(target.server.sessionCount).toBe(0);
  });
});

describe('the first connect', () => {
  it('survives a proxy that resets the first two connections', async () => {
    proxy.refuseNext(2);
    const run = await runTether(['exec', '--url', proxy.url, '--', 'echo', 'through']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe('through\n');
    expect(proxy.stats().refused).toBeGreaterThanOrEqual(2);
    expect(run.stderr).toMatch(/cannot reach .*; retrying for up to 25 s/);
  });
});
