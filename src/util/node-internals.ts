/**
 * Every place tether goes around Node's public API, in one module. Node offers
 * no public way to the file descriptor under a `net.Server`/`http.Server` or a `net.Socket`,
 * and `tether serve --replace` (server/restart/handover.ts) must pass both over SCM_RIGHTS: the
 * listening socket to hand over, and the admin connection to send it on. Call sites use only
 * these functions; test/util/node-internals-contract.test.ts checks each assumption below on the
 * running Node and fails with "Node vX changed ..." when one no longer holds.
 *
 * Checked against Node 20, 22 and 24 (lib/net.js):
 * 1. `listeningFd`: a listening `net.Server` (an `http.Server` is one) keeps its libuv handle,
 *    a `TCP` or `Pipe` wrap, in the private `_handle` field (null once closed); on Unix the
 *    wrap has an `fd` getter giving the listening socket's descriptor (-1 if none).
 * 2. `socketFd`: a connected `net.Socket` keeps its wrap in `_handle` as well (null once
 *    destroyed), with the same `fd` getter.
 */
import type { Server, Socket } from 'node:net';

/** What both rely on: a private `_handle` whose `fd` is the descriptor. */
type WithHandle = { _handle?: { fd?: unknown } | null };

function handleFd(owner: object): number | null {
  const fd = (owner as WithHandle)._handle?.fd;
  return typeof fd === 'number' && fd >= 0 ? fd : null;
}

/** The descriptor a listening server accepts on (net.Server or http(s).Server), or null when not listening. */
export function listeningFd(server: Server): number | null {
  return handleFd(server);
}

/** The descriptor of a connected socket, or null once it is destroyed. */
export function socketFd(socket: Socket): number | null {
  return handleFd(socket);
}
