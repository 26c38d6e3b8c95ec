/**
 * The local back-end's state in one fs scope (backend/fs-work.ts, `FsScopeState`): the open
 * files (handles.ts) and the missing-watch (watch.ts), with what a session record keeps of
 * them (fs/kept-fs.ts) and what a successor server restores.
 */
import type { FsScope, FsScopeState, KeptFsRecord, NativePath } from '../../backend/index.js';
import { decodeWatch, encodeWatch, type WatchSpec } from '../../fs/index.js';
import { HandleTable } from './handles.js';
import { MissingWatch } from './watch.js';

export class LocalFsScope implements FsScopeState {
  readonly handles: HandleTable;
  private watch: MissingWatch | null = null;
  /** Bumped by every watchMissing: a slower earlier call never replaces a newer watch. */
  private watchGeneration = 0;
  /** The watch armed and not yet told to the client (a session record keeps it: restart adoption). */
  private spec: WatchSpec | null = null;
  private closed = false;

  constructor(private readonly scope: FsScope) {
    this.handles = new HandleTable(scope.limits.maxHandles, scope.limits.openFiles, () => scope.keptChanged());
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
    this.scope.keptChanged();
  }

  /**
   * A successor server (restart adoption): what the predecessor's scope kept. Its handles are
   * gone (their use says so); its watch is armed again, and fires at once if the state changed
   * while no server ran (or if it cannot be armed: a change told in vain beats one lost).
   */
  restore(record: KeptFsRecord): void {
    this.handles.markLost(record.handles ?? []);
    if (!record.watch) return;
    const spec = decodeWatch(record.watch);
    const generation = ++this.watchGeneration;
    this.spec = spec;
    MissingWatch.start(spec.watchId, spec.missing, spec.present, (id) => this.scope.tell(id)).then(
      (started) => {
        if (this.closed || generation !== this.watchGeneration) return void started?.stop();
        this.watch = started;
        if (!started) this.scope.tell(spec.watchId);
      },
      () => {
        if (!this.closed && generation === this.watchGeneration) this.scope.tell(spec.watchId);
      },
    );
  }

  /** Replaces the watch; true if it is now watching. */
  async watchMissing(watchId: number, missing: NativePath[], present: NativePath | null): Promise<boolean> {
    const generation = ++this.watchGeneration;
    this.watch?.stop();
    this.watch = null;
    if (this.spec) {
      this.spec = null;
      this.scope.keptChanged();
    }
    const started = await MissingWatch.start(watchId, missing, present, (id) => this.scope.tell(id));
    if (this.closed || generation !== this.watchGeneration) {
      started?.stop();
      return started !== null;
    }
    this.watch = started;
    if (started && !started.fired) {
      this.spec = { watchId, missing, present };
      this.scope.keptChanged();
    }
    return started !== null;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.watch?.stop();
    this.watch = null;
    await this.handles.closeAll();
  }
}
