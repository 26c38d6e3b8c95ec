/**
 * A state dir or keeper socket of another user is never adopted, a keeper never accepts a
 * stranger, and a restored session belongs to the token that created it (issue #27,
 * "Security"). The cross-user cases need root (to run a server as nobody and as root on the
 * same machine); the mode check and the owner check run as anyone.
 */
import { chmodSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RawClient } from '../../helpers/raw-client.js';
import { startRestartableServer, type RestartableServer } from '../../helpers/restart.js';
import {
  disposeStateDir,
  eventually,
  isLive,
  freePort,
  keeperPids,
  keeperSocketFiles,
  makeStateDir,
  processesWithMarker,
  serverUsers,
  startServerProcess,
  type ServerProcess,
  type ServerUser,
} from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 30_000;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const CROSS_USER = serverUsers().includes('nobody');

let servers: ServerProcess[] = [];
let clients: RawClient[] = [];
let stateDirs: string[] = [];
let dirs: string[] = [];
let restartables: RestartableServer[] = [];
afterEach(async () => {
  for (const r of restartables.splice(0)) await r.dispose();
  for (const c of clients.splice(0)) await c.drop().catch(() => {});
  for (const s of servers.splice(0)) await s.dispose();
  for (const d of stateDirs.splice(0)) await disposeStateDir(d);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function serve(user: ServerUser, stateDir: string, port?: number): Promise<ServerProcess> {
  const server = await startServerProcess({ user, stateDir, port, args: ['--adopt-within', '20s'] });
  servers.push(server);
  return server;
}

/** A server's start that must fail: its stderr (the test fails if it printed a URL). */
async function refusedStart(user: ServerUser, stateDir: string): Promise<string> {
  try {
    const server = await serve(user, stateDir);
    throw new Error(`the server started (${server.url}) on ${stateDir}`);
  } catch (error) {
    const message = (error as Error).message;
    if (!message.includes('before printing its URL')) throw error;
    return message;
  }
}

/**
 * A nobody server on its own state dir runs `sleep <marker>` in a session, then is killed -9:
 * its keeper waits for an adopter. Returns what a test needs to find them again.
 */
async function orphanedKeeperOfNobody(): Promise<{ stateDir: string; port: number; sessionId: string; marker: string; keepers: number[] }> {
  const stateDir = makeStateDir('nobody');
  stateDirs.push(stateDir);
  const port = await freePort();
  const server = await serve('nobody', stateDir, port);
  const client = await RawClient.connect(server.url);
  clients.push(client);
  const { sessionId } = await client.handshake('security-test');
  const marker = `${4000 + Math.floor(Math.random() * 1000)}.${Date.now() % 1_000_000}`;
  await client.request('process/start', { processId: 'p', argv: ['sh', '-c', `echo ready; exec sleep ${marker}`], cwd: 'file:///tmp', env: ENV, tty: false });
  await client.waitFor((f) => f.method === 'process/output' && f.params?.processId === 'p', 10_000, true);
  expect(await eventually(() => processesWithMarker(marker, 'sleep').length === 1, 5_000)).toBe(true);
  server.child.kill('SIGKILL');
  await server.exited;
  await client.drop();
  const keepers = keeperPids(stateDir);
  expect(keepers.length, 'the keeper waits for an adopter').toBe(1);
  return { stateDir, port, sessionId, marker, keepers };
}


describe('state dir checks', () => {
  it(
    'a state dir open to group or others is refused with the fix named',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tether-st-'));
      dirs.push(dir);
      chmodSync(dir, 0o755);
      const message = await refusedStart('self', dir);
      expect(message).toContain(dir);
      expect(message).toMatch(/chmod 700/);
    },
    TEST_TIMEOUT_MS,
  );
});

describe.skipIf(!CROSS_USER)('state dirs and keepers of another user (root and nobody)', () => {
  it(
    "a root server pointed at nobody's state dir refuses to start, and adopts or kills nothing there",
    async () => {
      const orphan = await orphanedKeeperOfNobody();
      const message = await refusedStart('self', orphan.stateDir);
      expect(message).toContain(orphan.stateDir);
      expect(message).toMatch(/owned by uid 65534/);
      // Nothing touched: the keeper and its command live, the socket is there…
      expect(orphan.keepers.filter(isLive)).toEqual(orphan.keepers);
      expect(processesWithMarker(orphan.marker, 'sleep').length).toBe(1);
      expect(keeperSocketFiles(orphan.stateDir).length).toBe(1);
      // …and its rightful successor (nobody, same state dir) adopts it and resumes the session.
      const successor = await serve('nobody', orphan.stateDir, orphan.port);
      const client = await RawClient.connect(successor.url);
      clients.push(client);
      expect((await client.handshake('security-test', orphan.sessionId)).sessionId).toBe(orphan.sessionId);
      const read = await client.request('process/read', { processId: 'p', afterSeq: 0 });
      expect(Buffer.from(read.chunks[0].chunk, 'base64').toString()).toBe('ready\n');
      expect(read.exited).toBe(false);
      expect(await client.request('process/terminate', { processId: 'p' })).toEqual({ running: true });
      expect(await eventually(() => processesWithMarker(orphan.marker, 'sleep').length === 0, 5_000)).toBe(true);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    "a keeper closes a stranger's connection at once (root connecting to nobody's keeper)",
    async () => {
      const orphan = await orphanedKeeperOfNobody();
      const socketPath = join(orphan.stateDir, 'k', keeperSocketFiles(orphan.stateDir)[0]!);
      const conn = createConnection(socketPath);
      let received = 0;
      conn.on('data', (d: Buffer) => (received += d.length));
      conn.on('error', () => {});
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('the keeper kept a stranger connected for 5 s')), 5_000);
        conn.once('close', () => {
          clearTimeout(timer);
          resolve();
        });
      });
      expect(received, 'bytes (fds, dump) sent to a stranger').toBe(0);
      expect(orphan.keepers.filter(isLive)).toEqual(orphan.keepers);
      expect(processesWithMarker(orphan.marker, 'sleep').length).toBe(1);
      // Still waiting for its own server: nobody's successor adopts it.
      const successor = await serve('nobody', orphan.stateDir, orphan.port);
      const client = await RawClient.connect(successor.url);
      clients.push(client);
      expect((await client.handshake('security-test', orphan.sessionId)).sessionId).toBe(orphan.sessionId);
      expect(await client.request('process/terminate', { processId: 'p' })).toEqual({ running: true });
    },
    TEST_TIMEOUT_MS,
  );

  it(
    "a keeper socket of another user planted in our state dir is not adopted, and its keeper is not told to kill",
    async () => {
      const orphan = await orphanedKeeperOfNobody();
      const name = keeperSocketFiles(orphan.stateDir)[0]!;
      const ours = makeStateDir('self');
      stateDirs.push(ours);
      const server = await serve('self', ours); // creates ours/k
      server.child.kill('SIGKILL');
      await server.exited;
      renameSync(join(orphan.stateDir, 'k', name), join(ours, 'k', basename(name)));
      const root = await serve('self', ours);
      // Adoption is done once it listens, or once /readyz no longer says "adopting".
      expect(await readyStatus(root.url), '/readyz once adoption is done').toBe(200);
      expect(orphan.keepers.filter(isLive), "nobody's keeper").toEqual(orphan.keepers);
      expect(processesWithMarker(orphan.marker, 'sleep').length, "nobody's command").toBe(1);
    },
    TEST_TIMEOUT_MS,
  );
});

