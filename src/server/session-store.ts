/**
 * Session records in the state dir (issue #27): `DIR/sessions/<id>.json`, one per session,
 * what a successor server needs to rebuild the session around the keepers it adopts (who owns
 * it, its extensions and limits, its processes and the keeper socket of each).
 *
 * Writes are atomic (a temporary file, mode 0600, then rename(2): a reader or a successor sees
 * the old record or the new one, never half of one), serialized per session (never two
 * renames of one record racing) and coalesced (every save of a session in one tick, and
 * every save while a write is in flight, becomes one write of the newest record). No fsync:
 * the records must survive the server's crash, which the page cache does; a machine crash
 * ends the keepers too.
 *
 * Loading never crashes on a bad file: a corrupt record, a foreign file or a symlink is
 * skipped with a log line (stderr by default).
 */
import { randomBytes } from 'node:crypto';
import { lstat, readdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { checkKeptFs, type KeptFsRecord } from './fs/kept-fs.js';
import type { SessionLimits } from './session.js';
import { stderrLogger, type Logger } from '../util/logger.js';

/** One process of a session record. */
export interface SessionProcessRecord {
  processId: string;
  /** Extension `binaryOutput`: its handle; null without one. */
  handle: number | null;
  /** Its keeper's socket: a file name in DIR/k (not a path). */
  socket: string;
  tty: boolean;
  argv: string[];
  /** Date.now() at its start. */
  startedAt: number;
}

export interface SessionRecord {
  version: 1;
  id: string;
  /** Hex of the sha256 of the token that created it (what Session holds; '' when auth is off). */
  credential: string;
  extensions: string[];
  /** As Session's constructor takes them. */
  limits: SessionLimits;
  /** The next `binaryOutput` handle the session would give. */
  nextHandle: number;
  processes: SessionProcessRecord[];
  /** Processes a restart could not keep (lost-processes.ts): id → why. Absent when none. */
  lost?: Record<string, string>;
  /** An `fsResume` session's live missing-watch and open file handles (fs/kept-fs.ts). Absent when none. */
  fs?: KeptFsRecord;
  /** Date.now() at its creation. */
  createdAt: number;
}

/** Session ids are file names here: only these (a UUID is one). */
const SAFE_ID = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;

export function isStorableSessionId(id: string): boolean {
  return SAFE_ID.test(id);
}

type Op = { kind: 'save'; record: SessionRecord } | { kind: 'remove' };

interface Deferred {
  promise: Promise<void>;
  resolve(): void;
  reject(err: unknown): void;
}

interface Slot {
  /** The newest change not written yet (replaces older ones: coalescing). */
  next: Op | null;
  /** Settles when `next` (or a later change) is applied. */
  nextDone: Deferred | null;
  /** Settles when the slot's writer has nothing left to do (null while idle). */
  idle: Deferred | null;
}

export class SessionStore {
  private readonly slots = new Map<string, Slot>();

  /** `dir`: DIR/sessions of an opened state dir (state-dir.ts). */
  constructor(
    readonly dir: string,
    private readonly logger: Logger = stderrLogger('warn'),
  ) {}

  /**
   * Writes `record` (atomically, after the current tick, coalesced with the session's other
   * changes). The promise settles once it, or a newer change, is applied; it may be ignored
   * (a failure is also logged).
   */
  save(record: SessionRecord): Promise<void> {
    return this.enqueue(record.id, { kind: 'save', record: structuredClone(record) });
  }

  /** Removes the session's record and key journal (after any write of it in flight). */
  remove(id: string): Promise<void> {
    return this.enqueue(id, { kind: 'remove' });
  }

  /** Settles once every change asked for so far is applied. */
  async flush(): Promise<void> {
    await Promise.all([...this.slots.values()].map((s) => s.idle?.promise));
  }

  /** Every valid record in the dir; bad files are skipped with a log line, leftover temporary files removed. */
  async loadAll(): Promise<SessionRecord[]> {
    const names = await readdir(this.dir);
    const records: SessionRecord[] = [];
    for (const name of names.sort()) {
      const path = join(this.dir, name);
      if (name.includes('.json.tmp-')) {
        await unlink(path).catch(() => {});
        continue;
      }
      if (!name.endsWith('.json')) continue;
      try {
        const st = await lstat(path);
        if (!st.isFile()) throw new Error('not a regular file');
        const record = parseRecord(JSON.parse(await readFile(path, 'utf8')));
        if (`${record.id}.json` !== name) throw new Error(`it names session ${record.id}`);
        records.push(record);
      } catch (err) {
        this.logger('warn', `state dir: skipped session record ${path}: ${(err as Error).message}`);
      }
    }
    return records;
  }

  private enqueue(id: string, op: Op): Promise<void> {
    if (!SAFE_ID.test(id)) return Promise.reject(new Error(`session id ${JSON.stringify(id)} cannot be stored (not a safe file name)`));
    let slot = this.slots.get(id);
    if (!slot) this.slots.set(id, (slot = { next: null, nextDone: null, idle: null }));
    slot.next = op;
    slot.nextDone ??= deferred();
    const promise = slot.nextDone.promise;
    if (!slot.idle) {
      slot.idle = deferred();
      setImmediate(() => void this.run(id, slot));
    }
    return promise;
  }

  private async run(id: string, slot: Slot): Promise<void> {
    while (slot.next) {
      const op = slot.next;
      const done = slot.nextDone!;
      slot.next = null;
      slot.nextDone = null;
      try {
        await this.apply(id, op);
        done.resolve();
      } catch (err) {
        this.logger('error', `state dir: could not ${op.kind} session record ${id}: ${(err as Error).message}`);
        done.reject(err);
      }
    }
    this.slots.delete(id);
    slot.idle!.resolve();
  }

  private async apply(id: string, op: Op): Promise<void> {
    const path = join(this.dir, `${id}.json`);
    if (op.kind === 'remove') {
      for (const p of [path, join(this.dir, `${id}.keys`)]) {
        await unlink(p).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== 'ENOENT') throw err;
        });
      }
      return;
    }
    const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      await writeFile(tmp, JSON.stringify(op.record), { mode: 0o600, flag: 'wx' });
      await rename(tmp, path);
    } catch (err) {
      await unlink(tmp).catch(() => {});
      throw err;
    }
  }
}

