/**
 * Detach, attach and watch end to end (docs/attach.md), with real processes, the server run
 * as root and as uid 65534:
 * - `tether exec --detach --name build` prints its one line and exits 0 at once; a
 *   `tether attach build` killed -9 midway (after lines arrived: by event) and a second one:
 *   every line once and in order across the two, but for what the first had printed and not
 *   yet acknowledged (acks follow the local write, batched within 20 ms): the first printed
 *   exactly 1..k, the second exactly j+1..300 with j ≤ k, and exits 7; a watcher with
 *   --from-start prints all 300 and exits 7.
 * - the client that started a process is killed -9: the process runs to its end with nobody
 *   attached (its own exit status, never killed, never left paused), and
 *   `tether attach --from-start` picks it up: every line, its exit status.
 * - three watchers and one writer on `cat`: a line the writer types reaches all four; a
 *   watcher's write is refused with a clear error (the library's handle, and the server to a
 *   raw request); `--take` moves the writer and the old one is told, and watches on.
 * - `tether exec --name` whose session is taken says so, stops sending its input, and
 *   watches on to the exit.
 * - a watcher of a session whose writer (the library, as a coding agent running one short
 *   command after another) starts processes after the watcher attached: each one is a
 *   'process' event and a handle in `processes()` (the `sinks` callback asked for it) that
 *   gives exactly the lines it printed and its exit code.
 */
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ExecClient, type ExecProcess } from '../../src/client/index.js';
import { spawnAttach, type Attached } from '../helpers/attach-process.js';
import { cleanupsAfterEach } from '../helpers/cleanups.js';
import { runTether, spawnTether } from '../helpers/cli.js';
import { eventually, processesWithMarker, serverUsers, startServerProcess, type ServerProcess } from '../helpers/server-process.js';

const cleanups = cleanupsAfterEach();
const attach = (args: string[], stdin: 'pipe' | 'ignore' = 'pipe'): Attached => spawnAttach(cleanups, args, stdin);

const lines = (text: string): number[] => text.split('\n').filter(Boolean).map(Number);
const range = (from: number, to: number): number[] => Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);

/** Resolves once the server lists session `name` with no writer attached (after a kill -9, the server saw the drop). */
async function untilDetached(server: ServerProcess, name: string): Promise<void> {
  const client = await ExecClient.connect(server.url, { clientName: 'test-ps' });
  try {
    for (let i = 0; i < 500; i++) {
      const { sessions } = await client.listSessions();
      const s = sessions.find((x) => (x as { name?: string }).name === name);
      if (s && !s.attached) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`session ${name} still has a writer attached`);
  } finally {
    await client.close();
  }
}

