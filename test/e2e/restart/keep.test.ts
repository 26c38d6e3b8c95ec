/**
 * Sessions that outlive their server (issue #27), end to end: `tether serve` with a state dir
 * runs as a child process; `tether exec` runs a paced producer (numbered lines, then exit 7)
 * while the server is killed -9 or told SIGTERM, and a successor starts on the same port and
 * state dir. The client exits 7 with every line exactly once and in order. A server killed
 * with no successor leaves nothing behind once --adopt-within has passed.
 *
 * Every wait is for an event (a line on stdout, a process exit) or a bounded poll of a
 * condition; nothing is measured by the clock.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient, ServerStoppedError, type ExecProcess } from '../../../src/client/index.js';
import { startServer } from '../../../src/server/index.js';
import { spawnTether } from '../../helpers/cli.js';
import { RawClient } from '../../helpers/raw-client.js';
import { isLive as alive, makeStateDir, startServerProcess, type ServerProcess, type ServerUser } from '../../helpers/server-process.js';
import { serverInternals } from '../../../src/server/server.js';

const TEST_TIMEOUT_MS = 40_000;
const LINES = 80;
/** Numbered lines every 20 ms, then exit 7. */
const PRODUCER = ['sh', '-c', `i=0; while [ $i -lt ${LINES} ]; do i=$((i+1)); echo "line $i"; sleep 0.02; done; exit 7`];
const b64 = (text: string): string => Buffer.from(text).toString('base64');
const EXPECTED = Array.from({ length: LINES }, (_, i) => `line ${i + 1}\n`).join('');

const children: ChildProcess[] = [];
const servers: ServerProcess[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const server of servers.splice(0)) await server.dispose();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fresh state dir (0700), owned by the server's user, removed after the test. */
function stateDir(user: ServerUser = 'self'): string {
  const dir = makeStateDir(user);
  dirs.push(dir);
  return dir;
}

/** `tether serve` on loopback PORT (0: any) with `--state-dir DIR --adopt-within …`, once it printed its URL. */
async function serve(dir: string, port: number, adoptWithin: string, extra: string[] = [], user: ServerUser = 'self', token = ''): Promise<ServerProcess> {
  const server = await startServerProcess({ user, port, stateDir: dir, args: ['--adopt-within', adoptWithin, ...extra], env: { TETHER_TOKEN: token } });
  servers.push(server);
  return server;
}

/** `tether exec` of the producer; resolves `ready` once `after` lines arrived. */
function execProducer(url: string, after: number) {
  const cli = spawnTether(['exec', '--url', url, '--recovery-deadline', '60s', ...PRODUCER], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(cli);
  let stdout = '';
  let stderr = '';
  cli.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => cli.once('close', (code) => resolve(code)));
  const ready = new Promise<void>((resolve) => {
    cli.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      if (stdout.includes(`line ${after}\n`)) resolve();
    });
  });
  return { ready, exited, stdout: () => stdout, stderr: () => stderr };
}

/**
 * A server (`--adopt-within adoptWithin`) with one kept command that said its pid and its
 * keeper's, killed -9; `then` runs once it has exited. Its client (recovery deadline
 * `deadlineMs`) is closed afterwards.
 */
async function afterKill9(
  adoptWithin: string,
  deadlineMs: number,
  then: (killed: { dir: string; server: ServerProcess; pid: number; keeperPid: number }) => Promise<void>,
): Promise<void> {
  const dir = stateDir();
  const server = await serve(dir, 0, adoptWithin);
  const client = await ExecClient.connect(server.url, { clientName: 'restart-keep-kill9', recoveryDeadlineMs: deadlineMs });
  try {
    const { pid, keeperPid } = await spawnSayingPids(client, (proc) => proc.on('error', () => {}));
    expect(readdirSync(join(dir, 'k'))).toHaveLength(1);
    server.child.kill('SIGKILL');
    await server.exited;
    await then({ dir, server, pid, keeperPid });
  } finally {
    await client.close().catch(() => {});
  }
}

/**
 * Spawns a command that says its pid and its parent's (its keeper's), then loops; resolves
 * with both once said. `prepare` runs on the process before anything is awaited.
 */
async function spawnSayingPids(client: ExecClient, prepare?: (proc: ExecProcess) => void) {
  const proc = client.spawn(['sh', '-c', 'echo "$$ $PPID"; while :; do sleep 0.05; done']);
  prepare?.(proc);
  const line = await new Promise<string>((resolve) => proc.stdout.once('data', (d: Buffer) => resolve(d.toString())));
  const [pid, keeperPid] = line.trim().split(' ').map(Number) as [number, number];
  return { proc, pid, keeperPid };
}

