/**
 * `tether exec` end to end: the real CLI (node bin/tether.js) against an in-process tether
 * server through the chaos proxy, with a cut in the middle of the output.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { describeStartFailure } from '../../src/cli/start-failure.js';
import { ErrorCode, RpcError } from '../../src/protocol/index.js';
import { runShell, tetherShell } from '../helpers/cli.js';
import { waitGone } from '../helpers/procs.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

let target: TetherTarget;
let proxy: ChaosProxy;

beforeAll(async () => {
  target = await startTetherServer();
  proxy = await ChaosProxy.start({ targetPort: target.server.port });
});

afterAll(async () => {
  await proxy?.close();
  await target?.stop();
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function tether(
  args: string[],
  options: { onStdout?: (text: string, child: import('node:child_process').ChildProcess) => void; input?: string } = {},
): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['bin/tether.js', ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      options.onStdout?.(stdout, child);
    });
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    if (options.input !== undefined) child.stdin.write(options.input);
    child.stdin.end();
  });
}

describe('tether exec', () => {
  it('survives a cut: every line once, a notice on stderr, the remote exit code', async () => {
    let cut = false;
    const script = '$|=1; for my $i (1..120) { print "line-$i\\n"; select(undef,undef,undef,0.004); } print STDERR "done\\n"; exit 7;';
    const run = await tether(['exec', '--url', proxy.url, '--', 'perl', '-e', script], {
      onStdout: (text) => {
        if (!cut && text.includes('line-30\n')) {
          cut = true;
          proxy.cutAll();
        }
      },
    });
    expect(cut).toBe(true);
    expect(run.stdout).toBe(Array.from({ length: 120 }, (_, i) => `line-${i + 1}\n`).join(''));
    expect(run.stderr).toMatch(/connection lost .*reconnecting/);
    expect(run.stderr).toMatch(/reconnected after \d+ ms/);
    expect(run.stderr).toMatch(/done\n/);
    expect(run.code).toBe(7);
  });

  it('reports death by signal as 128+N', async () => {
    const run = await tether(['exec', '--url', proxy.url, '--', 'sh', '-c', 'kill -TERM $$']);
    expect(run.code).toBe(128 + 15);
  });

  it('pipes stdin and gives the remote a usable default environment and directory', async () => {
    const run = await tether(
      // `cat` reads to end of file: local EOF must reach the remote stdin (closeStdin).
      ['exec', '--url', proxy.url, '--env', 'GREETING=hi there', '--', 'sh', '-c', 'cat; echo "$GREETING|$HOME|$(pwd)|$PATH"; command -v ls'],
      { input: 'from-stdin\nline two\n' },
    );
    expect(run.code).toBe(0);
    const [first, second, third, fourth] = run.stdout.split('\n');
    expect([first, second]).toEqual(['from-stdin', 'line two']);
    // The server runs in this process: the remote PATH is the server's own.
    expect(third).toBe(`hi there|${process.env.HOME ?? ''}|${process.cwd()}|${process.env.PATH}`);
    expect(fourth).toMatch(/\/ls$/);
  });

  it('runs on a pty with --tty', async () => {
    const run = await tether(['exec', '--url', proxy.url, '--tty', '--', 'sh', '-c', 'test -t 1 && echo on-a-tty']);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('on-a-tty');
  });

  it("a start failure exits 127 with the server's message, which names the program or the directory", async () => {
    const program = await tether(['exec', '--url', proxy.url, '/no/such/program']);
    expect(program.code).toBe(127);
    expect(program.stderr).toBe("tether exec: cannot start '/no/such/program': No such file or directory (os error 2)\n");
    const directory = await tether(['exec', '--url', proxy.url, '--cwd', '/no/such/dir', 'pwd']);
    expect(directory.code).toBe(127);
    expect(directory.stderr).toBe("tether exec: cannot start 'pwd': cwd '/no/such/dir': No such file or directory (os error 2)\n");
    // A relative --cwd resolves on the server: the message says where it looked.
    const relative = await tether(['exec', '--url', proxy.url, '--cwd', 'no/such/dir', 'pwd']);
    expect(relative.stderr).toBe(`tether exec: cannot start 'pwd': cwd '${join(process.cwd(), 'no/such/dir')}': No such file or directory (os error 2)\n`);
    const notDirectory = await tether(['exec', '--url', proxy.url, '--cwd', '/etc/passwd', 'pwd']);
    expect(notDirectory.stderr).toBe("tether exec: cannot start 'pwd': cwd '/etc/passwd': Not a directory (os error 20)\n");
    const notExecutable = await tether(['exec', '--url', proxy.url, '/etc/passwd']);
    expect(notExecutable.stderr).toBe("tether exec: cannot start '/etc/passwd': Permission denied (os error 13) (not executable, or a directory)\n");
  });

  it("names the program (and the --cwd given) before a Codex server's bare OS message", () => {
    const bare = new RpcError(ErrorCode.InternalError, 'No such file or directory (os error 2)');
    expect(describeStartFailure(bare, 'foo', undefined)).toBe("cannot start 'foo': No such file or directory (os error 2)");
    expect(describeStartFailure(bare, 'pwd', 'x/y')).toBe("cannot start 'pwd' (--cwd 'x/y'): No such file or directory (os error 2)");
  });

  it('an unreachable server exits 255 with a clear message; usage errors exit 2', async () => {
    // Refused connections are retried like any drop, until the recovery deadline.
    const unreachable = await tether(['exec', '--url', 'ws://127.0.0.1:1', '--recovery-deadline', '1s', '--', 'true']);
    expect(unreachable.code).toBe(255);
    expect(unreachable.stderr).toMatch(/cannot reach ws:\/\/127\.0\.0\.1:1 \(connect ECONNREFUSED 127\.0\.0\.1:1\); retrying for up to 1 s\n/);
    expect(unreachable.stderr).toMatch(/cannot connect to ws:\/\/127\.0\.0\.1:1: connect ECONNREFUSED 127\.0\.0\.1:1 \(\d+ attempts in 1 s, the recovery deadline\)\n$/);
    const usage = await tether(['exec', '--url', proxy.url]);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toBe("tether exec: no remote command given (tether exec --url ws://HOST:PORT <command> [args…])\nrun 'tether exec --help' for usage\n");
  });

  it('Ctrl-C (SIGINT) interrupts the remote command, which reports 130', async () => {
    let sent = false;
    // `exec sleep`: with a forked sleep, a SIGINT landing between dash's fork and exec is
    // swallowed by dash's handler in the child (about 1 in 3 here), and sleep runs on.
    const run = await tether(['exec', '--url', proxy.url, '--', 'sh', '-c', 'echo ready; exec sleep 30'], {
      onStdout: (text, child) => {
        if (!sent && text.includes('ready\n')) {
          sent = true;
          child.kill('SIGINT');
        }
      },
    });
    expect(sent).toBe(true);
    expect(run.code).toBe(130);
  });

  it('a lost session exits 255 with a clear message', async () => {
    let cut = false;
    try {
      const run = await tether(['exec', '--url', proxy.url, '--recovery-deadline', '800ms', '--', 'sh', '-c', 'echo ready; sleep 30'], {
        onStdout: (text) => {
          if (!cut && text.includes('ready\n')) {
            cut = true;
            proxy.refuse(true);
            proxy.cutAll();
          }
        },
      });
      expect(cut).toBe(true);
      expect(run.code).toBe(255);
      expect(run.stderr).toMatch(/connection lost .*reconnecting/);
      expect(run.stderr).toMatch(/session \S+ lost: the server could not be reached again before the recovery deadline/);
    } finally {
      proxy.refuse(false);
    }
  });

  it('a reader that goes away (| head -1) ends the remote command too, exit 141 like SIGPIPE', async () => {
    const run = await runShell(`${tetherShell(['exec', '--url', proxy.url, '--', 'sh', '-c', 'echo $$; exec yes'])} | head -1; echo "status=\${PIPESTATUS[0]}"`);
    const [pid, status] = run.stdout.trim().split('\n');
    expect(status).toBe('status=141');
    // The remote `yes` was terminated with its session, not left running for the session TTL.
    expect(await waitGone([Number(pid)], 5_000)).toEqual([]);
  });
});
