/**
 * The disk the output spill may use (output beyond the window goes to disk): a server-wide
 * total (--output-disk-total), a limit per session (--output-disk), and the total shared per
 * token as the memory budget's output is (memory/fair-share.ts): while more than one token
 * wants disk — holds some, or was refused — none may hold more than an equal share of the
 * total, so one client that never comes back cannot take the disk from the others. A token
 * alone may use the whole total. Pure bookkeeping (no files): test/unit/server/restart/disk-quota.test.ts.
 */
import type { SpillRefusal } from '../output/index.js';

export interface DiskLimits {
  /** All spills of the server together, bytes. */
  totalBytes: number;
  /** One session's spills together, bytes. */
  sessionBytes: number;
}

/** One session's (or one process's) hold on the disk quota. */
export interface DiskAccount {
  /** Takes `bytes` more; null when taken, else why not (nothing taken). */
  take(bytes: number): SpillRefusal | null;
  /** Gives `bytes` back. */
  give(bytes: number): void;
  /** Bytes held. */
  readonly bytes: number;
}

/** A token's equal share of the total while `wanting` tokens want disk. */
export function diskShareBytes(totalBytes: number, wanting: number): number {
  return Math.floor(totalBytes / Math.max(1, wanting));
}

export class DiskQuota {
  private used = 0;
  /** Per token (share owner): bytes held, and whether it was refused since it last took. */
  private readonly owners = new Map<string, { bytes: number; refused: boolean }>();
  /** Per session: bytes held. */
  private readonly sessions = new Map<string, number>();

  constructor(readonly limits: DiskLimits) {}

  /** Bytes held by every spill. */
  get usedBytes(): number {
    return this.used;
  }

  /** Tokens that hold disk or were refused some. */
  private get wanting(): number {
    let n = 0;
    for (const o of this.owners.values()) if (o.bytes > 0 || o.refused) n++;
    return n;
  }

  /** The account of a spill of session `sessionId`, created by token `owner` (memory/fair-share.ts `shareOwner`). */
  account(owner: string, sessionId: string): DiskAccount {
    let held = 0;
    const quota = this;
    return {
      take(bytes) {
        const o = quota.owner(owner);
        const session = quota.sessions.get(sessionId) ?? 0;
        const wanting = quota.wanting + (o.bytes > 0 || o.refused ? 0 : 1);
        if (session + bytes > quota.limits.sessionBytes || quota.used + bytes > quota.limits.totalBytes || o.bytes + bytes > diskShareBytes(quota.limits.totalBytes, wanting)) {
          o.refused = true;
          return 'output-disk-quota';
        }
        o.bytes += bytes;
        o.refused = false;
        quota.sessions.set(sessionId, session + bytes);
        quota.used += bytes;
        held += bytes;
        return null;
      },
      give(bytes) {
        bytes = Math.min(bytes, held);
        if (bytes <= 0) return;
        held -= bytes;
        quota.used -= bytes;
        const o = quota.owner(owner);
        o.bytes -= bytes;
        const session = (quota.sessions.get(sessionId) ?? 0) - bytes;
        if (session > 0) quota.sessions.set(sessionId, session);
        else quota.sessions.delete(sessionId);
        if (o.bytes <= 0 && !o.refused) quota.owners.delete(owner);
      },
      get bytes() {
        return held;
      },
    };
  }

  /** A token stops wanting disk (its sessions are gone): its refusals no longer shrink the others' shares. */
  forget(owner: string): void {
    const o = this.owners.get(owner);
    if (o && o.bytes <= 0) this.owners.delete(owner);
  }

  private owner(owner: string): { bytes: number; refused: boolean } {
    let o = this.owners.get(owner);
    if (!o) this.owners.set(owner, (o = { bytes: 0, refused: false }));
    return o;
  }
}

/**
 * The default total: a quarter of the state dir filesystem's free space at start, at most
 * 16 GiB (so the default never fills a user's disk), and at least one segment.
 */
export function defaultDiskTotal(freeBytes: number): number {
  return Math.max(SPILL_SEGMENT_BYTES, Math.min(16 * 1024 ** 3, Math.floor(freeBytes / 4)));
}

/** The spill's segment files (spill-files.ts): the unit disk is taken and freed in. */
export const SPILL_SEGMENT_BYTES = 16 * 1024 * 1024;
