/**
 * Where kept processes spill (output past their window goes to disk, kept-server.ts):
 * DIR/spill/<the keeper socket's name>, one directory per keeper, within the disk quota
 * (disk-quota.ts) the server's sessions share; reopened as a predecessor left it when a
 * keeper is adopted, and swept of what no adopted process owns after a restore.
 */
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import type { KeepOptions } from '../backend/index.js';
import { shareOwner } from '../memory/index.js';
import type { OutputSpill } from '../output/index.js';
import type { Session } from '../session/index.js';
import { DiskQuota, type DiskLimits } from './disk-quota.js';
import { SpillFiles } from './spill-files.js';

export class KeptSpills {
  /** The disk the spills share (output beyond the window goes to disk), or null. */
  readonly disk: DiskQuota | null;
  /** The quota of adopted spills when this server spills nothing: takes nothing more. */
  private noDisk: DiskQuota | null = null;

  constructor(
    /** The state dir's path (DIR). */
    private readonly dirPath: string,
    /** Where the keepers' sockets are (DIR/k). */
    private readonly keepersPath: string,
    disk: DiskLimits | undefined,
  ) {
    this.disk = disk ? new DiskQuota(disk) : null;
  }

  /** DIR/spill/<the keeper socket's name>: where that keeper's process spills. */
  private spillDir(socketPath: string): string {
    return join(this.dirPath, 'spill', basename(socketPath, '.sock'));
  }

  /** Where a new kept process's output past its window goes: its own directory, within the quota. */
  spillFor(session: Session, keep: KeepOptions): OutputSpill | undefined {
    if (!this.disk) return undefined;
    return SpillFiles.create(this.spillDir(keep.path), this.disk.account(shareOwner(Buffer.from(session.credentialHex, 'hex')), session.id));
  }

  /**
   * An adopted process's spill as its predecessor left it (records up to what its keeper
   * dropped). Reopened even when this server spills nothing (--output-disk 0): what is on disk
   * is the process's output; it only takes no more.
   */
  reopen(session: Session, socketPath: string, droppedSeq: number): SpillFiles {
    const quota = this.disk ?? (this.noDisk ??= new DiskQuota({ totalBytes: 0, sessionBytes: 0 }));
    return SpillFiles.reopen(this.spillDir(socketPath), quota.account(shareOwner(Buffer.from(session.credentialHex, 'hex')), session.id), droppedSeq);
  }

  /**
   * Spill directories of no adopted process go (`keep`: the names of those adopted): their
   * keeper is gone (no socket left) or was dismissed. One whose keeper still has its socket
   * (not adopted in time: left for a later server) stays with it.
   */
  sweep(keep: ReadonlySet<string>, dismissed: ReadonlySet<string>): void {
    const root = join(this.dirPath, 'spill');
    let names: string[] = [];
    try {
      names = readdirSync(root);
    } catch {
      return;
    }
    for (const name of names) {
      if (keep.has(name)) continue;
      if (!dismissed.has(name) && existsSync(join(this.keepersPath, `${name}.sock`))) continue;
      rmSync(join(root, name), { recursive: true, force: true });
    }
  }
}
