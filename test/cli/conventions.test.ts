/**
 * One convention for every `tether` command (src/cli/usage.ts, units.ts): --version; --help
 * and `help <command>` on stdout; a usage error is one line naming the problem plus where to
 * read more, exit 2; durations always with their unit; `serve --port`; options end at the
 * first argument that is not one (ssh, docker run), with or without `--`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runTether, spawnTether } from '../helpers/cli.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';

const COMMANDS = ['serve', 'exec', 'cp', 'mcp', 'gateway', 'ps', 'chaos', 'relay'] as const;
const version = (JSON.parse(readFileSync(join(import.meta.dirname, '..', '..', 'package.json'), 'utf8')) as { version: string }).version;

let target: TetherTarget;
beforeAll(async () => {
  target = await startTetherServer({});
});
afterAll(() => target?.stop());

/** The two lines of a usage error, for `tether <command>` (or `tether` itself). */
function usageError(command: string | undefined, problem: RegExp | string) {
  const who = command ? `tether ${command}` : 'tether';
  return {
    code: 2,
    stdout: '',
    stderr: expect.stringMatching(new RegExp(`^${who}: ${typeof problem === 'string' ? escape(problem) : problem.source}[^\\n]*\\nrun '${who} --help' for usage\\n$`)),
  };
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

describe('tether', () => {
  it('--version prints the package version on stdout, and the native build it picked', async () => {
    // A checkout runs its source build (npm install compiles it) or, after `npm run
    // build:prebuilds`, a prebuild; the installed package's answers are in test/*.install.test.ts.
    for (const flag of ['--version', '-V', '-v']) {
      expect(await runTether([flag])).toMatchObject({
        code: 0,
        stdout: expect.stringMatching(new RegExp(`^tether ${escape(version)} \\(native: (source build|prebuild linux-(x64|arm64) (glibc|musl))\\)\n$`)),
        stderr: '',
      });
    }
  });

  it('--help and help print the command list on stdout; no command at all is a usage error (the list on stderr, exit 2)', async () => {
    const help = await runTether(['--help']);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout).toMatch(/^usage: tether <command> \[options\]\n/);
    for (const command of COMMANDS) expect(help.stdout).toContain(`\n  ${command} `);
    expect((await runTether(['help'])).stdout).toBe(help.stdout);
    expect((await runTether(['help', 'help'])).stdout).toBe(help.stdout);
    expect(await runTether([])).toMatchObject({ code: 2, stdout: '', stderr: help.stdout });
  });

  it('an unknown command or option, or help for one, is a usage error', async () => {
    expect(await runTether(['bogus'])).toMatchObject(usageError(undefined, "unknown command 'bogus'"));
    expect(await runTether(['--bogus'])).toMatchObject(usageError(undefined, "unknown option '--bogus'"));
    expect(await runTether(['help', 'bogus'])).toMatchObject(usageError(undefined, "no command 'bogus'"));
  });
});

describe.each(COMMANDS)('tether %s', (command) => {
  it('--help, -h and `tether help <command>` print the same usage on stdout, exit 0', async () => {
    const help = await runTether([command, '--help']);
    expect(help).toMatchObject({ code: 0, stderr: '' });
    expect(help.stdout).toMatch(new RegExp(`^usage: tether ${command} `));
    expect(await runTether([command, '-h'])).toMatchObject({ code: 0, stdout: help.stdout });
    expect(await runTether(['help', command])).toMatchObject({ code: 0, stdout: help.stdout });
  });

  it('a usage error is one line naming the problem, then where to read more; exit 2, nothing on stdout', async () => {
    expect(await runTether([command, '--no-such-flag'])).toMatchObject(usageError(command, "unknown option '--no-such-flag'"));
  });
});

describe('one duration syntax: a number and its unit, everywhere', () => {
  it.each([
    ['serve', ['--session-ttl', '30'], '--session-ttl'],
    ['exec', ['--url', 'ws://127.0.0.1:1', '--recovery-deadline', '25', 'true'], '--recovery-deadline'],
    ['mcp', ['--url', 'ws://127.0.0.1:1', '--keepalive-timeout', '10', 'cat'], '--keepalive-timeout'],
    ['cp', ['--url', 'ws://127.0.0.1:1', '--recovery-deadline', '25', 'a', ':/b'], '--recovery-deadline'],
    ['chaos', ['--to', '1', '--duration', '5'], '--duration'],
  ])('%s refuses a bare number', async (command, args, flag) => {
    const bare = args.find((a) => /^\d+$/.test(a) && a !== '1')!;
    expect(await runTether([command, ...args])).toMatchObject(usageError(command, `${flag}: '${bare}' needs a unit (${bare}s, ${bare}ms, ${bare}m…)`));
  });
});

describe('durations out of range', () => {
  it('refuses one a timer cannot hold (Node fires a timer over 24.8 days after 1 ms), and explains a negative one', async () => {
    expect(await runTether(['serve', '--session-ttl', '1000h'])).toMatchObject(usageError('serve', "--session-ttl: '1000h' is too long (at most 24 days, e.g. 576h)"));
    expect(await runTether(['exec', '--url', 'ws://127.0.0.1:1', '--recovery-deadline', '900h', 'true'])).toMatchObject(
      usageError('exec', "--recovery-deadline: '900h' is too long"),
    );
    expect(await runTether(['serve', '--session-ttl', '-5s'])).toMatchObject(usageError('serve', "--session-ttl: a value starting with '-' must be written --session-ttl=VALUE"));
    expect(await runTether(['serve', '--session-ttl=-5s'])).toMatchObject(usageError('serve', "--session-ttl: invalid duration '-5s'"));
  });
});

