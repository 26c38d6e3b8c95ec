/**
 * `session/list` (extension `sessionList`, `tether ps`): the sessions a caller may see and
 * their processes. A client sees the sessions of its own token; the admin token sees them
 * all. Session ids are resume credentials, so only their first 8 characters are listed.
 *
 * The answer's size is bounded before it is built: each process's argv is cut to
 * `MAX_LISTED_ARGV_CHARS` (flagged `argvTruncated`), and once the listed entries reach
 * `MAX_LIST_BYTES` the rest is left out (flagged `truncated`). A client that started
 * hundreds of processes with megabytes of arguments each cannot make one answer past what
 * a string can hold.
 */
import { performance } from 'node:perf_hooks';
import type { ProcessListing, SessionListing, SessionListResult } from '../../protocol/index.js';
import type { ServerMonitor, Session } from '../session/index.js';
import type { ManagedProcess } from '../output/index.js';

/** Serialized bytes of one answer at most (about: entries are measured as they are added). */
export const MAX_LIST_BYTES = 4 * 1024 * 1024;

export function listSessions(
  sessions: Iterable<Session>,
  monitor: ServerMonitor,
  caller: { credential: Buffer; session: Session | null; admin: boolean },
): SessionListResult {
  const listed: SessionListing[] = [];
  let bytes = 64;
  let truncated = false;
  for (const session of sessions) {
    if (session.isExpired) continue;
    if (!caller.admin && !session.ownedBy(caller.credential)) continue;
    const facts = monitor.sessionFacts(session);
    const entry: SessionListing = {
      session: session.id.slice(0, 8),
      clientName: facts?.clientName ?? '',
      current: session === caller.session,
      attached: session.attached,
      createdAt: new Date(facts?.createdAt ?? Date.now()).toISOString(),
      expiresAt: !session.attached && facts?.detachedAt != null ? new Date(facts.detachedAt + session.limits.ttlMs).toISOString() : null,
      keepMs: session.limits.ttlMs,
      watchers: session.watchers,
      processes: [],
    };
    if (session.name !== null) entry.name = session.name;
    if (caller.admin) entry.owner = session.ownerTag;
    const hold = session.budgetHold;
    if (hold) entry.budgetHold = hold;
    if (session.adopted) entry.adopted = true;
    bytes += JSON.stringify(entry).length + 1;
    if (bytes > MAX_LIST_BYTES) {
      truncated = true;
      break;
    }
    for (const proc of session.processes.values()) {
      const listing = listProcess(proc, monitor);
      bytes += JSON.stringify(listing).length + 1;
      if (bytes > MAX_LIST_BYTES) {
        truncated = true;
        break;
      }
      entry.processes.push(listing);
    }
    listed.push(entry);
    if (truncated) break;
  }
  listed.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  const result: SessionListResult = { scope: caller.admin ? 'all' : 'own', sessions: listed };
  if (truncated) result.truncated = true;
  return result;
}


function listProcess(proc: ManagedProcess, monitor: ServerMonitor): ProcessListing {
  const facts = monitor.processFacts(proc);
  const listing: ProcessListing = {
    processId: proc.id,
    argv: [...(facts?.argv ?? [])],
    pid: proc.pid,
    tty: proc.tty,
    state: proc.exitCode === null ? 'running' : 'exited',
    exitCode: proc.exitCode,
    startedAt: new Date(facts?.startedAt ?? Date.now()).toISOString(),
    ageMs: facts ? Math.round(performance.now() - facts.started) : 0,
    bytesOut: proc.bytesRead,
    bytesIn: proc.bytesWritten,
    paused: proc.isPaused,
  };
  const pausedBy = proc.pauseReason;
  if (pausedBy) listing.pausedBy = pausedBy;
  if (proc.spilled > 0) listing.spilledBytes = proc.spilled;
  if (facts?.argvTruncated) listing.argvTruncated = true;
  return listing;
}
