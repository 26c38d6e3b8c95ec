/**
 * `--keep` (tether exec, tether mcp): the one line a client command prints when the server
 * keeps its session less long than it asked (its `--max-session-ttl`), or cannot be asked at
 * all (a Codex exec-server, an older tether).
 */
import type { ExecClient } from '../client/index.js';
import { formatAge } from '../util/format.js';

/** The warning for `--keep askedMs`, or null when the server granted it all (or nothing was asked). */
export function keepShortfall(client: Pick<ExecClient, 'sessionKeep'>, askedMs: number | undefined): string | null {
  if (askedMs === undefined) return null;
  const keep = client.sessionKeep;
  if (!keep) return `--keep ${formatAge(askedMs)}: this server does not take a keep time (no sessionKeep extension); the session lasts its own session TTL after a drop`;
  if (keep.grantedMs >= askedMs) return null;
  return `--keep ${formatAge(askedMs)}: the server keeps this session ${formatAge(keep.grantedMs)} after a drop, its most (--max-session-ttl)`;
}
