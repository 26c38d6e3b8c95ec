/**
 * `fs/watchMissing`: tell the client once when something it looked for appears (any of the
 * `missing` paths, or a directory on the way to one) or when `present` disappears, so an
 * agent re-reads AGENTS.md or a skills folder only when there is something new.
 *
 * Codex's rules (checked against the binary): one watch per owner, a new id replaces the
 * previous watch; an id used before on the connection answers `watching: false` and changes
 * nothing; `watching: false` also when there is nothing to wait for (no paths, a missing path
 * exists, `present` does not); the watch fires once, `fs/missingChanged {watchId}`.
 *
 * It rests on fs.watch (inotify) on the nearest existing directory of each path, and
 * re-checks the paths themselves on every event, so spurious events never fire it.
 */
import { watch, type FSWatcher } from 'node:fs';
import { stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { NativePath } from '../../backend/index.js';

export class MissingWatch {
  private watchers: FSWatcher[] = [];
  private done = false;
  private checking = false;
  private recheck = false;

  private constructor(
    readonly watchId: number,
    private readonly missing: Buffer[],
    private readonly present: Buffer | null,
    private readonly onChange: (watchId: number) => void,
  ) {}

  /** Starts a watch, or returns null when there is nothing to wait for (`watching: false`). */
  static async start(watchId: number, missing: NativePath[], present: NativePath | null, onChange: (watchId: number) => void): Promise<MissingWatch | null> {
    if (missing.length === 0 && present === null) return null;
    const w = new MissingWatch(watchId, missing.map((p) => p.bytes), present?.bytes ?? null, onChange);
    const directories = await w.directoriesToWatch();
    if (directories === null) return null; // already changed
    try {
      for (const dir of directories) {
        const watcher = watch(dir, { persistent: false }, () => w.changed());
        watcher.on('error', () => w.changed());
        w.watchers.push(watcher);
      }
    } catch (err) {
      w.stop();
      throw err;
    }
    // Something may have appeared between the check and the watchers.
    w.changed();
    return w;
  }

  get fired(): boolean {
    return this.done;
  }

  stop(): void {
    this.done = true;
    for (const watcher of this.watchers) watcher.close();
    this.watchers = [];
  }

  /** An event in a watched directory: look again; fire once if the state changed. */
  private changed(): void {
    if (this.done) return;
    if (this.checking) {
      this.recheck = true;
      return;
    }
    this.checking = true;
    void this.directoriesToWatch().then(
      (directories) => {
        this.checking = false;
        if (this.done) return;
        if (directories === null) {
          this.stop();
          this.onChange(this.watchId);
        } else if (this.recheck) {
          this.recheck = false;
          this.changed();
        }
      },
      () => {
        this.checking = false;
      },
    );
  }

  /**
   * The directories whose changes matter, or null if the state already differs from the one
   * watched: a missing path exists, or `present` is gone. (Each directory of the original
   * state stays watched, so a missing path's nearest existing ancestor appearing counts.)
   */
  private async directoriesToWatch(): Promise<Buffer[] | null> {
    const directories = new Map<string, Buffer>();
    for (const path of this.missing) {
      if (await exists(path)) return null;
      const ancestor = await nearestExisting(path);
      if (this.ancestors.has(path.toString('latin1')) && this.ancestors.get(path.toString('latin1')) !== ancestor.toString('latin1')) return null;
      this.ancestors.set(path.toString('latin1'), ancestor.toString('latin1'));
      directories.set(ancestor.toString('latin1'), ancestor);
    }
    if (this.present !== null) {
      if (!(await exists(this.present))) return null;
      const parent = Buffer.from(dirname(this.present.toString('latin1')), 'latin1');
      directories.set(parent.toString('latin1'), parent);
    }
    return [...directories.values()];
  }

  /** Each missing path's nearest existing ancestor when the watch started: a change of it (a directory on the way appearing or going) is a change. */
  private readonly ancestors = new Map<string, string>();
}

async function exists(path: Buffer): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

async function nearestExisting(path: Buffer): Promise<Buffer> {
  let current = path.toString('latin1');
  for (;;) {
    const parent = dirname(current);
    if (parent === current) return Buffer.from(parent, 'latin1');
    current = parent;
    if (await exists(Buffer.from(current, 'latin1'))) return Buffer.from(current, 'latin1');
  }
}
