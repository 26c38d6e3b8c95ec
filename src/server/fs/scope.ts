/**
 * Where fs state lives. Codex keeps file handles and the missing-watch per connection (a
 * reconnect loses them); a session that negotiated `fsResume` keeps them with the session, so
 * a transfer or a watch survives a drop and everything is closed when the session expires.
 * Watch ids are remembered per connection in both cases, as Codex does, so a client that
 * reconnects may use its ids again.
 */
import { FsMethod } from '../../protocol/index.js';
import type { Connection } from '../connection/connection.js';
import type { Session } from '../session/session.js';
import { HandleTable } from '../local/fs/handles.js';
import type { OpenFileCount } from './limiter.js';
import { ResultMemory } from './results.js';
import type { KeyJournal } from '../restart/key-journal.js';
import { decodeWatch, encodeWatch, type KeptFsRecord, type WatchSpec } from './kept-fs.js';
import type { NativePath } from './uri.js';
import { MissingWatch } from '../local/fs/watch.js';

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
  /** The watch armed and not yet told to the client (a session record keeps it: issue #27). */
  private spec: WatchSpec | null = null;
  private closed = false;
  private readonly closers: Array<() => void> = [];

  constructor(
    readonly limits: FsScopeLimits,
    /** Delivers `fs/missingChanged` (or keeps it until someone can be told). */
    private readonly notify: (watchId: number) => void,
    /** What `kept()` returns changed (a watch armed, told or replaced; a handle opened or closed). */
    private readonly changed: () => void = () => {},
  ) {
    this.handles = new HandleTable(limits.maxHandles, limits.openFiles, changed);
  }

  /** What a successor server needs of this scope (fs/kept-fs.ts). */
  kept(): KeptFsRecord {
    const handles = this.handles.ids();
    return { ...(this.spec ? { watch: encodeWatch(this.spec) } : {}), ...(handles.length > 0 ? { handles } : {}) };
  }

  /** Watch `watchId`'s change reached the client: a successor need not tell it again. */
  told(watchId: number): void {
    if (this.spec?.watchId !== watchId) return;
    this.spec = null;
    this.changed();
  }

  /**
   * A successor server (issue #27): what the predecessor's scope kept. Its handles are gone
   * (their use says so); its watch is armed again, and fires at once if the state changed
   * while no server ran (or if it cannot be armed: a change told in vain beats one lost).
   */
  restore(record: KeptFsRecord): void {
    this.handles.markLost(record.handles ?? []);
    if (!record.watch) return;
    const spec = decodeWatch(record.watch);
    const generation = ++this.watchGeneration;
    this.spec = spec;
    MissingWatch.start(spec.watchId, spec.missing, spec.present, (id) => this.notify(id)).then(
      (started) => {
        if (this.closed || generation !== this.watchGeneration) return void started?.stop();
        this.watch = started;
        if (!started) this.notify(spec.watchId);
      },
      () => {
        if (!this.closed && generation === this.watchGeneration) this.notify(spec.watchId);
      },
    );
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
    if (this.spec) {
      this.spec = null;
      this.changed();
    }
    const started = await MissingWatch.start(watchId, missing, present, (id) => this.notify(id));
    if (this.closed || generation !== this.watchGeneration) {
      started?.stop();
      return started !== null;
    }
    this.watch = started;
    if (started && !started.fired) {
      this.spec = { watchId, missing, present };
      this.changed();
    }
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

  constructor(
    private readonly session: Session,
    limits: FsScopeLimits & { rememberedResults: number },
    journal: KeyJournal | null = null,
    /** A state dir (issue #27): `session.keptFs` changed, its record is to be written. */
    private readonly recordChanged: (session: Session) => void = () => {},
  ) {
    this.results = new ResultMemory(limits.rememberedResults, journal);
    this.journal = journal;
    this.scope = session.extensions.has('fsResume') ? new FsScope(limits, (id) => this.tell(id), () => this.keep()) : null;
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
      const scope = new FsScope(this.limits, (watchId) => this.conn.sendNotification(FsMethod.missingChanged, { watchId }));
      this.ownScope = scope;
      const close = () => void scope.close();
      if (this.conn.signal.aborted) close();
      else this.conn.signal.addEventListener('abort', close, { once: true });
    }
    return this.ownScope;
  }
}
