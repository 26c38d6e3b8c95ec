/**
 * tether-only resume behaviour: a session held by a silently dead socket is freed quickly
 * (liveness probe on -32010), a live one is not stolen, and a session is bound to the
 * credential that created it.
 */
import type { Socket } from 'node:net';
import { once } from 'node:events';
import { describe, expect, it, vi } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { digest } from '../../../src/server/edge/auth.js';
import type { Connection } from '../../../src/server/connection/connection.js';
import { Session } from '../../../src/server/session/session.js';
import { RawClient } from '../../helpers/raw-client.js';
import { tetherAfterEach } from '../../helpers/tether-per-test.js';
import { serverInternals } from '../../../src/server/server.js';

const servers = tetherAfterEach();
const { pool } = servers;

const client = (): Promise<RawClient> => pool.connect(servers.target.url);

describe('resume', () => {
  it('frees a session held by a socket that stopped answering, long before the heartbeat', async () => {
    await servers.start({ livenessProbeMs: 200, pingIntervalMs: 60_000 });
    const a = await client();
    const { sessionId } = await a.handshake();
    // A half-open link: the peer no longer reads anything (no FIN, no pong).
    (a.ws as unknown as { _socket: Socket })._socket.pause();
    const b = await client();
    const first = await b.call('initialize', { clientName: 'b', resumeSessionId: sessionId });
    expect(first.error?.code).toBe(ErrorCode.SessionAttached);
    const detached = new Promise((r) => servers.target.server.once('session-detached', r));
    await detached; // the probe dropped the dead socket
    const second = await b.call('initialize', { clientName: 'b', resumeSessionId: sessionId });
    expect(second.result?.sessionId).toBe(sessionId);
  });

  it('drops a connection that stops answering pings, so its session detaches', async () => {
    const target = await servers.start({ pingIntervalMs: 100 });
    const a = await client();
    const { sessionId } = await a.handshake();
    const detached = new Promise((r) => servers.target.server.on('session-detached', (id: string) => id === sessionId && r(id)));
    (a.ws as unknown as { _socket: Socket })._socket.pause(); // half-open: reads nothing, answers nothing
    await detached;
    expect(serverInternals(target.server).sessions.get(sessionId)?.attached).toBe(false);
  });

  it('keeps a connection that answers pings', async () => {
    const target = await servers.start({ pingIntervalMs: 50 });
    const a = await client();
    const { sessionId } = await a.handshake();
    let pings = 0;
    a.ws.on('ping', () => pings++);
    while (pings < 4) await new Promise((r) => a.ws.once('ping', r));
    expect(serverInternals(target.server).sessions.get(sessionId)?.attached).toBe(true);
  });

  it('does not take a session away from a live connection', async () => {
    const target = await servers.start({ livenessProbeMs: 100 });
    const connections: Connection[] = [];
    serverInternals(target.server).onConnection((conn: Connection) => connections.push(conn));
    const a = await client();
    const { sessionId } = await a.handshake();
    const b = await client();
    // The resume attempt probes the attached socket, and a live one answers the ping. Its
    // deadline runs on fake time, so "long past it nothing is dropped" needs no real wait.
    const [connA] = connections;
    const answered = once(connA!.ws, 'pong');
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    try {
      expect((await b.call('initialize', { clientName: 'b', resumeSessionId: sessionId })).error?.code).toBe(ErrorCode.SessionAttached);
      await answered;
      vi.advanceTimersByTime(60_000);
    } finally {
      vi.useRealTimers();
    }
    expect((await b.call('initialize', { clientName: 'b', resumeSessionId: sessionId })).error?.code).toBe(ErrorCode.SessionAttached);
    expect(await a.request('environment/status', {})).toEqual({ status: 'ready' });
  });

  it('binds a session to the credential that created it', () => {
    const hooks = { expired: () => {}, detached: () => {} };
    const output = { windowBytes: 1024, retentionBytes: 1024, readAheadBytes: 1024, maxChunkBytes: 1024, readCapBytes: 1024 };
    const limits = { ttlMs: 1000, resumeGraceMs: 1000, closedRetentionMs: 1000, output, maxProcesses: 1 };
    const s = new Session('id', digest('alice'), limits, hooks);
    expect(s.ownedBy(digest('alice'))).toBe(true);
    expect(s.ownedBy(digest('mallory'))).toBe(false);
    expect(s.ownedBy(Buffer.alloc(0))).toBe(false);
  });
});
