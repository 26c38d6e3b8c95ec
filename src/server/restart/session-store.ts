/**
 * Session records in the state dir (restart adoption): `DIR/sessions/<id>.json`, one per session,
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
 * Loading reads the dir as untrusted input (a disk that filled mid-write, a bug in another
 * version, an edit): a record is bounded in size before it is read (MAX_RECORD_BYTES), then
 * checked against a schema whose limits make sense (a 0 where a positive size belongs is
 * refused). A bad record costs its own session only: it is set aside (`setAside`, the state
 * dir's quarantine) with one log line, never fatal. A record too big to be read back is
 * refused at save too, as an error, rather than written for the successor to set aside.
 */
import { randomBytes } from 'node:crypto';
import { constants as fsConstants } from 'node:fs';
import { open, readdir, rename, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { checkKeptFs } from '../fs/index.js';
import type { KeptFsRecord } from '../backend/index.js';
import type { SessionLimits } from '../session/index.js';
import { stderrLogger, type Logger } from '../../util/logger.js';
import { invalidSessionName } from '../../protocol/index.js';

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
  /**
   * Extension `keepLast`: the `keepLastBytes` it was started with (a successor drops its oldest
   * output past it rather than pausing it). Absent without one (and in records of older servers).
   */
  keepLastBytes?: number;
}

/**
 * The record format this server writes and reads. A record of another version is set aside,
 * never guessed at: an older server meeting a newer record, or a newer one an older record it
 * can no longer read (docs/serve.md, "What a successor reads").
 */
export const RECORD_VERSION = 1;

/**
 * The largest session record read back (and written). A record holds its session's process
 * list (ids and keeper sockets, no argv), its lost processes and its fs watch: far below this.
 */
export const MAX_RECORD_BYTES = 4 * 1024 * 1024;

/** Largest size a record's output limit may name (1 TiB): a bigger one is no limit of ours. */
const MAX_LIMIT_BYTES = 2 ** 40;

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
  /** Its name (extension `attach`), unique among its token's sessions. Absent when it has none. */
  name?: string;
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

  /** Saves (or removes) that failed: the operator sees them (`/metrics`, besides the log line). */
  failures = 0;

  /**
   * `dir`: DIR/sessions of an opened state dir (state-dir.ts). `setAside`: moves a bad record
   * out of the way and says where (the state dir's quarantine); without it a bad record stays.
   */
  constructor(
    readonly dir: string,
    private readonly logger: Logger = stderrLogger('warn'),
    private readonly setAside?: (path: string) => Promise<string>,
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

  /**
   * Every valid record in the dir, in name order. A bad one (too big, not JSON, not a record,
   * another version, named for another session, not a regular file) is set aside with one log
   * line; leftover temporary files are removed; anything else is left alone.
   */
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
        const record = parseRecord(JSON.parse(await readBounded(path, MAX_RECORD_BYTES)));
        if (`${record.id}.json` !== name) throw new Error(`it names session ${record.id}`);
        records.push(record);
      } catch (err) {
        let where = 'left in place';
        if (this.setAside) where = await this.setAside(path).then((to) => `set aside as ${to}`, (e: Error) => `left in place (${e.message})`);
        this.logger('warn', `state dir: session record ${name} not restored (${(err as Error).message}): ${where}; that session is lost, the others are not`);
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
        this.failures++;
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
    const text = serializeRecord(op.record);
    const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      await writeFile(tmp, text, { mode: 0o600, flag: 'wx' });
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

/**
 * A record as written to the file; throws when it would be too big to be read back (the old
 * record then stays, and the failure is the operator's to see, never a silent drop).
 */
export function serializeRecord(record: SessionRecord): string {
  const text = JSON.stringify(record);
  // Characters bound the bytes from below, so a text this long is surely too big.
  if (text.length > MAX_RECORD_BYTES || Buffer.byteLength(text) > MAX_RECORD_BYTES) {
    throw new Error(`the record is over ${MAX_RECORD_BYTES} bytes, more than a successor reads back`);
  }
  return text;
}

/**
 * A regular file's text, refused (without reading it) when it is over `max` bytes, a symlink
 * or not a regular file. One descriptor from open to read: what is checked is what is read.
 */
export async function readBounded(path: string, max: number): Promise<string> {
  const handle = await open(path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK).catch((err: NodeJS.ErrnoException) => {
    throw new Error(err.code === 'ELOOP' ? 'a symbolic link' : err.message);
  });
  try {
    const st = await handle.stat();
    if (!st.isFile()) throw new Error('not a regular file');
    if (st.size > max) throw new Error(`${st.size} bytes, over the ${max} a record may have`);
    const buffer = Buffer.alloc(st.size + 1);
    let length = 0;
    // Read to the end (or one byte past the size seen: it grew meanwhile, refused).
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, length);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > max || length > st.size) throw new Error(`over the ${max} bytes a record may have (it grew while read)`);
    return buffer.toString('utf8', 0, length);
  } finally {
    await handle.close();
  }
}