describe.each(serverUsers())('detach, attach and watch (server runs as %s)', (user) => {
  it('a detached job: an attach killed -9 midway and the next one print every line once and in order (but what was unacknowledged), a --from-start watcher all 300; exit 7', async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const started = await runTether(['exec', '--url', server.url, '--detach', '--name', 'build', '--', 'sh', '-c', 'for i in $(seq 1 300); do echo $i; sleep 0.01; done; exit 7']);
    expect(started.code, started.stderr).toBe(0);
    expect(started.stdout).toMatch(/^session=[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} name=build process=[0-9a-f-]{36}\n$/);

    const first = attach(['--url', server.url, 'build']);
    await first.until((out) => lines(out).length >= 30);
    first.child.kill('SIGKILL');
    await first.closed;
    const printed = lines(first.stdout());
    // The first printed an exact prefix: 1..k.
    expect(printed).toEqual(range(1, printed.length));
    await untilDetached(server, 'build');

    // A watcher alongside the second writer: the writer, done, leaves the session to it
    // (it ends a session only when nobody watches), so the watcher gets the end too.
    const watcher = attach(['--url', server.url, '--watch', '--from-start', 'build'], 'ignore');
    await server.waitForLog(/audit attach: role=watcher .*name=build/);
    const second = attach(['--url', server.url, 'build']);
    expect(await second.closed, second.stderr()).toBe(7);
    const rest = lines(second.stdout());
    // The second takes up after what the first acknowledged: j+1..300, j ≤ k. The overlap
    // j+1..k is what the first printed but had not acknowledged when it was killed.
    const j = rest[0]! - 1;
    expect(j).toBeGreaterThanOrEqual(0);
    expect(j).toBeLessThanOrEqual(printed.length);
    expect(rest).toEqual(range(j + 1, 300));
    expect(second.stderr()).toBe('');

    expect(await watcher.closed, watcher.stderr()).toBe(7);
    expect(lines(watcher.stdout()), watcher.stderr()).toEqual(range(1, 300));
  }, 120_000);

  it('the client that started a process is killed -9: the process runs to its end unattached, and tether attach --from-start picks it up', async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const marker = `attach-${randomBytes(6).toString('hex')}`;
    const starter = spawnTether(['exec', '--url', server.url, '--name', 'job', '--keep', '10m', 'sh', '-c', 'for i in $(seq 1 200); do echo $i; sleep 0.005; done; exit 3', marker], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    cleanups.push(() => void starter.kill('SIGKILL'));
    let out = '';
    let starterErr = '';
    starter.stderr!.on('data', (d: Buffer) => (starterErr += d.toString()));
    const firstLine = new Promise<void>((resolve, reject) => {
      starter.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        resolve();
      });
      starter.once('close', (code) => reject(new Error(`tether exec ended (${code}) before any output: ${starterErr}`)));
    });
    await firstLine;
    starter.kill('SIGKILL');
    // Never killed and never left paused: it finishes while nobody is attached.
    const finished = await eventually(() => processesWithMarker(marker, 'sh').length === 0, 60_000, 50);
    expect(finished, server.stderr().slice(-1500)).toBe(true);
    expect(lines(out)).toEqual(range(1, lines(out).length));

    const taker = attach(['--url', server.url, '--from-start', 'job'], 'ignore');
    expect(await taker.closed, taker.stderr()).toBe(3);
    expect(lines(taker.stdout())).toEqual(range(1, 200));
  }, 120_000);

  it('three watchers and one writer on cat: the writer\'s line reaches all four, a watcher cannot write, --take moves the writer and tells the old one', async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const started = await runTether(['exec', '--url', server.url, '--detach', '--name', 'cat', '--', 'cat']);
    expect(started.code, started.stderr).toBe(0);

    const writer = attach(['--url', server.url, 'cat']);
    await server.waitForLog(/audit attach: role=writer .*name=cat/);
    const watchers = [0, 1, 2].map(() => attach(['--url', server.url, '--watch', 'cat'], 'ignore'));
    const attachedWatchers = () => server.stderr().split('\n').filter((l) => /audit attach: role=watcher .*name=cat/.test(l)).length;
    expect(await eventually(() => attachedWatchers() === 3, 30_000, 20), server.stderr().slice(-1500)).toBe(true);

    // A second writer without --take is refused, clearly, and changes nothing.
    const refused = await runTether(['attach', '--url', server.url, 'cat'], { input: 'never\n' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/session cat has a writer attached: attach with take to move it, or as a watcher/);

    writer.child.stdin!.write('hello from the writer\n');
    for (const a of [writer, ...watchers]) await a.until((o) => o.includes('hello from the writer\n'));

    // A watcher's handle cannot write, signal or resize: it throws, naming why; the server refuses a raw write too.
    const looker = await ExecClient.attach(server.url, 'cat', { role: 'watcher' });
    cleanups.push(() => looker.close());
    const [cat] = looker.processes();
    expect(looker.role).toBe('watcher');
    expect(() => cat!.stdin!.write('x\n')).toThrow(/is watched read-only \(attached to session cat as a watcher\): attach as the writer \(take\) to write to its stdin/);
    expect(() => cat!.kill('SIGINT')).toThrow(/read-only/);
    await expect(looker.request('process/write', { processId: cat!.id, chunk: Buffer.from('x\n').toString('base64') })).rejects.toThrow(
      /this connection watches session cat read-only: attach as the writer \(take\) to write to a process/,
    );

    // --take: the old writer is told, and watches on.
    const taker = attach(['--url', server.url, '--take', 'cat']);
    await writer.until((e) => e.includes('the writer was taken by another attachment; watching'), 'stderr');
    await server.waitForLog(/audit attach: writer of session .* taken/);
    taker.child.stdin!.write('second line\n');
    for (const a of [writer, taker, ...watchers]) await a.until((o) => o.includes('second line\n'));
    // The old writer no longer writes: what it types goes nowhere (only the taker's lines came).
    writer.child.stdin!.write('ignored\n');
    taker.child.stdin!.end(); // cat ends: everyone exits with its status
    for (const a of [taker, writer, ...watchers]) expect(await a.closed, a.stderr()).toBe(0);
    for (const a of [writer, ...watchers]) expect(a.stdout()).toBe('hello from the writer\nsecond line\n');
    // The taker takes up after what the old writer acknowledged: its first line too only if
    // that ack (sent within 20 ms of the local write) had not reached the server yet.
    expect(['second line\n', 'hello from the writer\nsecond line\n']).toContain(taker.stdout());
  }, 120_000);

  it('a session of two processes: following one leaves the other\'s output untaken, for its own attach', async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const owner = await ExecClient.connect(server.url, { name: 'pair' });
    const never = () => new Writable({ write: () => {} });
    const a = owner.spawn(['sh', '-c', 'echo a1; echo a2; exit 1'], { stdout: never(), stderr: never() });
    const b = owner.spawn(['sh', '-c', 'for i in 1 2 3; do echo b$i; done; exit 2'], { stdout: never(), stderr: never() });
    await Promise.all([a.exited, b.exited]);
    await owner.detach();

    const several = await runTether(['attach', '--url', server.url, 'pair'], { input: '' });
    expect(several.code).toBe(1);
    expect(several.stderr).toMatch(/the session has 2 processes: choose one with --process/);
    const first = await runTether(['attach', '--url', server.url, '--process', a.id, 'pair'], { input: '' });
    expect(first.code, first.stderr).toBe(1);
    expect(first.stdout).toBe('a1\na2\n');
    // The session stays (another process of it was never taken), and b's output is all there.
    const second = await runTether(['attach', '--url', server.url, '--process', b.id.slice(0, 8), 'pair'], { input: '' });
    expect(second.code, second.stderr).toBe(2);
    expect(second.stdout).toBe('b1\nb2\nb3\n');
  }, 120_000);
  it("a watcher is told of each process the writer starts after it attached ('process'), and its handle gives exactly its output and exit code", async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const writer = await ExecClient.connect(server.url, { name: 'agent' });
    cleanups.push(() => writer.close());
    const sinkOut = new Map<string, string>();
    const asked: string[] = [];
    const alls: string[][] = [];
    const watcher = await ExecClient.attach(server.url, 'agent', {
      role: 'watcher',
      sinks: (p, all) => {
        asked.push(p.processId);
        alls.push(all.map((q) => q.processId));
        // The second command's stderr goes to a sink; everything else stays on the handle's streams.
        if (!p.argv.includes('second')) return undefined;
        return { stderr: new Writable({ write: (chunk: Buffer, _e, cb) => (sinkOut.set(p.processId, (sinkOut.get(p.processId) ?? '') + chunk.toString()), cb()) }) };
      },
    });
    cleanups.push(() => watcher.close());
    expect(watcher.processes()).toEqual([]);
    const found: ExecProcess[] = [];
    const seen = new Map<string, () => string>();
    const foundOne = () => new Promise<ExecProcess>((resolve) => watcher.once('process', resolve));
    const refusals: string[] = [];
    watcher.on('process', (proc) => {
      found.push(proc);
      try {
        proc.kill('SIGINT'); // a watcher's handle only reads
      } catch (err) {
        refusals.push((err as Error).message);
      }
      let text = '';
      proc.stdout.on('data', (d: Buffer) => (text += d.toString()));
      seen.set(proc.id, () => text);
    });

    // One short command after another, as a coding agent runs them.
    let next = foundOne();
    const first = writer.spawn(['sh', '-c', 'echo first one; echo first two; exit 3']);
    expect(await first.exited).toBe(3);
    const a = await next;
    expect(a.id).toBe(first.id);
    expect(a.argv).toEqual(first.argv);
    expect(await a.exited).toBe(3);
    await a.closed;
    expect(seen.get(a.id)!()).toBe('first one\nfirst two\n');

    next = foundOne();
    const second = writer.spawn(['sh', '-c', 'echo second out; echo second err >&2; exit 5', 'second']);
    const b = await next;
    expect(b.id).toBe(second.id);
    expect(await b.exited).toBe(5);
    await b.closed;
    expect(seen.get(b.id)!()).toBe('second out\n');
    expect(sinkOut.get(b.id)).toBe('second err\n');

    expect(asked).toEqual([first.id, second.id]);
    expect(alls).toEqual([[], []]); // `all`: the session's processes as it attached, every time
    expect(found.map((p) => p.id)).toEqual([first.id, second.id]);
    expect(refusals).toEqual([first.id, second.id].map((id) => expect.stringMatching(new RegExp(`process ${id} is watched read-only`))));
    expect(watcher.processes().map((p) => p.id)).toEqual([first.id, second.id]);
    await watcher.close();
    await writer.close();
  }, 60_000);

  it('tether exec whose session is taken (tether attach --take) says so, stops sending its input, and watches on to the exit', async () => {
    const server = await startServerProcess({ user });
    cleanups.push(() => server.dispose());
    const exec = spawnTether(['exec', '--url', server.url, '--name', 'ex', '--', 'cat'], { stdio: ['pipe', 'pipe', 'pipe'] });
    cleanups.push(() => {
      if (exec.exitCode === null && exec.signalCode === null) exec.kill('SIGKILL');
    });
    let out = '';
    let err = '';
    const seen = (test: () => boolean) =>
      new Promise<void>((resolve) => {
        const check = () => test() && resolve();
        exec.stdout!.on('data', check);
        exec.stderr!.on('data', check);
        check();
      });
    exec.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    exec.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const execClosed = new Promise<number | null>((resolve) => exec.once('close', (code) => resolve(code)));
    exec.stdin!.write('one\n');
    await seen(() => out === 'one\n');
    const taker = attach(['--url', server.url, '--take', 'ex']);
    await seen(() => err.includes('taken by another attachment'));
    // Its input no longer reaches cat: only the taker's does.
    exec.stdin!.write('two\n');
    taker.child.stdin!.write('three\n');
    await taker.until((o) => o.includes('three\n'));
    await seen(() => out.includes('three\n'));
    expect(taker.stdout()).not.toContain('two');
    expect(out).toBe('one\nthree\n');
    taker.child.stdin!.end();
    expect(await taker.closed, taker.stderr()).toBe(0);
    expect(await execClosed, err).toBe(0);
  }, 60_000);
});