/** /readyz's status once it no longer says 503 "adopting" (bounded poll). */
async function readyStatus(wsUrl: string): Promise<number> {
  const url = wsUrl.replace(/^ws/, 'http') + '/readyz';
  let status = 0;
  const deadline = Date.now() + 10_000;
  for (;;) {
    status = (await fetch(url)).status;
    if (status !== 503 || Date.now() > deadline) return status;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe.each(serverUsers())('owners across a restart (server runs as %s)', (user) => {
  it(
    "a restored session is resumed by its own token only, never by another token's client",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'tether-tokens-'));
      dirs.push(dir);
      const tokenFile = join(dir, 'tokens');
      writeFileSync(tokenFile, 'owner-token-a\nother-token-b\n', { mode: 0o644 });
      chmodSync(dir, 0o755);
      const server = await startRestartableServer(user, ['--token-file', tokenFile]);
      restartables.push(server);
      const owner = await RawClient.connect(server.url, { token: 'owner-token-a' });
      clients.push(owner);
      const { sessionId } = await owner.handshake('owner');
      await owner.request('process/start', { processId: 'p', argv: ['sh', '-c', 'echo ready; read line; echo "got $line"'], cwd: 'file:///tmp', env: ENV, tty: false, pipeStdin: true });
      await owner.waitFor((f) => f.method === 'process/output' && f.params?.processId === 'p', 10_000, true);
      await server.stop('SIGKILL');
      await server.successor();

      const stranger = await RawClient.connect(server.url, { token: 'other-token-b' });
      clients.push(stranger);
      const refused = await stranger.call('initialize', { clientName: 'stranger', resumeSessionId: sessionId });
      expect(refused.error, 'another token resumes the session').toBeDefined();

      const back = await RawClient.connect(server.url, { token: 'owner-token-a' });
      clients.push(back);
      expect((await back.handshake('owner', sessionId)).sessionId).toBe(sessionId);
      expect(await back.request('process/write', { processId: 'p', chunk: Buffer.from('x\n').toString('base64'), writeId: 'w1' })).toEqual({ status: 'accepted' });
      await back.waitClosed('p');
      const read = await back.request('process/read', { processId: 'p', afterSeq: 0 });
      const text = read.chunks.map((c: { chunk: string }) => Buffer.from(c.chunk, 'base64').toString()).join('');
      expect(text).toBe('ready\ngot x\n');
    },
    TEST_TIMEOUT_MS,
  );
});
