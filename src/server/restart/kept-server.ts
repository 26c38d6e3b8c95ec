/**
 * A server with a state dir (restart adoption): its processes run under kept keepers that outlive
 * it, its sessions are recorded there, and a successor adopts both.
 *
 * - At start: the state dir is opened (checked and locked: a refusal stops the start) before
 *   the server binds; once it listens (answering 503 with what it waits for meanwhile,
 *   starting-gate.ts), `adoptAll` reads the session records (a bad one is set aside in
 *   DIR/quarantine/ and costs only its session) and adopts every keeper socket in `k/` at
 *   once, each within ADOPT_TIMEOUT_MS (one that refuses or does not answer in time is left
 *   to its own adopt timer, with a log line; anything in `k/` that is no socket is skipped).
 *   `restore` (once the server exists) rebuilds each recorded session, detached with a fresh
 *   TTL, around the processes of its keepers; a keeper whose session has no record is told to
 *   kill its tree. A start that fails after adopting hands every keeper back alive
 *   (`handBack`) and releases the lock.
 * - While serving: every spawn is kept (`keepOptions`: its socket and the meta a successor
 *   rebuilds the process from), and each session's record follows its changes (`save`,
 *   `remove`).
 * - At a kept stop (`handOver`): the keepers are let go of without killing anything.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { unlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { KeyJournal } from './key-journal.js';
import { KEEPER_GONE, LostProcesses } from './lost-processes.js';
import type { ExtensionName } from '../../protocol/index.js';
import type { Logger } from '../../util/logger.js';
import type { AdoptedChild, KeepOptions, ServerBackend } from '../backend/index.js';
import type { FsRegistration } from '../fs/index.js';
import { type ProcessCapacity, type OutputShares, type MemoryBudget, shareOwner } from '../memory/index.js';
import { grantKeep, type KeepLimits, type ServerMonitor, listedArgv, Session, type SessionLimits } from '../session/index.js';
import type { ManagedProcess, OutputLimits, OutputSpill } from '../output/index.js';
import { adoptProcess } from './process-kept.js';
import { isStorableSessionId, serializeRecord, SessionStore, type SessionRecord } from './session-store.js';
import { adoptChild } from '../local/index.js';
import { openStateDir, type StateDir } from './state-dir.js';
import { DiskQuota, type DiskLimits } from './disk-quota.js';
import { SpillFiles } from './spill-files.js';

/**
 * How long one keeper has to hand itself over (connect, descriptors, dump) at start. All are
 * adopted at once, so this bounds the whole adoption; a keeper that does not make it is left
 * to its own adopt timer (--adopt-within), its processes alive for a later server.
 */
export const ADOPT_TIMEOUT_MS = 5_000;
/**
 * Keepers adopted at once (one slow to send its descriptors is waited for on a worker thread:
 * receive-fds.ts). It bounds what dumps in flight can make the start hold (16 × the largest
 * dump) against how long keepers that never answer can delay the others (5 s per 16 of them).
 */
const ADOPT_PARALLEL = 16;
/** Output a keeper may retain beyond what the server's log can hold (bytes in flight between them). */
const CAP_SLACK_BYTES = 1024 * 1024;
/** A dump's room besides the retained output: meta, marks, writeIds (4096 of at most 1 KiB). */
const DUMP_SLACK_BYTES = 8 * 1024 * 1024;

/** What a kept keeper is given at spawn and returns at adoption (its `meta`). */
export interface KeptMeta {
  v: 1;
  session: string;
  process: string;
  handle: number;
  argv: string[];
  tty: boolean;
  stdin: boolean;
}

/**
 * A keeper's meta, or null when it is not one of ours (its keeper is then dismissed). The
 * handle must be a u32 (binary output frames carry it as one); argv is cut as it is listed.
 * @internal
 */
export function parseMeta(bytes: Buffer): KeptMeta | null {
  try {
    const meta = JSON.parse(bytes.toString()) as Partial<KeptMeta>;
    if (typeof meta !== 'object' || meta === null) return null;
    if (meta.v !== 1 || typeof meta.session !== 'string' || typeof meta.process !== 'string') return null;
    const handle = meta.handle ?? 0;
    if (!Number.isInteger(handle) || handle < 0 || handle > 0xffff_ffff) return null;
    return {
      v: 1,
      session: meta.session,
      process: meta.process,
      handle,
      argv: Array.isArray(meta.argv) ? listedArgv(meta.argv.map(String)).argv : [],
      tty: meta.tty === true,
      stdin: meta.stdin === true,
    };
  } catch {
    return null;
  }
}

