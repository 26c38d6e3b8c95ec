/**
 * `--keep` (tether exec, tether mcp): the one line a client command prints when the server
 * keeps its session less long than it asked (its `--max-session-ttl`), or cannot be asked at
 * all (a Codex exec-server, an older tether); and `--keep-last` where the server cannot keep
 * only the newest output.
 */
import type { ExecClient } from '../client/index.js';

/** The warning for `--keep askedMs`, or null when the server granted it all (or nothing was asked). */
export function keepShortfall(client: Pick<ExecClient, 'sessionKeep'>, askedMs: number | undefined): string | null {
  if (askedMs === undefined) return null;
  const keep = client.sessionKeep;
  if (!keep) return `--keep ${formatKeep(askedMs)}: this server does not take a keep time (no sessionKeep extension); the session lasts its own session TTL after a drop`;
  if (keep.grantedMs >= askedMs) return null;
  return `--keep ${formatKeep(askedMs)}: the server keeps this session ${formatKeep(keep.grantedMs)} after a drop, its most (--max-session-ttl)`;
}

/** The warning for `--keep-last` on a server that cannot drop the oldest output (no keepLast extension), or null. */
export function keepLastShortfall(client: Pick<ExecClient, 'extensions'>, keepLast: number | undefined): string | null {
  if (keepLast === undefined || client.extensions.has('keepLast')) return null;
  return '--keep-last: this server cannot drop the oldest output (no keepLast extension); the process pauses for its client as without --keep-last';
}

/** A keep in the unit a user would type it: 8h, 90m, 45s, 1500ms. */
export function formatKeep(ms: number): string {
  for (const [unit, size] of [['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}