function deferred(): Deferred {
  let resolve!: () => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {}); // a caller may ignore it: the failure is logged, never unhandled
  return { promise, resolve, reject };
}

/** Checks the shape of a parsed record (throws saying what is wrong). */
export function parseRecord(value: unknown): SessionRecord {
  const r = value as Record<string, unknown>;
  const fail = (what: string): never => {
    throw new Error(`not a tether session record (${what})`);
  };
  if (typeof r !== 'object' || r === null || Array.isArray(r)) fail('not an object');
  if (r.version !== 1) fail(`version ${JSON.stringify(r.version)}, expected 1`);
  if (typeof r.id !== 'string' || !SAFE_ID.test(r.id)) fail('id');
  if (typeof r.credential !== 'string' || !/^([0-9a-f]{64})?$/.test(r.credential)) fail('credential');
  if (!Array.isArray(r.extensions) || !r.extensions.every((e) => typeof e === 'string')) fail('extensions');
  if (typeof r.limits !== 'object' || r.limits === null) fail('limits');
  if (!Number.isSafeInteger(r.nextHandle) || (r.nextHandle as number) < 1) fail('nextHandle');
  if (typeof r.createdAt !== 'number') fail('createdAt');
  if (!Array.isArray(r.processes)) fail('processes');
  for (const p of r.processes as Array<Record<string, unknown>>) {
    const ok =
      typeof p === 'object' &&
      p !== null &&
      typeof p.processId === 'string' &&
      (p.handle === null || Number.isSafeInteger(p.handle)) &&
      typeof p.socket === 'string' &&
      /^[a-z2-7]{12}\.sock$/.test(p.socket) &&
      typeof p.tty === 'boolean' &&
      Array.isArray(p.argv) &&
      p.argv.every((a) => typeof a === 'string') &&
      typeof p.startedAt === 'number';
    if (!ok) fail(`process ${JSON.stringify((p as { processId?: unknown } | null)?.processId)}`);
  }
  if (r.lost !== undefined && (typeof r.lost !== 'object' || r.lost === null || !Object.values(r.lost).every((v) => typeof v === 'string'))) fail('lost');
  if (r.fs !== undefined) checkKeptFs(r.fs);
  return r as unknown as SessionRecord;
}
