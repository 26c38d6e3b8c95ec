/**
 * `tether attach`'s and `tether exec --detach`'s command lines, the process `tether attach`
 * follows, and `tether ps`'s NAME and WATCHERS columns (src/cli/attach/attach.ts, remote-options.ts, ps.ts).
 */
import { describe, expect, it } from 'vitest';
import { chooseProcess, parseAttachArgs } from '../../../src/cli/attach/attach.js';
import { formatListing } from '../../../src/cli/ps.js';
import { parseRemoteArgs } from '../../../src/cli/remote-options.js';
import { UsageError } from '../../../src/cli/usage.js';
import type { AttachedProcess } from '../../../src/client/index.js';
import type { SessionListing } from '../../../src/protocol/index.js';

const proc = (processId: string, state: 'running' | 'exited' = 'running'): AttachedProcess => ({
  processId,
  argv: ['sh', '-c', processId],
  tty: false,
  state,
  exitCode: state === 'exited' ? 0 : null,
  nextSeq: 1,
  ackedSeq: 0,
});

describe('tether attach command line', () => {
  it('takes one NAME|ID and its flags', () => {
    expect(parseAttachArgs(['--url', 'ws://h:1', '--take', '--from-start', '--process', 'p1', 'build'], {})).toMatchObject({
      url: 'ws://h:1',
      target: 'build',
      watch: false,
      take: true,
      fromStart: true,
      processId: 'p1',
    });
    expect(parseAttachArgs(['--watch', 'build'], {})).toMatchObject({ watch: true, take: false });
  });

  it('refuses no session, two sessions, and --watch with --take, naming the problem', () => {
    expect(() => parseAttachArgs([], {})).toThrow(new UsageError('no session given (tether attach NAME|ID)'));
    expect(() => parseAttachArgs(['a', 'b'], {})).toThrow(/unexpected argument 'b'/);
    expect(() => parseAttachArgs(['--watch', '--take', 'a'], {})).toThrow(/give one/);
  });

  it('follows the only process, else the only running one, else the one --process names (id or unique prefix)', () => {
    expect(chooseProcess([proc('a1')], undefined)).toMatchObject({ processId: 'a1' });
    expect(chooseProcess([proc('a1', 'exited'), proc('b2')], undefined)).toMatchObject({ processId: 'b2' });
    expect(chooseProcess([proc('a1'), proc('b2')], undefined)).toMatch(/choose one with --process \(a1: .*; b2: /);
    expect(chooseProcess([proc('a1'), proc('b2')], 'b')).toMatchObject({ processId: 'b2' });
    expect(chooseProcess([proc('a1'), proc('a2')], 'a')).toMatch(/matches several processes/);
    expect(chooseProcess([proc('a1')], 'zz')).toMatch(/the session has no process zz/);
    expect(chooseProcess([], undefined)).toBe('the session has no process to follow');
  });
});

describe('tether exec --detach --name', () => {
  it('parses --detach and --name before the command', () => {
    expect(parseRemoteArgs(['--detach', '--name', 'build', '--keep', '2h', '--', 'make'], {})).toMatchObject({ detach: true, name: 'build', keepMs: 7_200_000, command: ['make'] });
  });

  it('refuses a malformed name and a UUID-shaped one', () => {
    expect(() => parseRemoteArgs(['--detach', '--name', 'a b', 'x'], {})).toThrow(/--name must be 1 to 64 characters/);
    expect(() => parseRemoteArgs(['--detach', '--name', '3f2a0c4e-1b2c-4d5e-8f90-0123456789ab', 'x'], {})).toThrow(/must not look like a session id/);
    expect(parseRemoteArgs(['--name', 'build', 'x'], {})).toMatchObject({ name: 'build', command: ['x'] });
  });

  it('is tether exec\'s only: tether mcp does not take --detach', () => {
    expect(() => parseRemoteArgs(['--detach', 'x'], {}, 'mcp')).toThrow(/unknown option '--detach'/);
  });
});

describe('tether ps NAME and WATCHERS', () => {
  const session = (extra: Partial<SessionListing> & Record<string, unknown>): SessionListing =>
    ({
      session: 'abcdef12',
      clientName: 'tether-exec',
      current: false,
      attached: true,
      createdAt: '2029-12-31T23:59:00.000Z',
      expiresAt: null,
      processes: [{ processId: 'p', argv: ['cat'], pid: 42, tty: false, state: 'running', exitCode: null, startedAt: '', ageMs: 1000, bytesOut: 0, bytesIn: 0, paused: false }],
      ...extra,
    }) as SessionListing;
  const now = Date.parse('2030-01-01T00:00:00Z');

  it('shows the name and the watcher count when some session has one', () => {
    const text = formatListing({ scope: 'own', sessions: [session({ name: 'build', watchers: 3 }), session({ session: '12345678' })] }, now);
    const [header, first, second] = text.split('\n');
    expect(header).toMatch(/^SESSION\s+CLIENT\s+NAME\s+LINK\s+WATCHERS\s+PID\s+STATE/);
    expect(first).toMatch(/^abcdef12\s+tether-exec\s+build\s+attached\s+3\s+42\s+running/);
    expect(second).toMatch(/^12345678\s+tether-exec\s+-\s+attached\s+0\s+42/);
  });

  it('keeps the table as it was when no session has a name or a watcher (an older server too)', () => {
    const text = formatListing({ scope: 'own', sessions: [session({ watchers: 0 })] }, now);
    expect(text.split('\n')[0]).toMatch(/^SESSION\s+CLIENT\s+LINK\s+PID/);
  });

  it('a name reaches the terminal escaped, never raw', () => {
    const text = formatListing({ scope: 'own', sessions: [session({ name: 'x\u001b[2Jy' })] }, now);
    expect(text).not.toContain('\u001b');
  });
});
