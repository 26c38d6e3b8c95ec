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
import type { Readable, Writable } from 'node:stream';
import type WebSocket from 'ws';
import { formatExactBytes } from '../../util/format.js';
import type { Connection } from '../connection/index.js';
import type { Session } from '../session/index.js';
import { StdioSocket } from './stdio-socket.js';

/** How long the end of a stdio connection waits for its processes' trees to be gone. */
const KILL_WAIT_MS = 2_000;

/**
 * The server a stdio link is served by (a TetherServer, started by `startStdioServer` in
 * server-start.ts): the largest message it accepts, and how it takes a link that is not a
 * WebSocket upgrade.
 */
export interface StdioHost {
  readonly maxMessageBytes: number;
  /** Serves `socket` (the part of a `ws` WebSocket a Connection uses) as one connection from `remote`. */
  adopt(socket: WebSocket, remote: string): Connection;
}

/**
 * Serves one connection over `input`/`output` (a process's stdin and stdout) with `server`
 * (one that listens on no port: `startStdioServer`),
 * and resolves once it has ended: at the end of `input` (EOF), an error on either stream,
 * or the server closing it (`session/close`, `server.close()`). The session it was attached
 * to then expires at once, its processes killed (awaited, bounded); `server` itself stays
 * open (the caller closes it). Only protocol lines are written to `output`.
 */
export async function serveStdio(server: StdioHost, input: Readable, output: Writable): Promise<void> {
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
