/**
 * `session/list` (extension `sessionList`, `tether ps`): the sessions a caller may see and
 * their processes. A client sees the sessions of its own token; the admin token sees them
 * all. Session ids are resume credentials, so only their first 8 characters are listed.
 */
import { performance } from 'node:perf_hooks';
import type { ProcessListing, SessionListing, SessionListResult } from '../protocol/index.js';
import type { ServerMonitor } from './monitor.js';
import type { ManagedProcess } from './process.js';
import type { Session } from './session.js';

export function listSessions(
  sessions: Iterable<Session>,
  monitor: ServerMonitor,
  caller: { credential: Buffer; session: Session | null; admin: boolean },
): SessionListResult {
  const listed: SessionListing[] = [];
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
      processes: [...session.processes.values()].map((proc) => listProcess(proc, monitor)),
    };
    if (caller.admin) entry.owner = session.ownerTag;
    listed.push(entry);
  }
  listed.sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  return { scope: caller.admin ? 'all' : 'own', sessions: listed };
}

function listProcess(proc: ManagedProcess, monitor: ServerMonitor): ProcessListing {
  const facts = monitor.processFacts(proc);
  return {
    processId: proc.id,
    argv: facts ? [...facts.argv] : [],
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
}
