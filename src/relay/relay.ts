/**
 * `tether relay` in-process: tether's server (sessions, resume, the Codex dialect, limits)
 * with the remote back-end, so every downstream session is served by one upstream session
 * (remote-backend.ts). Downstream it is an exec-server like any other.
 */
import type { Readable, Writable } from 'node:stream';
import { serveStdio, startServerWith, startStdioServer, type TetherServer, type TetherServerOptions } from '../server/index.js';
import { RemoteBackend, type RemoteBackendOptions } from './remote-backend.js';

export interface RelayOptions {
  /** The upstream exec-server (tether or Codex): ws:// or wss:// URL. */
  to: string;
  /** How the upstream sessions connect (token, CA, recovery deadline, keepalive). */
  upstream?: RemoteBackendOptions;
  /** The downstream listener (host, port, token, limits), as for `startServer`. */
  server?: TetherServerOptions;
  /**
   * A downstream session ends, and its upstream session is closed, as soon as its connection
   * does (instead of waiting detached for a resume): for stdio, where stdin's end of file is
   * the client going away and no resume can follow.
   */
  closeOnDetach?: boolean;
}

export interface Relay {
  readonly server: TetherServer;
  readonly backend: RemoteBackend;
  /** The downstream URL (ws://127.0.0.1:PORT). */
  readonly url: string;
  /** Stops listening, ends every downstream session and closes its upstream session. */
  close(): Promise<void>;
}

export async function startRelay(options: RelayOptions): Promise<Relay> {
  const backend = await RemoteBackend.connect(options.to, options.upstream);
  const server = await startServerWith({ host: '127.0.0.1', port: 0, ...options.server }, backend);
  if (options.closeOnDetach) server.on('session-detached', (id) => server.closeSession(id));
  return {
    server,
    backend,
    url: server.url,
    async close() {
      await server.close();
      await backend.close();
    },
  };
}

/**
 * `tether relay --listen stdio`: the relay's server on one connection over `input`/`output`
 * (server/edge/stdio-listener.ts). Resolves once that connection has ended — at the end of
 * `input`, which ends its session at once and so closes its upstream session (its processes
 * killed) before this resolves — or `stop` was called.
 */
export async function relayOnStdio(options: Omit<RelayOptions, 'closeOnDetach'>, input: Readable, output: Writable): Promise<{ stop(): Promise<void>; served: Promise<void> }> {
  const backend = await RemoteBackend.connect(options.to, options.upstream);
  const server = startStdioServer(options.server ?? {}, backend);
  const served = serveStdio(server, input, output).then(async () => {
    await server.close();
    await backend.close();
  });
  return {
    served,
    async stop() {
      await server.close();
      await backend.close();
    },
  };
}
