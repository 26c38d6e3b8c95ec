/**
 * Where fs state lives. Codex keeps file handles and the missing-watch per connection (a
 * reconnect loses them); a session that negotiated `fsResume` keeps them with the session, so
 * a transfer or a watch survives a drop and everything is closed when the session expires.
 * Watch ids are remembered per connection in both cases, as Codex does, so a client that
 * reconnects may use its ids again. What the handles and the watch are is the back-end's own
 * state in the scope (backend/fs-work.ts, `FsScopeState`; the local one: local/fs/local-scope.ts).
 */
import { FsMethod } from '../../protocol/index.js';
import type { FsScope as BackendFsScope, FsScopeLimits, FsScopeState, FsWork, KeptFsRecord } from '../backend/index.js';
import type { Connection } from '../connection/index.js';
import type { Session } from '../session/index.js';
import { ResultMemory, type ResultJournal } from './results.js';

/** Handles and the missing-watch of one owner (a connection or a session): the back-end keeps them in its own state. */
export class FsScope implements BackendFsScope {
  /** The back-end's state in this scope (`FsWork.openScope`), what a session record keeps of it. */
  private readonly state: FsScopeState | null;
  private closed = false;
  private readonly closers: Array<() => void> = [];

  constructor(
    readonly limits: FsScopeLimits,
    /** The session's back-end: it keeps its own state in the scope. */
    work: FsWork,
    /** Delivers `fs/missingChanged` (or keeps it until someone can be told). */
    private readonly notify: (watchId: number) => void,
    /** What `kept()` returns changed (a watch armed, told or replaced; a handle opened or closed). */
    private readonly changed: () => void = () => {},
  ) {
    this.state = work.openScope?.(this) ?? null;
  }

  /** What a successor server needs of this scope (fs/kept-fs.ts). */
  kept(): KeptFsRecord {
    return this.state?.kept() ?? {};
  }

  keptChanged(): void {
    this.changed();
  }

  /** Watch `watchId`'s change reached the client: a successor need not tell it again. */
  told(watchId: number): void {
    this.state?.told(watchId);
  }

  /**
   * A successor server (restart adoption): what the predecessor's scope kept, handed to the
   * back-end's state (its handles are gone, its watch is armed again).
   */
  restore(record: KeptFsRecord): void {
    this.state?.restore(record);
  }

  /** Tells the client that watch `watchId` saw a change (`fs/missingChanged`). */
  tell(watchId: number): void {
    if (!this.closed) this.notify(watchId);
  }

  /** Runs `listener` once when the scope closes (a back-end's own per-scope state). */
  onClose(listener: () => void): void {
    if (this.closed) listener();
    else this.closers.push(listener);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const listener of this.closers.splice(0)) listener();
    await this.state?.close();
  }
}

/** Per-session fs state. */
export class FsSessionState {
  /** Present when the session negotiated `fsResume`. */
  readonly scope: FsScope | null;
  readonly results: ResultMemory;
  /** Its idempotency-key journal (a state dir), closed with it. */
  private readonly journal: ResultJournal | null;
  /** The connection that completed its handshake (notifications go there), if any. */
  private ready: Connection | null = null;
  /** A watch that fired while no connection was ready: told on the next `initialized`. */
  private pendingWatchId: number | null = null;

  constructor(
    private readonly session: Session,
    limits: FsScopeLimits & { rememberedResults: number },
    journal: ResultJournal | null = null,
    /** A state dir (restart adoption): `session.keptFs` changed, its record is to be written. */
    private readonly recordChanged: (session: Session) => void = () => {},
  ) {
    this.results = new ResultMemory(limits.rememberedResults, journal);
    this.journal = journal;
    this.scope = session.extensions.has('fsResume') ? new FsScope(limits, session.backend.fs, (id) => this.tell(id), () => this.keep()) : null;
  }

  /** The session's back-end fs work. */
  get work(): FsWork {
    return this.session.backend.fs;
  }

  /** A successor server: the scope as its predecessor recorded it (FsScope.restore). */
  restore(record: KeptFsRecord): void {
    if (!this.scope) return;
    this.scope.restore(record);
    this.session.keptFs = this.scope.kept();
  }

  private keep(): void {
    this.session.keptFs = this.scope!.kept();
    this.recordChanged(this.session);
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
    if (conn && !conn.closed) {
      conn.sendNotification(FsMethod.missingChanged, { watchId });
      this.scope?.told(watchId);
    } else this.pendingWatchId = watchId; // nothing is sent while detached (and the record keeps the watch till then)
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
      const scope = new FsScope(this.limits, session.work, (watchId) => this.conn.sendNotification(FsMethod.missingChanged, { watchId }));
      this.ownScope = scope;
      const close = () => void scope.close();
      if (this.conn.signal.aborted) close();
      else this.conn.signal.addEventListener('abort', close, { once: true });
    }
    return this.ownScope;
  }
}
