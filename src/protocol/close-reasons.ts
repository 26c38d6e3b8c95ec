/**
 * What a tether server says in the WebSocket close frame when it stops (docs/protocol.md,
 * "When the server stops"). A tether extension that needs no negotiation: a
 * Codex client just sees a close with a code and a text. The tether client reads it with
 * `parseCloseNotice` and acts on it; a close that does not carry tether's prefix (a proxy's
 * 1001, a Codex server's) means nothing more than any other drop.
 */

/** RFC 6455 close codes a server that stops uses. */
export const StopCloseCode = {
  /** 1001 "going away": the server stops, and the sessions end with it. */
  goingAway: 1001,
  /** 1012 "service restart" (IANA registry): the server restarts, and the sessions are kept. */
  serviceRestart: 1012,
} as const;

/** Every tether close reason starts with this, so a proxy's or another server's is never taken for ours. */
export const CLOSE_REASON_PREFIX = 'tether: ';

/** Sent with 1001 by a server that stops without keeping its sessions (every process is killed). */
export const SERVER_STOPPED_REASON = `${CLOSE_REASON_PREFIX}server stopped; sessions and processes ended`;

/** What a client reads from a tether server's close. */
export type CloseNotice =
  /** The server stopped: the session and its processes are gone; reconnecting cannot help. */
  | { kind: 'stopped' }
  /** The server restarts and keeps the session for `keptMs`: reconnect at once. */
  | { kind: 'restarting'; keptMs: number };

/** Sent with 1012 by a server that restarts and keeps its sessions for `keptMs` (whole seconds on the wire). */
export function restartingReason(keptMs: number): string {
  return `${CLOSE_REASON_PREFIX}server restarting; sessions kept for ${Math.max(0, Math.round(keptMs / 1000))} s`;
}

/** The close a stopping server sends: `kept` when its sessions survive it (a state dir), null when they end with it. */
export function stopClose(kept: { keptMs: number } | null): { code: number; reason: string } {
  return kept
    ? { code: StopCloseCode.serviceRestart, reason: restartingReason(kept.keptMs) }
    : { code: StopCloseCode.goingAway, reason: SERVER_STOPPED_REASON };
}

const RESTARTING = /^tether: server restarting; sessions kept for (\d{1,9}) s$/;

/**
 * tether's meaning of a close, or null for any other close (another code, another text, a
 * text without tether's prefix: a proxy going away, a Codex server): those are plain drops.
 */
export function parseCloseNotice(code: number, reason: string): CloseNotice | null {
  if (code === StopCloseCode.goingAway && reason === SERVER_STOPPED_REASON) return { kind: 'stopped' };
  if (code === StopCloseCode.serviceRestart) {
    const match = RESTARTING.exec(reason);
    if (match) return { kind: 'restarting', keptMs: Number(match[1]) * 1000 };
  }
  return null;
}