describe('sizes: one syntax, a clear refusal', () => {
  it('serve --output-window takes a SIZE, is in the help, and refuses nonsense on one line', async () => {
    const help = await runTether(['serve', '--help']);
    expect(help.stdout).toMatch(/\n  --output-window SIZE +unacknowledged output per process/);
    expect(await runTether(['serve', '--output-window', 'lots'])).toMatchObject(
      usageError('serve', "--output-window: invalid size 'lots' (expected e.g. 512B, 64KiB, 1MiB, 1GiB)"),
    );
    expect(await runTether(['serve', '--output-window', '0MiB'])).toMatchObject(usageError('serve', "--output-window: the size must be greater than zero (got '0MiB')"));
    expect(await runTether(['serve', '--output-window'])).toMatchObject(usageError('serve', '--output-window needs a value'));
  });
});

describe('tether serve --port', () => {
  it('listens on 127.0.0.1:PORT, and refuses --listen with it', async () => {
    const child = spawnTether(['serve', '--port', '0', '--state-dir', 'none'], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TETHER_TOKEN: '' } });
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.split('\n')[0]!);
      });
      child.once('exit', (code) => reject(new Error(`exited ${code}`)));
    });
    child.kill('SIGTERM');
    expect(url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    expect(await runTether(['serve', '--port', '8765', '--listen', 'ws://127.0.0.1:0'])).toMatchObject(usageError('serve', 'give --listen or --port, not both'));
    expect(await runTether(['serve', '--port', 'http'])).toMatchObject(usageError('serve', "--port: invalid port 'http' (expected 0-65535)"));
  });
});

describe('the remote command of exec and mcp', () => {
  it('starts at the first argument that is not an option (its own options stay its own), with or without --', async () => {
    const withoutSeparator = await runTether(['exec', '--url', target.url, 'printf', '%s|', '-n', '--url', '--', 'x']);
    expect(withoutSeparator).toMatchObject({ code: 0, stdout: '-n|--url|--|x|' });
    const withSeparator = await runTether(['exec', '--url', target.url, '--', 'printf', '%s|', '-n', '--url', '--', 'x']);
    expect(withSeparator).toMatchObject({ code: 0, stdout: '-n|--url|--|x|' });
  });

  it('cp shares the same connection options and the same rule (options end at the first operand)', async () => {
    for (const command of ['exec', 'mcp', 'cp', 'ps']) {
      const help = await runTether([command, '--help']);
      for (const flag of ['--url URL', '--token-file FILE', '--ca FILE', '--recovery-deadline DURATION', '--keepalive-timeout DURATION']) expect(help.stdout).toContain(`\n  ${flag} `);
    }
    // '-q' after the first operand is a file name: three operands.
    expect(await runTether(['cp', '--url', target.url, 'a', '-q', ':/b'])).toMatchObject(usageError('cp', 'expected SOURCE and DESTINATION, got 3 operands'));
    expect(await runTether(['cp', '--url', target.url, '--ca', '/nonexistent/ca.pem', 'a', ':/b'])).toMatchObject(usageError('cp', 'cannot read --ca /nonexistent/ca.pem'));
  });

  it('a server that cannot be reached is exit 255 for every client command, as ssh', async () => {
    const unreachable = ['--url', 'ws://127.0.0.1:9', '--recovery-deadline', '300ms'];
    for (const args of [['exec', ...unreachable, 'true'], ['cp', ...unreachable, '-', ':/tmp/x'], ['ps', ...unreachable]]) {
      const result = await runTether(args);
      expect(result).toMatchObject({ code: 255, stdout: '' });
      expect(result.stderr).toMatch(new RegExp(`^tether ${args[0]}: .*cannot connect to ws://127\\.0\\.0\\.1:9`, 'm'));
    }
    expect(await runTether(['ps', '--url', 'ws://127.0.0.1:9', 'extra'])).toMatchObject(usageError('ps', "unexpected argument 'extra'"));
  });

  it('a switch given a value is refused, not read as yes', async () => {
    expect(await runTether(['exec', '--url', target.url, '--tty=no', 'true'])).toMatchObject(usageError('exec', '--tty takes no value'));
    expect(await runTether(['cp', '--url', target.url, '--quiet=1', 'a', ':/b'])).toMatchObject(usageError('cp', '--quiet takes no value'));
  });

  it('names the problem when there is none, or it is empty', async () => {
    expect(await runTether(['exec', '--url', target.url])).toMatchObject(usageError('exec', 'no remote command given'));
    expect(await runTether(['exec', '--url', target.url, ''])).toMatchObject(usageError('exec', "the remote command is empty ('')"));
    expect(await runTether(['mcp', '--url', target.url, '--'])).toMatchObject(usageError('mcp', 'no remote command given'));
  });
});

describe('tether gateway', () => {
  it('has no short flags that hosts or other tools use differently (-v is not --verbose)', async () => {
    expect(await runTether(['gateway', '-v', 'servers.json'])).toMatchObject(usageError('gateway', "unknown option '-v'"));
    expect(await runTether(['gateway', '-c', 'servers.json'])).toMatchObject(usageError('gateway', "unknown option '-c'"));
    expect(await runTether(['gateway'])).toMatchObject(usageError('gateway', 'no CONFIG file given'));
  });
});
