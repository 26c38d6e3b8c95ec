/**
 * An exec-server on stdio: `tether serve --listen stdio` (as Codex 0.171's `exec-server
 * --listen stdio`), and the relay's `--listen stdio`. One connection over this process's
 * stdin and stdout (stdio-socket.ts), served by a TetherServer exactly as a WebSocket would
 * be: the same methods, dialect, sessions and limits. No token: whoever holds the pipe
 * started this process. No binary frames (the binaryOutput extension is refused).
 *
 * The end of the input ends the connection and its session at once: its processes are
 * killed, nothing is kept for a resume (nobody can come back over a pipe that is gone).
 * The wire, checked against Codex 0.171.0: nothing is sent before the client's first
 * request; one JSON message per line; an empty line is ignored; a bad line gets one error
 * reply and the connection carries on; logs go to stderr, never to stdout.
 */
import { createServer } from 'node:http';
import type { Readable, Writable } from 'node:stream';
import type WebSocket from 'ws';
import { formatExactBytes } from '../../util/format.js';
import type { ServerBackend } from '../backend/backend.js';
import { localBackend } from '../local/local-backend.js';
import type { TetherServerOptions } from '../options.js';
import { TetherServer } from '../server.js';
import { checkDurations } from '../server-start.js';
import type { Session } from '../session/session.js';
import { StdioSocket } from './stdio-socket.js';

/** How long the end of a stdio connection waits for its processes' trees to be gone. */
const KILL_WAIT_MS = 2_000;

/**
 * A TetherServer that listens on no port, for `serveStdio` (its `url` means nothing; its
 * `close()` kills what is left). `backend`: where the work is done (backend.ts), as for
 * `startServerWith`: the local one, or the relay's remote one.
 */
export function startStdioServer(opts: TetherServerOptions = {}, backend: ServerBackend = localBackend): TetherServer {
  backend.prepare();
  checkDurations(opts, 'startStdioServer');
  return new TetherServer(createServer(), opts, 'stdio', backend);
}

/**
 * Serves one connection over `input`/`output` (a process's stdin and stdout) with `server`,
 * and resolves once it has ended: at the end of `input` (EOF), an error on either stream,
 * or the server closing it (`session/close`, `server.close()`). The session it was attached
 * to then expires at once, its processes killed (awaited, bounded); `server` itself stays
 * open (the caller closes it). Only protocol lines are written to `output`.
 */
export async function serveStdio(server: TetherServer, input: Readable, output: Writable): Promise<void> {
  const maxMessageBytes = server.maxMessageBytes;
  const socket = new StdioSocket(input, output, maxMessageBytes);
  let session: Session | null = null;
  const closed = new Promise<void>((resolve) => {
    // Before the server's own listener detaches the session from the connection.
    socket.prependListener('close', () => {
      session = conn.session;
      resolve();
    });
  });
  const conn = server.adopt(socket as unknown as WebSocket, 'stdio');
  socket.on('oversized', (bytes) =>
    conn.send({
      id: null,
      error: { code: -32600, message: `message of ${formatExactBytes(bytes)} or more exceeds the server's ${formatExactBytes(maxMessageBytes)} limit (max payload); skipped` },
    }),
  );
  input.resume();
  await closed;
  const ended = session as Session | null;
  if (ended) {
    ended.expire();
    await ended.waitAllClosed(KILL_WAIT_MS);
  }
}