interface Adopted {
  socketPath: string;
  meta: KeptMeta | null;
  child: AdoptedChild;
}

export interface KeptServerOptions {
  stateDir: string;
  adoptWithinMs: number;
  log: Logger;
  /** The TCP port the server is to listen on (a refused lock says whether its holder listens there too). */
  port?: number;
  /** The server's own output limits: what a keeper named by no record may retain. */
  output: OutputLimits;
  /** The disk output past the window may use (disk-quota.ts); none: processes pause at the window. */
  disk?: DiskLimits;
}

/** The server a restore rebuilds the recorded sessions into (what `restore` uses of it). */
export interface RestoreTarget {
  /** Live sessions by id: the restored ones are added. */
  sessions: Map<string, Session>;
  limits: SessionLimits;
  /** The keep limits (`sessionKeep`): a recorded grant is kept within this server's. */
  keep?: KeepLimits;
  sessionHooks: ConstructorParameters<typeof Session>[3];
  backend: ServerBackend;
  shares?: OutputShares;
  memory?: MemoryBudget;
  capacity?: Pick<ProcessCapacity, 'admit'>;
  monitor: ServerMonitor;
  log: Logger;
  /** The fs methods' per-session state: a record's watches and handles are rebuilt there. */
  fsRegistration?: Pick<FsRegistration, 'restore'>;
}

export class KeptServer {
  /** Recorded processes the restore could not adopt, per session: a resuming client is told (lost-processes.ts). */
  readonly lost = new LostProcesses();

  private adopted: Adopted[] = [];
  private records: SessionRecord[] = [];
  /** What the start waits for, for `/readyz` (null once adopted). */
  private waiting: string | null = null;
  /** Session records that could not be written at creation (the store counts the others). */
  private createFailures = 0;

  /** Keepers told to kill their processes at this restore (their spills go). */
  private readonly dismissed = new Set<string>();
  /** The disk the spills share (output beyond the window goes to disk), or null. */
  readonly disk: DiskQuota | null;

  private constructor(
    readonly dir: StateDir,
    private readonly store: SessionStore,
    readonly adoptWithinMs: number,
    private readonly log: Logger,
    private readonly output: OutputLimits,
    disk: DiskLimits | undefined,
  ) {
    this.disk = disk ? new DiskQuota(disk) : null;
  }