/** Polls `condition` every 50 ms until it holds, failing after `limitMs` (a wait for a condition, not a sleep). */
async function until(condition: () => boolean, limitMs: number, what: string): Promise<void> {
  for (let waited = 0; !condition(); waited += 50) {
    if (waited >= limitMs) throw new Error(`still not ${what} after ${limitMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('tether serve with a state dir: a successor adopts the running processes', () => {
  // tether exec across kill -9 and SIGTERM, as root and as nobody: test/e2e/restart/exec.test.ts.
  it(
    'the command ends while no server runs: the successor learns its output and exit status from the keeper',
    async () => {
      const dir = stateDir();
      const first = await serve(dir, 0, '10s');
      const cli = spawnTether(['exec', '--url', first.url, '--recovery-deadline', '60s', 'sh', '-c', 'echo "pid $$"; sleep 0.5; i=0; while [ $i -lt 20 ]; do i=$((i+1)); echo "line $i"; done; exit 7'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(cli);
      let stdout = '';
      cli.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      const exited = new Promise<number | null>((resolve) => cli.once('close', (code) => resolve(code)));
      await until(() => /^pid \d+\n/.test(stdout), 10_000, 'started');
      const pid = Number(/^pid (\d+)/.exec(stdout)![1]);
      first.child.kill('SIGKILL');
      await first.exited;
      // It runs to its end alone (its output retained by its keeper).
      await until(() => !alive(pid), 10_000, 'ended');
      await serve(dir, first.port, '10s');
      expect(await exited).toBe(7);
      expect(stdout).toBe(`pid ${pid}\n${Array.from({ length: 20 }, (_, i) => `line ${i + 1}\n`).join('')}`);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'tether serve --replace mid-stream: the new server takes the socket and the processes; tether exec exits 7 with every line once, in order',
    async () => {
      const dir = stateDir();
      const first = await serve(dir, 0, '10s');
      const exec = execProducer(first.url, 10);
      await exec.ready;
      const second = await serve(dir, first.port, '10s', ['--replace']);
      const code = await exec.exited;
      await first.exited;
      expect({ code, stdout: exec.stdout() }).toEqual({ code: 7, stdout: EXPECTED });
      expect(second.stderr()).toMatch(/restored from the state dir with 1 process/);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'a server killed with no successor: its processes live on until --adopt-within has passed, then no process, keeper or socket is left',
    () =>
      afterKill9('2s', 60_000, async ({ dir, pid, keeperPid }) => {
        // Kept: the server's death did not end them.
        expect([alive(pid), alive(keeperPid)]).toEqual([true, true]);
        await until(() => !alive(pid) && !alive(keeperPid), 15_000, 'gone');
        expect(readdirSync(join(dir, 'k'))).toEqual([]);
      }),
    TEST_TIMEOUT_MS,
  );

  it(
    'a keeper whose session has no record is adopted and killed by the successor (long before its own --adopt-within)',
    () =>
      afterKill9('60s', 1_000, async ({ dir, server, pid, keeperPid }) => {
        for (const name of readdirSync(join(dir, 'sessions'))) rmSync(join(dir, 'sessions', name));
        const second = await serve(dir, server.port, '60s');
        await until(() => !alive(pid) && !alive(keeperPid), 15_000, 'gone');
        expect(second.stderr()).toMatch(/belongs to no recorded session: its processes are killed/);
        expect(readdirSync(join(dir, 'k'))).toEqual([]);
      }),
    TEST_TIMEOUT_MS,
  );

  it(
    'the socket of a keeper killed outright (nothing listens) is removed by the next server',
    () =>
      afterKill9('60s', 1_000, async ({ dir, server, pid, keeperPid }) => {
        process.kill(keeperPid, 'SIGKILL');
        process.kill(-pid, 'SIGKILL');
        await until(() => !alive(pid) && !alive(keeperPid), 10_000, 'gone');
        expect(readdirSync(join(dir, 'k'))).toHaveLength(1);
        const second = await serve(dir, server.port, '60s');
        expect(readdirSync(join(dir, 'k'))).toEqual([]);
        await until(() => /stale socket removed/.test(second.stderr()), 10_000, 'logged');
      }),
    TEST_TIMEOUT_MS,
  );

  it(
    'Codex dialect (process/start, process/read, process/write), with a token: a write re-sent to the successor under its writeId is not applied twice, and reads carry on',
    async () => {
      const dir = stateDir();
      const token = 'restart-keep-secret';
      const first = await serve(dir, 0, '10s', [], 'self', token);
      const text = (chunks: { chunk: string }[]) => chunks.map((c) => Buffer.from(c.chunk, 'base64').toString()).join('');
      const c1 = await RawClient.connect(first.url, { token });
      const { sessionId } = await c1.handshake('restart-keep-codex');
      const processId = 'p1';
      await c1.request('process/start', {
        processId,
        argv: ['sh', '-c', 'read a; echo "got $a"; read b; echo "got $b"; exit 3'],
        cwd: 'file:///',
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
        tty: false,
        pipeStdin: true,
      });
      expect(await c1.request('process/write', { processId, chunk: b64('one\n'), writeId: 'w1' })).toEqual({ status: 'accepted' });
      let seen = '';
      let afterSeq = 0;
      while (!seen.includes('got one\n')) {
        const r = await c1.request('process/read', { processId, afterSeq, waitMs: 5_000 });
        seen += text(r.chunks);
        afterSeq = r.nextSeq - 1;
      }
      first.child.kill('SIGKILL');
      await first.exited;
      await c1.closed;
      const second = await serve(dir, first.port, '10s', [], 'self', token);
      const c2 = await RawClient.connect(second.url, { token });
      try {
        // The session's owner is the token's digest, as recorded: the same token resumes it.
        await c2.handshake('restart-keep-codex', sessionId);
        // The answer to w1 could have been lost with the server: the client sends it again.
        expect(await c2.request('process/write', { processId, chunk: b64('one\n'), writeId: 'w1' })).toEqual({ status: 'accepted' });
        expect(await c2.request('process/write', { processId, chunk: b64('two\n'), writeId: 'w2' })).toEqual({ status: 'accepted' });
        let all = '';
        let from = 0;
        let result: { closed: boolean; exitCode: number | null } = { closed: false, exitCode: null };
        while (!result.closed) {
          const r = await c2.request('process/read', { processId, afterSeq: from, waitMs: 5_000 });
          all += text(r.chunks);
          from = r.nextSeq - 1;
          result = r;
        }
        // session/list (and tether ps) say the session was adopted (asked on a session of the same token).
        const lister = await RawClient.connect(second.url, { token });
        await lister.request('initialize', { clientName: 'lister', tether: { version: 1, extensions: ['sessionList'] } });
        lister.notify('initialized', {});
        const listed = (await lister.request('session/list', {})) as { sessions: { session: string; adopted?: boolean }[] };
        await lister.close();
        expect(listed.sessions.find((x) => sessionId.startsWith(x.session))?.adopted).toBe(true);
        // Read from the start: what the first server exposed keeps its seqs; "one" was written once.
        expect({ all, exitCode: result.exitCode }).toEqual({ all: 'got one\ngot two\n', exitCode: 3 });
      } finally {
        await c2.close();
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'a terminal: an interactive shell keeps its $$ and its variables across kill -9 of the server',
    async () => {
      const dir = stateDir();
      const first = await serve(dir, 0, '10s');
      const c1 = await RawClient.connect(first.url);
      const { sessionId } = await c1.handshake('restart-keep-pty');
      const processId = 'sh1';
      await c1.request('process/start', { processId, argv: ['sh', '-i'], cwd: 'file:///', env: { PATH: process.env.PATH ?? '/usr/bin:/bin', PS1: '$ ' }, tty: true });
      await c1.request('process/write', { processId, chunk: b64('kept=yes; echo "before $$"\n'), writeId: 'w1' });
      const before = await c1.waitFor(() => /before (\d+)\r?\n/.test(c1.output(processId)), 10_000, true).then(() => /before (\d+)\r?\n/.exec(c1.output(processId))![1]);
      first.child.kill('SIGKILL');
      await first.exited;
      await c1.closed;
      const second = await serve(dir, first.port, '10s');
      const c2 = await RawClient.connect(second.url);
      try {
        await c2.handshake('restart-keep-pty', sessionId);
        await c2.request('process/write', { processId, chunk: b64('echo "after $$ $kept"\n'), writeId: 'w2' });
        const pattern = /after (\d+) (\w+)\r?\n/;
        let seen = '';
        for (let afterSeq = 0; !pattern.test(seen); ) {
          const r = await c2.request('process/read', { processId, afterSeq, waitMs: 5_000 });
          seen += r.chunks.map((c: { chunk: string }) => Buffer.from(c.chunk, 'base64').toString()).join('');
          afterSeq = r.nextSeq - 1;
        }
        expect(pattern.exec(seen)!.slice(1)).toEqual([before, 'yes']);
        await c2.request('process/terminate', { processId });
      } finally {
        await c2.close();
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'idempotency keys (fsResume) outlive the server: a mutating fs request re-sent to the successor is answered as the first copy was, not run again',
    async () => {
      const dir = stateDir();
      const work = mkdtempSync(join(tmpdir(), 'tether-keep-fs-'));
      dirs.push(work);
      writeFileSync(join(work, 'doomed'), '');
      const remove = { path: `file://${join(work, 'doomed')}`, force: false, idempotencyKey: 'rm-1' };
      const initialize = (resumeSessionId?: string) => ({ clientName: 'restart-keep-fs', tether: { version: 1, extensions: ['fsResume'] }, ...(resumeSessionId ? { resumeSessionId } : {}) });
      const first = await serve(dir, 0, '10s');
      const c1 = await RawClient.connect(first.url);
      const { sessionId } = await c1.request('initialize', initialize());
      c1.notify('initialized', {});
      expect(await c1.call('fs/remove', remove)).toMatchObject({ result: {} });
      expect(existsSync(join(work, 'doomed'))).toBe(false);
      // Killed right after its answers: the session (idle, no process) and its key are on file already.
      first.child.kill('SIGKILL');
      await first.exited;
      await c1.closed;
      const second = await serve(dir, first.port, '10s');
      const c2 = await RawClient.connect(second.url);
      try {
        await c2.request('initialize', initialize(sessionId));
        c2.notify('initialized', {});
        // Run again, the remove would fail (the file is gone): the first answer is given instead.
        expect(await c2.call('fs/remove', remove)).toMatchObject({ result: {} });
        expect((await c2.call('fs/remove', { ...remove, idempotencyKey: 'rm-2' })).error).toMatchObject({ message: 'No such file or directory (os error 2)' });
      } finally {
        await c2.close();
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'close({ keep: false }) with a state dir stops for good: clients are told "stopped", every tree is killed, no socket or record is left',
    async () => {
      const dir = stateDir();
      const server = await startServer({ port: 0, stateDir: dir, adoptWithinMs: 60_000 });
      const client = await ExecClient.connect(server.url, { clientName: 'restart-keep-stop', recoveryDeadlineMs: 60_000 });
      try {
        let failed!: Promise<Error>;
        const { pid, keeperPid } = await spawnSayingPids(client, (proc) => (failed = new Promise<Error>((resolve) => proc.once('error', resolve))));
        await server.close({ keep: false });
        expect(await failed).toBeInstanceOf(ServerStoppedError);
        await until(() => !alive(pid) && !alive(keeperPid), 10_000, 'gone');
        expect([readdirSync(join(dir, 'k')), readdirSync(join(dir, 'sessions'))]).toEqual([[], []]);
      } finally {
        await client.close().catch(() => {});
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'a keeper whose dump does not fit together is killed; the successor starts anyway and keeps the session and its other processes',
    async () => {
      const dir = stateDir();
      const logs: string[] = [];
      const first = await startServer({ port: 0, stateDir: dir, adoptWithinMs: 60_000 });
      const client = await ExecClient.connect(first.url, { clientName: 'restart-keep-bad-dump', recoveryDeadlineMs: 60_000 });
      try {
        const good = client.spawn(['sh', '-c', 'echo good; while :; do sleep 0.05; done']);
        const goodSaid = new Promise((resolve) => good.stdout.once('data', resolve));
        const { proc: bad, pid, keeperPid } = await spawnSayingPids(client);
        await goodSaid;
        // A mark past what the keeper retains: its dump cannot rebuild the log (tests only reach in like this).
        const session = [...serverInternals(first).sessions.values()][0]!;
        const proc = session.processes.get(bad.id)! as unknown as { child: { kept: { mark(seq: number, stream: 1 | 2, end: number): void } } };
        proc.child.kept.mark(1_000, 1, 1_000_000);
        await first.close();
        const second = await startServer({ port: first.port, stateDir: dir, adoptWithinMs: 60_000, logger: (_level, message) => logs.push(message) });
        try {
          expect(logs.join('\n')).toMatch(/could not be rebuilt \(restore: mark 1000 ends stream 1 at 1000000/);
          await until(() => !alive(pid) && !alive(keeperPid), 10_000, 'gone');
          const restored = serverInternals(second).sessions.get(session.id)!;
          expect([...restored.processes.keys()]).toEqual([good.id]);
        } finally {
          await second.close({ keep: false });
        }
      } finally {
        await client.close().catch(() => {});
      }
    },
    TEST_TIMEOUT_MS,
  );
});
