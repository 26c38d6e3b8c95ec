/**
 * What a client is told when a restart could not keep its process (issue #27): the server is
 * killed -9 and, before the successor starts, the process's keeper dies too (as an OOM kill
 * would take it). The successor rebuilds the session without that process; `tether exec`
 * resumes the session and must then fail with a clear message at once — never wait forever
 * for output that cannot come. The dead keeper's socket file is removed by the successor.
 *
 * The successor remembers the recorded process it could not adopt (lost-processes.ts) and
 * names it in the resume's `initialize` answer (`tether.lost`); the client fails it at once.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ExecClient, OutputLostError } from '../../../src/client/index.js';
import { NOT_RECORDED } from '../../../src/server/restart/lost-processes.js';
import { spawnTether } from '../../helpers/cli.js';
import { RpcReplyError } from '../../helpers/raw-client.js';
import { restartablesAfterEach } from '../../helpers/restart-per-test.js';
import { watchOutput, type RestartableServer } from '../../helpers/restart.js';
import { eventually, isLive, keeperPids, keeperSocketFiles } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 45_000;

const KEEPER_GONE = /lost in the server restart \(its keeper was gone\)/;
const PRODUCER = ['sh', '-c', 'i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.05; done'];

const restartables = restartablesAfterEach();

/** The server killed -9, then its one keeper, then a successor started on the same port and state dir. */
async function loseKeeperAcrossRestart(server: RestartableServer): Promise<void> {
  await server.stop('SIGKILL');
  const keepers = keeperPids(server.stateDir);
  expect(keepers.length).toBe(1);
  for (const pid of keepers) process.kill(pid, 'SIGKILL');
  expect(await eventually(() => keepers.every((pid) => !isLive(pid)), 5_000)).toBe(true);
  await server.successor();
}

/** A restartable server, a raw session (acks) on it, and the producer started there as `p1`. */
async function startedOnRaw(): Promise<{ server: RestartableServer; sessionId: string }> {
  const server = await restartables.start('self');
  const raw = await restartables.pool.connect(server.url);
  const init = await raw.request('initialize', { clientName: 'lost-test', tether: { version: 1, extensions: ['acks'] } });
  raw.notify('initialized', {});
  const sessionId = init.sessionId as string;
  await raw.request('process/start', { processId: 'p1', argv: PRODUCER, cwd: 'file:///tmp', env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false });
  return { server, sessionId };
}

/** `initialize` resuming `sessionId` with `acks`, naming `delivered`; retried while the previous connection is still attached (-32010). */
async function resumeRaw(url: string, sessionId: string, delivered: Record<string, number>): Promise<{ tether?: { lost?: Record<string, string> } }> {
  for (let attempt = 0; ; attempt++) {
    const raw = await restartables.pool.connect(url);
    try {
      const result = await raw.request('initialize', { clientName: 'lost-test', resumeSessionId: sessionId, tether: { version: 1, extensions: ['acks'], delivered } });
      await raw.close();
      return result;
    } catch (err) {
      await raw.drop();
      if (!(err instanceof RpcReplyError) || err.code !== -32010 || attempt >= 20) throw err;
    }
  }
}