  /** DIR/spill/<the keeper socket's name>: where that keeper's process spills. */
  private spillDir(socketPath: string): string {
    return join(this.dir.path, 'spill', basename(socketPath, '.sock'));
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
  private reopenSpill(session: Session, socketPath: string, droppedSeq: number): SpillFiles {
    const quota = this.disk ?? (this.noDisk ??= new DiskQuota({ totalBytes: 0, sessionBytes: 0 }));
    return SpillFiles.reopen(this.spillDir(socketPath), quota.account(shareOwner(Buffer.from(session.credentialHex, 'hex')), session.id), droppedSeq);
  }

  /** The quota of adopted spills when this server spills nothing: takes nothing more. */
  private noDisk: DiskQuota | null = null;

  /**
   * Spill directories of no adopted process go: their keeper is gone (no socket left) or was
   * dismissed. One whose keeper still has its socket (not adopted in time: left for a later
   * server) stays with it.
   */
  private sweepSpills(keep: ReadonlySet<string>, dismissed: ReadonlySet<string>): void {
    const root = join(this.dir.path, 'spill');
    let names: string[] = [];
    try {
      names = readdirSync(root);
    } catch {
      return;
    }
    for (const name of names) {
      if (keep.has(name)) continue;
      if (!dismissed.has(name) && existsSync(join(this.dir.keepersPath, `${name}.sock`))) continue;
      rmSync(join(root, name), { recursive: true, force: true });
    }
  }

  /** Opens (checks and locks) the state dir; nothing is adopted yet (`adoptAll`). */
  static async open(opts: KeptServerOptions): Promise<KeptServer> {
    const dir = await openStateDir(opts.stateDir, opts.port !== undefined ? { port: opts.port } : {});
    const store = new SessionStore(dir.sessionsPath, opts.log, (path) => dir.quarantine(path));
    return new KeptServer(dir, store, opts.adoptWithinMs, opts.log, opts.output, opts.disk);
  }

  /** What the start waits for (`/readyz` while it adopts), or null. */
  get waitingFor(): string | null {
    return this.waiting;
  }

  /** Session records that could not be saved (written or removed) since the start: `/metrics`. */
  get saveFailures(): number {
    return this.store.failures + this.createFailures;
  }

  /**
   * Reads the session records (a bad one is set aside) and adopts every keeper in `k/` at
   * once, each within ADOPT_TIMEOUT_MS. A keeper that fails is logged and left to its own
   * adopt timer; a stale socket (nothing listens) is removed; anything in `k/` that is no
   * socket is skipped. Never throws for what the dir holds.
   */
  async adoptAll(): Promise<void> {
    const log = this.log;
    this.waiting = 'reading the session records of the state dir';
    const records = await this.store.loadAll();
    // What each keeper may retain: its session's output limits as recorded, else ours.
    const limitsOf = new Map<string, OutputLimits>();
    for (const r of records) for (const p of r.processes) if (r.limits.output) limitsOf.set(p.socket, r.limits.output);
    const sockets = await this.dir.keeperSockets((name, why) => log('warn', `state dir: k/${name} skipped: ${why}, not a keeper socket`));
    let left = sockets.length;
    const say = () => (this.waiting = `adopting ${left} of ${sockets.length} kept process(es) from the state dir (each within ${ADOPT_TIMEOUT_MS / 1000} s)`);
    say();
    const adopted = new Map<string, Adopted>();
    await forEachAtOnce(sockets, ADOPT_PARALLEL, async (socketPath) => {
      const limits = limitsOf.get(basename(socketPath)) ?? this.output;
      const maxDump = limits.windowBytes + limits.retentionBytes + limits.readAheadBytes + CAP_SLACK_BYTES + DUMP_SLACK_BYTES;
      let meta: KeptMeta | null = null;
      try {
        const child = await adoptChild(
          socketPath,
          ADOPT_TIMEOUT_MS,
          (dump) => {
            meta = parseMeta(dump.meta);
            return { tty: meta?.tty ?? false, pipeStdin: meta?.stdin ?? false };
          },
          maxDump,
        );
        adopted.set(socketPath, { socketPath, meta, child });
      } catch (err) {
        // Nothing listens there (its keeper was killed outright): a stale file, removed.
        const stale = (err as NodeJS.ErrnoException).code === 'ECONNREFUSED' && (await unlink(socketPath).then(() => true, () => false));
        log('warn', `state dir: keeper ${basename(socketPath)} not adopted: ${(err as Error).message}${stale ? ' (stale socket removed)' : ' (left to its own --adopt-within)'}`);
      } finally {
        left--;
        say();
      }
    });
    // In the order of their sockets, as before (restore is deterministic).
    this.adopted = sockets.flatMap((path) => adopted.get(path) ?? []);
    this.records = records;
    this.waiting = null;
  }

  /**
   * The start failed after adopting (no server will use them): every adopted keeper is let go
   * of alive, as a kept stop does (each waits its --adopt-within again for a later server),
   * and the lock is released.
   */
  handBack(): void {
    for (const a of this.adopted.splice(0)) a.child.child.kept?.handOver();
    this.records = [];
    this.dir.releaseSync();
  }

  /** How a new process of `session` is kept: its keeper's socket, timer, cap and meta. */
  keepOptions(session: Session, p: { processId: string; handle: number; argv: string[]; tty: boolean; pipeStdin: boolean }): KeepOptions {
    const limits = session.limits.output;
    // The argv as it is listed (what an adopted process is listed with): a meta stays small.
    const meta: KeptMeta = { v: 1, session: session.id, process: p.processId, handle: p.handle, argv: listedArgv(p.argv).argv, tty: p.tty, stdin: p.pipeStdin };
    return {
      path: this.dir.newKeeperSocketPath(),
      meta: Buffer.from(JSON.stringify(meta)),
      adoptMs: this.adoptWithinMs,
      capBytes: limits.windowBytes + limits.retentionBytes + limits.readAheadBytes + CAP_SLACK_BYTES,
    };
  }

  /** Writes `session`'s record (its process list, handles, keeper sockets), soon (session-store.ts). */
  save(session: Session): void {
    if (session.isExpired) return;
    void this.store.save(this.record(session));
  }

  /**
   * A new session's first record, written before its initialize answer goes out
   * (synchronously: a server killed right after answering must leave it for its successor).
   */
  created(session: Session): void {
    if (!isStorableSessionId(session.id)) return;
    const path = join(this.dir.sessionsPath, `${session.id}.json`);
    const tmp = `${path}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      writeFileSync(tmp, serializeRecord(this.record(session)), { mode: 0o600, flag: 'wx' });
      renameSync(tmp, path);
    } catch (err) {
      this.createFailures++;
      try {
        rmSync(tmp, { force: true });
      } catch {
        // the dir itself is broken (ENOTDIR, EIO): nothing was left there either
      }
      this.log('error', `state dir: could not write session record ${session.id}: ${(err as Error).message}`);
    }
  }

  private record(session: Session): SessionRecord {
    const processes = [...session.processes.values()].map((proc) => ({
      processId: proc.id,
      handle: proc.handle || null,
      socket: basename(proc.keeperSocket),
      tty: proc.tty,
      argv: [],
      startedAt: Date.now(),
    }));
    return {
      version: 1,
      id: session.id,
      credential: session.credentialHex,
      extensions: [...session.extensions],
      limits: session.limits,
      nextHandle: session.handleCursor,
      processes,
      lost: this.lost.of(session.id),
      ...(session.keptFs?.watch || session.keptFs?.handles ? { fs: session.keptFs } : {}),
      ...(session.name !== null ? { name: session.name } : {}),
      createdAt: Date.now(),
    };
  }

  /** The idempotency-key journal of `session` (DIR/sessions/<id>.keys), remembering `capacity` keys. */
  journalOf(session: Session, capacity: number): KeyJournal | null {
    if (!isStorableSessionId(session.id)) return null;
    return new KeyJournal(join(this.dir.sessionsPath, `${session.id}.keys`), capacity, this.log);
  }

  /** The session ended for good: its record goes. */
  remove(id: string): void {
    void this.store.remove(id);
  }

  /**
   * Rebuilds the recorded sessions and their adopted processes into `state` (synchronously:
   * no client can connect in between). Keepers without a session are told to kill.
   */
  restore(state: RestoreTarget): void {
    const byId = new Map(this.records.map((r) => [r.id, r]));
    /** The spill directories of the processes adopted. */
    const spilled = new Set<string>();
    const sessions = new Map<string, Session>();
    for (const record of this.records) {
      const session = new Session(
        record.id,
        Buffer.from(record.credential, 'hex'),
        { ...state.limits, output: record.limits.output ?? state.limits.output },
        state.sessionHooks,
        new Set(record.extensions as ExtensionName[]),
      );
      // The keep its client was granted, within this server's limits (it asks again on its resume).
      if (state.keep && session.extensions.has('sessionKeep')) session.keepFor(grantKeep(record.limits.ttlMs, state.keep));
      session.backend = state.backend.openSession(session, (reason) => session.lost(reason));
      if (state.shares) session.joinShares(state.shares);
      state.sessions.set(session.id, session);
      state.monitor.sessionCreated(session, 'adopted');
      state.monitor.sessionDetached(session);
      // Its name goes with it: a client attaches to it by name after the restart as before.
      session.name = record.name ?? null;
      session.restoreDetached(record.nextHandle);
      session.markAdopted();
      if (record.fs) state.fsRegistration?.restore(session, record.fs);
      sessions.set(record.id, session);
    }
    for (const a of this.adopted) {
      const session = a.meta ? sessions.get(a.meta.session) : undefined;
      if (!a.meta || !session || !byId.has(a.meta.session)) {
        this.dismiss(a, 'belongs to no recorded session');
        continue;
      }
      // The record names each process's keeper socket: a keeper elsewhere claiming it (a stray
      // or planted dump) is not taken in place of the real one.
      const recorded = byId.get(a.meta.session)!.processes.find((p) => p.processId === a.meta!.process);
      if (recorded && recorded.socket !== basename(a.socketPath)) {
        this.dismiss(a, `claims process ${JSON.stringify(a.meta.process)} of session ${session.shortId}, which its record puts under keeper ${recorded.socket}`);
        continue;
      }
      if (session.processes.has(a.meta.process)) {
        this.dismiss(a, `claims process ${JSON.stringify(a.meta.process)} of session ${session.shortId}, adopted from another keeper already`);
        continue;
      }
      const handle = a.meta.handle;
      if (handle !== 0 && [...session.processes.values()].some((p) => p.handle === handle)) {
        this.dismiss(a, `claims handle ${a.meta.handle} of session ${session.shortId}, taken by another process already`);
        continue;
      }
      let proc: ManagedProcess;
      let spill: SpillFiles | undefined;
      try {
        spill = this.reopenSpill(session, a.socketPath, a.child.dump.droppedSeq ?? 0);
        proc = adoptProcess(
          {
            processId: a.meta.process,
            argv: a.meta.argv,
            cwd: '/',
            env: {},
            tty: a.meta.tty,
            pipeStdin: a.meta.stdin,
            limits: session.limits.output,
            clientAcks: session.clientAcks,
            memory: state.memory,
            handle: a.meta.handle,
            ...(spill ? { spill } : {}),
          },
          session,
          a.child,
          spill?.records(),
        );
        spilled.add(basename(a.socketPath, '.sock'));
      } catch (err) {
        spill?.close();
        // Its dump does not fit together (OutputLog.restore): that process is lost, the rest is not.
        this.dismiss(a, `could not be rebuilt (${(err as Error).message})`);
        this.lost.add(session.id, a.meta.process, `the process was lost in the server restart (its output could not be rebuilt: ${(err as Error).message})`);
        continue;
      }
      session.adoptProcess(proc);
      state.monitor.processStarted(session, proc, a.meta.argv);
      // It takes its room on this server as a start would (it runs whatever the caps say now).
      const admitted = state.capacity?.admit(a.meta.tty, true);
      if (admitted && 'ticket' in admitted) void proc.whenGone.then(admitted.ticket);
    }
    for (const record of this.records) {
      const session = sessions.get(record.id)!;
      // Lost at an earlier restart, or recorded but not adopted now (its keeper died while no
      // server ran): a resuming client is told.
      for (const [id, reason] of Object.entries(record.lost ?? {})) this.lost.add(session.id, id, reason);
      for (const p of record.processes) if (!session.processes.has(p.processId)) this.lost.add(session.id, p.processId, KEEPER_GONE);
      session.onExpired(() => this.lost.forget(session.id));
      this.save(session); // its process list as adopted (keepers that died are gone from it)
      const lost = this.lost.count(session.id);
      state.log(
        'info',
        `session ${session.shortId} restored from the state dir with ${session.processes.size} process(es)` +
          `${lost > 0 ? ` (${lost} lost in the restart)` : ''}; expires in ${session.limits.ttlMs} ms unless resumed`,
      );
    }
    this.sweepSpills(spilled, this.dismissed);
    this.adopted = [];
    this.records = [];
  }

  /** An adopted keeper this server cannot use: its tree is killed and it ends. */
  private dismiss(a: Adopted, why: string): void {
    this.dismissed.add(basename(a.socketPath, '.sock'));
    this.log('warn', `state dir: keeper ${basename(a.socketPath)} ${why}: its processes are killed`);
    a.child.child.killTree();
    a.child.child.kept?.release();
    // Drained without keeping anything: a keeper with output left to forward would wait for us.
    a.child.child.setReading(true);
    a.child.begin();
  }

  /** The server stops and keeps: every session's keepers are let go of, alive. */
  handOver(sessions: Iterable<Session>): void {
    for (const session of sessions) {
      this.save(session);
      session.handOver();
    }
  }

  /** Writes still pending are done, the lock is released. */
  async close(): Promise<void> {
    await this.store.flush();
    await this.dir.release();
  }
}

/** Runs `work` on every item, at most `limit` at once; resolves when all are done (`work` must not reject). */
async function forEachAtOnce<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
}
