/**
 * Where fs state lives. Codex keeps file handles and the missing-watch per connection (a
 * reconnect loses them); a session that negotiated `fsResume` keeps them with the session, so
 * a transfer or a watch survives a drop and everything is closed when the session expires.
 * Watch ids are remembered per connection in both cases, as Codex does, so a client that
 * reconnects may use its ids again.
 */
import { FsMethod } from '../../protocol/index.js';
import type { Connection } from '../connection.js';
import type { Session } from '../session.js';
import { HandleTable } from './handles.js';
import type { OpenFileCount } from './limiter.js';
import { ResultMemory } from './results.js';
import type { KeyJournal } from '../key-journal.js';
import type { NativePath } from './uri.js';
import { MissingWatch } from './watch.js';

export interface FsScopeLimits {
  maxHandles: number;
  /** Handles open across the server (shared by every scope). */
  openFiles: OpenFileCount;
}

/** Handles and the missing-watch of one owner (a connection or a session). */
export class FsScope {
  readonly handles: HandleTable;
  private watch: MissingWatch | null = null;
  /** Bumped by every watchMissing: a slower earlier call never replaces a newer watch. */
  private watchGeneration = 0;
  private closed = false;
  private readonly closers: Array<() => void> = [];

  constructor(
    readonly limits: FsScopeLimits,
    /** Delivers `fs/missingChanged` (or keeps it until someone can be told). */
    private readonly notify: (watchId: number) => void,
  ) {
    this.handles = new HandleTable(limits.maxHandles, limits.openFiles);
  }

  /** Tells the client that watch `watchId` saw a change (`fs/missingChanged`). */
  tell(watchId: number): void {
    if (!this.closed) this.notify(watchId);
  }

  /** Replaces the watch; true if it is now watching. */
  async watchMissing(watchId: number, missing: NativePath[], present: NativePath | null): Promise<boolean> {
    const generation = ++this.watchGeneration;
    this.watch?.stop();
    this.watch = null;
    const started = await MissingWatch.start(watchId, missing, present, (id) => this.notify(id));
    if (this.closed || generation !== this.watchGeneration) {
      started?.stop();
      return started !== null;
    }
    this.watch = started;
    return started !== null;
  }

  /** Runs `listener` once when the scope closes (a back-end's own per-scope state). */
  onClose(listener: () => void): void {
    if (this.closed) listener();
    else this.closers.push(listener);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const listener of this.closers.splice(0)) listener();
    this.watch?.stop();
    this.watch = null;
    await this.handles.closeAll();
  }
}

/** Per-session fs state. */
export class FsSessionState {
  /** Present when the session negotiated `fsResume`. */
  readonly scope: FsScope | null;
  readonly results: ResultMemory;
  /** Its idempotency-key journal (a state dir), closed with it. */
  private readonly journal: KeyJournal | null;
  /** The connection that completed its handshake (notifications go there), if any. */
  private ready: Connection | null = null;
  /** A watch that fired while no connection was ready: told on the next `initialized`. */
  private pendingWatchId: number | null = null;

  constructor(session: Session, limits: FsScopeLimits & { rememberedResults: number }, journal: KeyJournal | null = null) {
    this.results = new ResultMemory(limits.rememberedResults, journal);
    this.journal = journal;
    this.scope = session.extensions.has('fsResume') ? new FsScope(limits, (id) => this.tell(id)) : null;
  }

  /** `initialized` arrived on `conn`: notifications may flow again; a change seen meanwhile is told now. */
  connectionReady(conn: Connection): void {
    this.ready = conn;
    conn.signal.addEventListener('abort', () => {
      if (this.ready === conn) this.ready = null;
    });
    if (this.pendingWatchId !== null) {
      const id = this.pendingWatchId;
      this.pendingWatchId = null;
      this.tell(id);
    }
  }

  private tell(watchId: number): void {
    const conn = this.ready;
    if (conn && !conn.closed) conn.sendNotification(FsMethod.missingChanged, { watchId });
    else this.pendingWatchId = watchId; // nothing is sent while detached
  }

  async close(): Promise<void> {
    this.journal?.close();
    await this.scope?.close();
  }
}

/** Per-connection fs state. */
export class FsConnectionState {
  readonly usedWatchIds = new Set<number>();
  /** Codex's rule (no `fsResume`): handles and the watch die with the connection. */
  private ownScope: FsScope | null = null;

  constructor(
    private readonly conn: Connection,
    private readonly limits: FsScopeLimits,
  ) {}

  /** The scope for this connection's requests: the session's with `fsResume`, else the connection's own. */
  scope(session: FsSessionState): FsScope {
    if (session.scope) return session.scope;
    if (!this.ownScope) {
      const scope = new FsScope(this.limits, (watchId) => this.conn.sendNotification(FsMethod.missingChanged, { watchId }));
      this.ownScope = scope;
      const close = () => void scope.close();
      if (this.conn.signal.aborted) close();
      else this.conn.signal.addEventListener('abort', close, { once: true });
    }
    return this.ownScope;
  }
}
