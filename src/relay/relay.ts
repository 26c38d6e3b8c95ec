/**
 * `tether relay` in-process: tether's server (sessions, resume, the Codex dialect, limits)
 * with the remote back-end, so every downstream session is served by one upstream session
 * (remote-backend.ts). Downstream it is an exec-server like any other.
 */
import type { TetherServer, TetherServerOptions } from '../server/index.js';
import { startServerWith } from '../server/server.js';
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
  if (options.closeOnDetach) server.on('session-detached', (id) => server.sessions.get(id)?.close());
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
