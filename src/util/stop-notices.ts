/**
 * The one-line notices `tether exec` and `tether mcp` print when the server says, as it
 * stops, what becomes of the session (protocol/close-reasons.ts, restart adoption). One wording for both.
 */

/** The server stopped without keeping the session: its processes were killed. */
export const SERVER_STOPPED_LINE = 'server stopped; process killed';

/** The server restarts and keeps the session for `keptMs`: the client is reconnecting. */
export function restartingLine(keptMs: number): string {
  return `server restarting; session kept for ${Math.round(keptMs / 1000)} s; reconnecting`;
}
