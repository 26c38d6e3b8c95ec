/** tether-only: `session/list` (extension sessionList) and `tether ps`: each token sees its own sessions, the admin token all. */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { formatListing } from '../../src/cli/ps.js';
import type { SessionListResult } from '../../src/protocol/index.js';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { RawClient } from '../helpers/raw-client.js';
import { TETHER_BIN } from '../helpers/serve-process.js';
import { serverInternals } from '../../src/server/server.js';

const run = promisify(execFile);

describe('tether ps', () => {
  let server: TetherServer;
  let dir: string;
  let alice: ExecClient;
  let bob: ExecClient;
  const tokenFile = (name: string) => join(dir, name);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tether-ps-'));
    for (const name of ['alice', 'bob', 'root']) writeFileSync(tokenFile(name), `${name}-token\n`);
    server = await startServer({ port: 0, token: 'alice-token', tokens: ['bob-token'], adminToken: 'root-token' });
    alice = await ExecClient.connect(server.url, { token: 'alice-token', clientName: 'alice-agent' });
    bob = await ExecClient.connect(server.url, { token: 'bob-token', clientName: 'bob-agent' });
    const a = alice.spawn(['sleep', '31']);
    const cat = alice.spawn(['cat'], { pipeStdin: true });
    const b = bob.spawn(['sleep', '32']);
    await Promise.all([once(a, 'spawn'), once(cat, 'spawn'), once(b, 'spawn')]);
    // 5 bytes in, 5 out.
    cat.stdin!.write('hello');
    await once(cat.stdout, 'data');
  });

  afterAll(async () => {
    await alice.close();
    await bob.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function ps(token: string, ...args: string[]): Promise<string> {
    const { stdout } = await run(process.execPath, [TETHER_BIN, 'ps', '--url', server.url, '--token-file', tokenFile(token), ...args], {
      env: { ...process.env, TETHER_TOKEN: '' },
    });
    return stdout;
  }

  it('shows each client only the sessions of its own token', async () => {
    const [forAlice, forBob] = await Promise.all([ps('alice'), ps('bob')]);
    const aliceSession = alice.sessionId.slice(0, 8);
    const bobSession = bob.sessionId.slice(0, 8);
    expect(forAlice.split('\n')[0]).toMatch(/^SESSION\s+CLIENT\s+LINK\s+PID\s+STATE\s+AGE\s+OUT\s+IN\s+COMMAND$/);
    expect(forAlice).toMatch(new RegExp(`^${aliceSession}\\s+alice-agent\\s+attached\\s+\\d+\\s+running\\s+\\d+s\\s+0B\\s+0B\\s+sleep 31$`, 'm'));
    expect(forAlice).toMatch(new RegExp(`^${aliceSession}\\s+alice-agent\\s+attached\\s+\\d+\\s+running\\s+\\d+s\\s+5B\\s+5B\\s+cat$`, 'm'));
    expect(forAlice).not.toContain(bobSession);
    expect(forAlice).not.toContain('sleep 32');
    expect(forBob).toMatch(new RegExp(`^${bobSession}\\s+bob-agent\\s+attached\\s+\\d+\\s+running\\s+\\d+s\\s+0B\\s+0B\\s+sleep 32$`, 'm'));
    expect(forBob).not.toContain(aliceSession);
    expect(forBob).not.toContain('sleep 31');
    // ps's own session is not listed; the full session id (a resume credential) never is.
    expect(forAlice).not.toContain('tether-ps');
    expect(forAlice + forBob).not.toContain(alice.sessionId);
  });

  it('shows the admin token every session, with the token each belongs to', async () => {
    const out = await ps('root');
    expect(out.split('\n')[0]).toMatch(/^OWNER\s+SESSION\s+CLIENT/);
    expect(out).toContain('sleep 31');
    expect(out).toContain('sleep 32');
    const owners = new Set(out.split('\n').slice(1).filter(Boolean).map((line) => line.split(/\s+/)[0]));
    expect(owners.size).toBe(2); // alice's and bob's tokens, told apart without showing them
    const json = JSON.parse(await ps('root', '--json')) as SessionListResult;
    expect(json.scope).toBe('all');
    expect(json.sessions.map((s) => s.clientName).sort()).toEqual(['alice-agent', 'bob-agent']);
    const sleep = json.sessions.flatMap((s) => s.processes).find((p) => p.argv.join(' ') === 'sleep 32')!;
    expect(sleep).toMatchObject({ state: 'running', exitCode: null, tty: false, bytesOut: 0, bytesIn: 0, paused: false });
    expect(sleep.pid).toBeGreaterThan(0);
  });

  it('a detached session shows when it expires; an exited process its code', () => {
    const now = Date.parse('2030-01-01T00:00:00Z');
    const text = formatListing(
      {
        scope: 'own',
        sessions: [
          {
            session: 'abcdef12',
            clientName: 'agent',
            current: false,
            attached: false,
            createdAt: '2029-12-31T23:50:00.000Z',
            expiresAt: '2030-01-01T00:00:25.000Z',
            processes: [
              { processId: 'p', argv: ['sh', '-c', "echo 'hi there'"], pid: 42, tty: false, state: 'exited', exitCode: 3, startedAt: '', ageMs: 65_000, bytesOut: 3 * 1024 * 1024, bytesIn: 0, paused: false },
            ],
          },
        ],
      },
      now,
    );
    expect(text.split('\n')[1]).toBe(`abcdef12  agent   detached, expires in 25s  42   exited 3  1m05s  3.0MiB  0B  sh -c 'echo '\\''hi there'\\'''`);
  });

  it('a session adopted from a predecessor server says so with its link, in the table and in session/list', async () => {
    const text = formatListing({
      scope: 'own',
      sessions: [
        { session: 'abcdef12', clientName: 'agent', current: false, attached: false, createdAt: new Date().toISOString(), expiresAt: null, adopted: true, processes: [] },
        { session: '12345678', clientName: 'other', current: false, attached: true, createdAt: new Date().toISOString(), expiresAt: null, processes: [] },
      ],
    });
    expect(text.split('\n')[1]).toMatch(/^abcdef12  agent   detached; adopted  /);
    expect(text.split('\n')[2]).toMatch(/^12345678  other   attached  /);
    // The server's side: what the adoption marks is what session/list says (and only then).
    const before = JSON.parse(await ps('alice', '--json')) as SessionListResult;
    expect(before.sessions.every((s) => s.adopted === undefined)).toBe(true);
    const session = serverInternals(server).sessions.get(alice.sessionId)!;
    expect(session.adopted).toBe(false);
    session.markAdopted();
    const after = JSON.parse(await ps('alice', '--json')) as SessionListResult;
    expect(after.sessions.find((s) => s.session === alice.sessionId.slice(0, 8))?.adopted).toBe(true);
    expect(await ps('alice')).toMatch(new RegExp(`^${alice.sessionId.slice(0, 8)}\\s+alice-agent\\s+attached; adopted\\s+\\d+`, 'm'));
  });

  it('a session the memory budget holds back says so, and why, with its link', () => {
    const text = formatListing({
      scope: 'own',
      sessions: [
        {
          session: 'abcdef12',
          clientName: 'hoarder',
          current: false,
          attached: true,
          createdAt: new Date().toISOString(),
          expiresAt: null,
          budgetHold: 'paused: over fair share (900.0MiB of 460.8MiB)',
          processes: [{ processId: 'p', argv: ['head', '-c', '100M', '/dev/zero'], pid: 7, tty: false, state: 'running', exitCode: null, startedAt: '', ageMs: 0, bytesOut: 0, bytesIn: 0, paused: true }],
        },
      ],
    });
    expect(text.split('\n')[1]).toMatch(/^abcdef12  hoarder  attached; paused: over fair share \(900\.0MiB of 460\.8MiB\)  7 /);
  });

  it("what a client chose never reaches the operator's terminal raw (escape sequences, newlines)", () => {
    const text = formatListing({
      scope: 'all',
      sessions: [
        {
          session: 'abcdef12',
          clientName: '\u001b]0;owned\u0007agent',
          current: false,
          attached: true,
          createdAt: new Date().toISOString(),
          expiresAt: null,
          owner: '0badc0de',
          processes: [{ processId: 'p', argv: ['sh', '-c', 'x\nFAKE  row', '\u001b[2J'], pid: 1, tty: false, state: 'running', exitCode: null, startedAt: '', ageMs: 0, bytesOut: 0, bytesIn: 0, paused: false }],
        },
      ],
    });
    expect(text.replace(/\n/g, '')).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    expect(text.split('\n')).toHaveLength(2);
    expect(text).toContain("\\x1b]0;owned\\x07agent");
    expect(text).toContain("'x\\x0aFAKE  row' '\\x1b[2J'");
  });

  it('the method exists only for sessions that negotiated it (a Codex client sees -32601)', async () => {
    const raw = await RawClient.connect(server.url, { token: 'alice-token' });
    try {
      await raw.request('initialize', { clientName: 'codex-like' });
      raw.notify('initialized', {});
      await expect(raw.request('session/list', {})).rejects.toMatchObject({ code: -32601 });
    } finally {
      raw.close();
    }
    const old = await ExecClient.connect(server.url, { token: 'alice-token', extensions: [] });
    await expect(old.listSessions()).rejects.toThrow(/cannot list sessions/);
    await old.close();
  });
});
