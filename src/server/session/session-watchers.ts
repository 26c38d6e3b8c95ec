/**
 * The connections watching a session read-only (extension `attach`, session.ts): they pull
 * (a watcher's `process/read`), nothing is pushed to them, and each counts against the cap of
 * the token it presented. When the session ends (closed, expired, lost) each is told what
 * became of every process (`session/ended`), and none is left; a hand-over keeps them (the
 * server's stop closes them).
 */
import type { SessionEndedNotification } from '../../protocol/index.js';
import type { ManagedProcess } from '../output/index.js';

/** A connection watching a session read-only (extension `attach`). */
export interface WatcherLink {
  /** sha256 of the token the watching connection presented: it counts against that token's caps. */
  readonly credential: Buffer;
  /** The session ended (closed, expired, lost): the watcher is told what became of each process (`session/ended`), and has nothing left to watch. */
  sessionEnded(ended: SessionEndedNotification): void;
}

export class SessionWatchers {
  private readonly links = new Set<WatcherLink>();

  add(link: WatcherLink): void {
    this.links.add(link);
  }

  /** `link` no longer watches (its connection closed): its watcher slot is free at once. */
  delete(link: WatcherLink): void {
    this.links.delete(link);
  }

  /** How many connections watch. */
  get size(): number {
    return this.links.size;
  }

  /** How many of the watchers hold `credential` (they count against that token's session cap). */
  holding(credential: Buffer): number {
    let n = 0;
    for (const link of this.links) if (link.credential.equals(credential)) n++;
    return n;
  }

  /** What the watchers will be told of `processes`: each as it stands now, before the end kills it (nothing when none watches). */
  endingProcesses(processes: Iterable<ManagedProcess>): SessionEndedNotification['processes'] {
    if (this.links.size === 0) return [];
    return [...processes].map((proc) => ({ processId: proc.id, exitCode: proc.exitCode, closed: proc.closed, nextSeq: proc.nextSeq }));
  }

  /** The session ended: every watcher is told (`session/ended`), and none is left. */
  ended(notice: SessionEndedNotification): void {
    for (const link of [...this.links]) link.sessionEnded(notice);
    this.links.clear();
  }
}
