/** `tether exec` option parsing and the default remote environment (src/cli/remote-options.ts). */
import { describe, expect, it } from 'vitest';
import { buildRemoteEnv, DEFAULT_URL, parseRemoteArgs } from '../../../src/cli/remote-options.js';
import { Defaults } from '../../../src/server/index.js';
import { UsageError } from '../../../src/cli/usage.js';

describe('parseRemoteArgs', () => {
  it('parses every flag and the command after --', () => {
    const parsed = parseRemoteArgs(
      ['--url', 'ws://127.0.0.1:9', '--token-file=/t', '-t', '-e', 'A=1', '--env', 'B=x=y', '--inherit-env', '--cwd', 'sub', '--recovery-deadline', '5s', '--keepalive-timeout', '1500ms', '--', 'ls', '-l', '--', 'x'],
      {},
    );
    expect(parsed).toEqual({
      url: 'ws://127.0.0.1:9',
      tokenFile: '/t',
      tty: true,
      env: { A: '1', B: 'x=y' },
      inheritEnv: true,
      cwd: 'sub',
      recoveryDeadlineMs: 5000,
      keepaliveTimeoutMs: 1500,
      command: ['ls', '-l', '--', 'x'],
    });
  });

  it('--env NAME forwards the local value, and skips an unset one', () => {
    const parsed = parseRemoteArgs(['--url', 'ws://127.0.0.1:1', '-e', 'API_KEY', '--env', 'UNSET_ONE', '--', 'true'], { API_KEY: 'k' });
    expect(parsed).toMatchObject({ env: { API_KEY: 'k' } });
  });

  it('ends options at the first argument that is not one, as ssh and docker run do (with or without --)', () => {
    const url = 'ws://127.0.0.1:9';
    expect(parseRemoteArgs(['--url', url, 'ls', '-la', '--url', 'x'], {})).toMatchObject({ url, command: ['ls', '-la', '--url', 'x'] });
    expect(parseRemoteArgs(['--url', url, '-t', 'vim', '--', 'f'], {})).toMatchObject({ tty: true, command: ['vim', '--', 'f'] });
    expect(parseRemoteArgs(['--url', url, '--', '-weird-name'], {})).toMatchObject({ command: ['-weird-name'] });
    expect(parseRemoteArgs(['--url', url, '-'], {})).toMatchObject({ command: ['-'] });
    // The same argv with and without the separator.
    expect(parseRemoteArgs(['--url', url, '-e', 'A=1', 'env'], {})).toEqual(parseRemoteArgs(['--url', url, '-e', 'A=1', '--', 'env'], {}));
  });

  it('takes the URL from --url, else TETHER_URL, else where tether serve listens by default; and answers help', () => {
    expect(parseRemoteArgs(['--', 'true'], { TETHER_URL: 'ws://127.0.0.1:1' })).toMatchObject({ url: 'ws://127.0.0.1:1' });
    expect(parseRemoteArgs(['--url', 'ws://127.0.0.1:2', '--', 'true'], { TETHER_URL: 'ws://127.0.0.1:1' })).toMatchObject({ url: 'ws://127.0.0.1:2' });
    expect(parseRemoteArgs(['--', 'true'], {})).toMatchObject({ url: 'ws://127.0.0.1:8765' });
    expect(parseRemoteArgs(['--', 'true'], { TETHER_URL: '' })).toMatchObject({ url: 'ws://127.0.0.1:8765' });
    // The same place the server binds without --listen (a contract: the two must not drift).
    expect(DEFAULT_URL).toBe(`ws://${Defaults.host}:${Defaults.port}`);
    expect(parseRemoteArgs(['--help'], {})).toBe('help');
  });

  it.each([
    [['--url', 'http://x', '--', 'true'], /ws:\/\/ or wss:\/\//],
    [['--url', 'ws://127.0.0.1:1'], /no remote command given/],
    [['--url', 'ws://127.0.0.1:1', '--'], /no remote command given/],
    [['--url', 'ws://127.0.0.1:1', ''], /the remote command is empty/],
    [['--url', 'ws://127.0.0.1:1', '--cwd', '', 'ls'], /--cwd needs a directory/],
    [['--url', 'ws://127.0.0.1:1', '--recovery-deadline', '25', 'ls'], /--recovery-deadline: '25' needs a unit \(25s, 25ms, 25m…\)/],
    [['--url', 'ws://127.0.0.1:1', '--env', '=x', '--', 'true'], /NAME=VALUE/],
    [['--url', 'ws://127.0.0.1:1', '--env', 'NOT A NAME', '--', 'true'], /NAME=VALUE or a variable NAME/],
    [['--url', 'ws://127.0.0.1:1', '--bogus', '--', 'true'], /unknown option '--bogus'/],
    [['--url'], /--url needs a value/],
    [['--url', 'ws://127.0.0.1:1', '--recovery-deadline', 'soon', '--', 'true'], /duration/],
  ])('refuses %j with a clear message', (argv, message) => {
    expect(() => parseRemoteArgs(argv as string[], {})).toThrow(UsageError);
    expect(() => parseRemoteArgs(argv as string[], {})).toThrow(message);
  });

});

describe('buildRemoteEnv', () => {
  const info = { userHomeDir: 'file:///home/remote', prependPathDirs: ['file:///opt/tools/bin'] };

  it("keeps the server's PATH (core names), gives the remote HOME and local LANG/TERM", () => {
    const { env, envPolicy } = buildRemoteEnv(info, { tty: false }, { LANG: 'de_DE.UTF-8', TERM: 'xterm', SECRET_TOKEN: 's', PATH: '/local/only' });
    // No PATH in the overlay: the server's own PATH (inherited as a core name) finds its tools.
    expect(env).toEqual({ HOME: '/home/remote', LANG: 'de_DE.UTF-8', TERM: 'xterm' });
    expect(envPolicy.inherit).toBe('core');
  });

  it('falls back to C.UTF-8 and a TERM that fits the mode', () => {
    expect(buildRemoteEnv(undefined, { tty: true }, {}).env).toMatchObject({ LANG: 'C.UTF-8', TERM: 'xterm-256color' });
    expect(buildRemoteEnv(undefined, { tty: false }, { HOME: '/home/local' }).env).toMatchObject({ TERM: 'dumb', HOME: '/home/local' });
  });

  it('--inherit-env forwards the local environment (not shell-session variables or the token); --env wins', () => {
    const { env } = buildRemoteEnv(info, { tty: false, inheritEnv: true, env: { FOO: 'flag' } }, { FOO: 'local', BAR: 'b', PWD: '/x', TETHER_TOKEN: 't', PATH: '/local/bin' });
    expect(env).toMatchObject({ FOO: 'flag', BAR: 'b', PATH: '/local/bin' });
    expect(env).not.toHaveProperty('PWD');
    expect(env).not.toHaveProperty('TETHER_TOKEN');
  });
});
