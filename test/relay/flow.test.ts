/**
 * The relay's memory stays bounded when its downstream client stops reading, in front of an
 * upstream without `acks` (as Codex): the relay's log fills, it stops taking the upstream
 * process's output, and tether's client then stops reading the upstream socket
 * (`outputHighWaterMark`), so the upstream server stops reading its child. Loopback only.
 */
import { EventEmitter } from 'node:events';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { startRelay, type Relay } from '../../src/relay/relay.js';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { RawClient } from '../helpers/raw-client.js';
import { serverInternals } from '../../src/server/server.js';

let upstream: TetherServer;
let relay: Relay;

beforeAll(async () => {
  upstream = await startServer({ port: 0 });
  relay = await startRelay({ to: upstream.url, upstream: { extensions: [] } });
});

afterAll(async () => {
  await relay?.close();
  await upstream?.close();
});

const EventEmitterEmit = EventEmitter.prototype.emit;
const TOTAL = 512 * 1024 * 1024;

describe('relay flow control against an upstream without acks', () => {
  it('a downstream client that stops reading stops the upstream process: its output read stays bounded', async () => {
    const c = await RawClient.connect(relay.url);
    await c.handshake();
    // The downstream socket is not read any more: the relay's send buffer and then its log fill.
    (c.ws as unknown as { _socket: { pause(): void } })._socket.pause();
    // The relay's upstream client pauses its socket ('flow'), or the child ends (nothing held it back).
    let paused = false;
    const emit = vi.spyOn(ExecClient.prototype, 'emit');
    emit.mockImplementation(function (this: ExecClient, name: string | symbol, ...args: unknown[]) {
      if (name === 'flow' && (args[0] as { paused: boolean }).paused) paused = true;
      return EventEmitterEmit.call(this, name, ...args);
    });
    c.ws.send(JSON.stringify({ id: 1, method: 'process/start', params: { processId: 'big', argv: ['head', '-c', String(TOTAL), '/dev/zero'], cwd: pathToFileURL(tmpdir()).href, env: {}, tty: false } }));
    const proc = await vi.waitFor(
      () => {
        const p = [...serverInternals(upstream).sessions.values()].flatMap((s) => [...s.processes.values()]).find((x) => x.id === 'big');
        if (!p) throw new Error('not started upstream yet');
        return p;
      },
      { timeout: 10_000, interval: 5 },
    );
    await vi.waitFor(
      () => {
        if (!paused && proc.bytesRead < TOTAL) throw new Error('still reading');
      },
      { timeout: 30_000, interval: 10 },
    );
    emit.mockRestore();
    expect(paused).toBe(true);
    expect(proc.bytesRead).toBeLessThan(TOTAL / 4);
    c.ws.terminate();
  }, 60_000);
});