/** A positive safe integer no bigger than `max`; with `zero`, 0 too. */
function sizeOk(value: unknown, zero = false, max = MAX_LIMIT_BYTES): boolean {
  return Number.isSafeInteger(value) && (value as number) >= (zero ? 0 : 1) && (value as number) <= max;
}

/** Checks the shape of a parsed record (throws saying what is wrong). */
export function parseRecord(value: unknown): SessionRecord {
  const r = value as Record<string, unknown>;
  const fail = (what: string): never => {
    throw new Error(`not a tether session record (${what})`);
  };
  if (typeof r !== 'object' || r === null || Array.isArray(r)) fail('not an object');
  if (r.version !== RECORD_VERSION) {
    const v = r.version;
    const newer = typeof v === 'number' && v > RECORD_VERSION;
    fail(`version ${JSON.stringify(v)}: this server reads version ${RECORD_VERSION}${newer ? ' (written by a newer tether)' : ''}`);
  }
  if (typeof r.id !== 'string' || !SAFE_ID.test(r.id)) fail('id');
  if (typeof r.credential !== 'string' || !/^([0-9a-f]{64})?$/.test(r.credential)) fail('credential');
  if (!Array.isArray(r.extensions) || !r.extensions.every((e) => typeof e === 'string')) fail('extensions');
  if (typeof r.limits !== 'object' || r.limits === null || Array.isArray(r.limits)) fail('limits');
  const output = (r.limits as { output?: unknown }).output;
  if (output !== undefined) {
    // What the successor rebuilds each process's log with: a 0 chunk would never advance.
    const o = output as Record<string, unknown>;
    if (typeof o !== 'object' || o === null) fail('limits.output');
    for (const key of ['windowBytes', 'readAheadBytes', 'maxChunkBytes', 'readCapBytes'] as const) {
      if (!sizeOk(o[key])) fail(`limits.output.${key} ${JSON.stringify(o[key])}: a size of 1 to ${MAX_LIMIT_BYTES} bytes`);
    }
    if (!sizeOk(o.retentionBytes, true)) fail(`limits.output.retentionBytes ${JSON.stringify(o.retentionBytes)}: a size of 0 to ${MAX_LIMIT_BYTES} bytes`);
  }
  if (!Number.isSafeInteger(r.nextHandle) || (r.nextHandle as number) < 1) fail('nextHandle');
  if (typeof r.createdAt !== 'number' || !Number.isFinite(r.createdAt)) fail('createdAt');
  if (r.name !== undefined && (typeof r.name !== 'string' || invalidSessionName(r.name) !== null)) fail('name');
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
    // As process/start takes it: a whole number of bytes, 1 to 2^53-1.
    if (p.keepLastBytes !== undefined && !sizeOk(p.keepLastBytes, false, Number.MAX_SAFE_INTEGER)) {
      fail(`process ${JSON.stringify(p.processId)} keepLastBytes ${JSON.stringify(p.keepLastBytes)}: a size of 1 to ${Number.MAX_SAFE_INTEGER} bytes`);
    }
  }
  if (r.lost !== undefined && (typeof r.lost !== 'object' || r.lost === null || !Object.values(r.lost).every((v) => typeof v === 'string'))) fail('lost');
  if (r.fs !== undefined) checkKeptFs(r.fs);
  return r as unknown as SessionRecord;
}
