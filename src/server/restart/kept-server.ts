/**
 * A server with a state dir (restart adoption): its processes run under kept keepers that outlive
 * it, its sessions are recorded there, and a successor adopts both.
 *
 * - At start: the state dir is opened (checked and locked: a refusal stops the start) before
 *   the server binds; once it listens (answering 503 with what it waits for meanwhile,
 *   starting-gate.ts), `adoptAll` reads the session records (a bad one is set aside in
 *   DIR/quarantine/ and costs only its session) and adopts every keeper socket in `k/` at
 *   once, each within ADOPT_TIMEOUT_MS (keeper-adoption.ts: one that refuses or does not
 *   answer in time is left to its own adopt timer, with a log line; anything in `k/` that is
 *   no socket is skipped).
 *   `restore` (once the server exists) rebuilds each recorded session, detached with a fresh
 *   TTL, around the processes of its keepers; a keeper whose session has no record is told to
 *   kill its tree. A start that fails after adopting hands every keeper back alive
 *   (`handBack`) and releases the lock.
 * - While serving: every spawn is kept (`keepOptions`: its socket and the meta a successor
 *   rebuilds the process from, kept-meta.ts), its output past the window spills under DIR/spill
 *   (kept-spills.ts), and each session's record follows its changes (`save`, `remove`).
 * - At a kept stop (`handOver`): the keepers are let go of without killing anything.
 */
import { randomBytes } from 'node:crypto';
import { renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { KeyJournal } from './key-journal.js';
import { KEEPER_GONE, LostProcesses } from './lost-processes.js';
import type { ExtensionName } from '../../protocol/index.js';
import type { Logger } from '../../util/logger.js';
import type { KeepOptions, ServerBackend } from '../backend/index.js';
import type { FsRegistration } from '../fs/index.js';
import type { ProcessCapacity, OutputShares, MemoryBudget } from '../memory/index.js';
import { grantKeep, type KeepLimits, type ServerMonitor, Session, type SessionLimits } from '../session/index.js';
import type { ManagedProcess, OutputLimits, OutputSpill } from '../output/index.js';
import { adoptProcess } from './process-kept.js';
import { isStorableSessionId, serializeRecord, SessionStore, type SessionRecord } from './session-store.js';
import { openStateDir, type StateDir } from './state-dir.js';
import type { DiskLimits } from './disk-quota.js';
import type { SpillFiles } from './spill-files.js';
import { keeperCapBytes, keptMeta } from './kept-meta.js';
import { ADOPT_TIMEOUT_MS, adoptKeepers, type Adopted } from './keeper-adoption.js';
import { KeptSpills } from './kept-spills.js';

export { parseMeta, type KeptMeta } from './kept-meta.js';
export { ADOPT_TIMEOUT_MS } from './keeper-adoption.js';

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
  /** Where kept processes spill, within the disk quota (kept-spills.ts). */
  private readonly spills: KeptSpills;

  private constructor(
    readonly dir: StateDir,
    private readonly store: SessionStore,
    readonly adoptWithinMs: number,
    private readonly log: Logger,
    private readonly output: OutputLimits,
    disk: DiskLimits | undefined,
  ) {
    this.spills = new KeptSpills(dir.path, dir.keepersPath, disk);
  }

  /** The disk the spills share (output beyond the window goes to disk), or null. */
  get disk(): KeptSpills['disk'] {
    return this.spills.disk;
  }

  /** Where a new kept process's output past its window goes: its own directory, within the quota. */
  spillFor(session: Session, keep: KeepOptions): OutputSpill | undefined {
    return this.spills.spillFor(session, keep);
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
    const adopted = await adoptKeepers(sockets, (name) => limitsOf.get(name) ?? this.output, log, (left) => {
      this.waiting = `adopting ${left} of ${sockets.length} kept process(es) from the state dir (each within ${ADOPT_TIMEOUT_MS / 1000} s)`;
    });
    this.adopted = adopted;
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
    return {
      path: this.dir.newKeeperSocketPath(),
      meta: Buffer.from(JSON.stringify(keptMeta(session.id, p))),
      adoptMs: this.adoptWithinMs,
      capBytes: keeperCapBytes(limits),
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
      ...(proc.keepLastBytes !== undefined ? { keepLastBytes: proc.keepLastBytes } : {}),
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
        spill = this.spills.reopen(session, a.socketPath, a.child.dump.droppedSeq ?? 0);
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
            // `--keep-last` as recorded: it goes on dropping its oldest output, never pausing.
            ...(recorded?.keepLastBytes !== undefined ? { keepLastBytes: recorded.keepLastBytes } : {}),
          },
          session,
          a.child,
          spill?.records(),
          spill?.gaps(),
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
    this.spills.sweep(spilled, this.dismissed);
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