describe('a process whose keeper died while no server ran', () => {
  it(
    'tether exec resumes the session, is told the process is lost, and exits 255 without waiting',
    async () => {
      const server = await restartables.start('self');
      const marker = `lost-${randomUUID()}`;
      const cli = spawnTether(['exec', '--url', server.url, '--recovery-deadline', '120s', 'sh', '-c', 'i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.05; done', marker], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const out = watchOutput(cli);
      await out.waitStdout('line 3\n');
      await loseKeeperAcrossRestart(server);
      const { code } = await out.closedWithin(10_000, () => `server: ${server.current.stderr().slice(-1500)}`);
      expect(code, out.stderr()).toBe(255);
      expect(out.stderr()).toMatch(/lost|killed|gone/i);
      // The dead keeper's socket (nobody listens: ECONNREFUSED) is not left behind.
      expect(keeperSocketFiles(server.stateDir)).toEqual([]);
    },
    TEST_TIMEOUT_MS,
  );

  it('an ExecClient process fails at once with the reason (OutputLostError, its error event too), not hanging', async () => {
    const server = await restartables.start('self');
    const client = await ExecClient.connect(server.url, { recoveryDeadlineMs: 60_000 });
    try {
      const proc = client.spawn(PRODUCER);
      const errors: Error[] = [];
      proc.on('error', (err) => errors.push(err));
      let text = '';
      const third = new Promise<void>((resolve) =>
        proc.stdout!.on('data', (d: Buffer) => {
          text += d.toString();
          if (text.includes('line 3\n')) resolve();
        }),
      );
      await third;
      await loseKeeperAcrossRestart(server);
      const failure = await proc.closed.then(
        () => new Error('closed normally'),
        (err: unknown) => err as Error,
      );
      expect(failure).toBeInstanceOf(OutputLostError);
      expect(failure.message).toMatch(KEEPER_GONE);
      expect(errors).toEqual([failure]);
      await expect(proc.exited).rejects.toBe(failure);
    } finally {
      await client.close();
    }
  }, TEST_TIMEOUT_MS);

  it('the resume answer names only the lost processes the client names, and a second restart still knows them', async () => {
    const { server, sessionId } = await startedOnRaw();
    // Its record lists it (written soon after the start) before the server dies.
    const recordPath = join(server.stateDir, 'sessions', `${sessionId}.json`);
    const listed = () => existsSync(recordPath) && (JSON.parse(readFileSync(recordPath, 'utf8')) as { processes: Array<{ processId: string }> }).processes.some((p) => p.processId === 'p1');
    expect(await eventually(listed, 5_000)).toBe(true);
    await loseKeeperAcrossRestart(server);
    // Not named (the client forgot it): nothing is said. Named: it is lost; an id the restored
    // session never heard of is lost too (its start was not recorded), for the client to judge.
    expect((await resumeRaw(server.url, sessionId, {})).tether?.lost).toBeUndefined();
    expect((await resumeRaw(server.url, sessionId, { p1: 2, other: 0 })).tether?.lost).toEqual({ p1: expect.stringMatching(KEEPER_GONE), other: NOT_RECORDED });
    // The successor's record keeps it: a server after it tells the client too.
    const recorded = () => (JSON.parse(readFileSync(recordPath, 'utf8')) as { lost?: Record<string, string> }).lost?.p1 !== undefined;
    expect(await eventually(recorded, 5_000)).toBe(true);
    await server.stop('SIGKILL');
    await server.successor();
    expect((await resumeRaw(server.url, sessionId, { p1: 2 })).tether?.lost).toEqual({ p1: expect.stringMatching(KEEPER_GONE) });
  }, TEST_TIMEOUT_MS);

  it('a process started just before a crash, whose record write had not landed and whose keeper died too, is named lost as well (not waited for)', async () => {
    const { server, sessionId } = await startedOnRaw();
    const recordPath = join(server.stateDir, 'sessions', `${sessionId}.json`);
    type Rec = { processes: Array<{ processId: string }> };
    expect(await eventually(() => existsSync(recordPath) && (JSON.parse(readFileSync(recordPath, 'utf8')) as Rec).processes.length === 1, 5_000)).toBe(true);
    await server.stop('SIGKILL');
    // As if the crash came before the record write: the record does not list it.
    const record = JSON.parse(readFileSync(recordPath, 'utf8')) as Rec;
    writeFileSync(recordPath, JSON.stringify({ ...record, processes: [] }), { mode: 0o600 });
    const keepers = keeperPids(server.stateDir);
    for (const pid of keepers) process.kill(pid, 'SIGKILL');
    expect(await eventually(() => keepers.every((pid) => !isLive(pid)), 5_000)).toBe(true);
    await server.successor();
    expect((await resumeRaw(server.url, sessionId, { p1: 4 })).tether?.lost).toEqual({ p1: NOT_RECORDED });
  }, TEST_TIMEOUT_MS);
});
