/**
 * A session outlives its connections: it owns the processes, is attached to at most one
 * connection at a time, and once detached lives for the session TTL before it is removed and
 * every process it started is killed with all its descendants (no orphans).
 *
 * While attached it sends its processes' events over the connection, one per process in turn
 * (send-rotation.ts); connections may watch it read-only (session-watchers.ts).
 */
import { timingSafeEqual } from 'node:crypto';
import type { ExtensionName, SessionEndedNotification } from '../../protocol/index.js';
import type { SessionBackend, KeptFsRecord } from '../backend/index.js';
import type { OutputShares } from '../memory/index.js';
import type { ManagedProcess, OutputLimits, ProcessHost } from '../output/index.js';
import { HandleTable } from './session-handles.js';
import { ClosedRetention } from './closed-retention.js';
import { ProcessTrees } from './process-trees.js';
import { SendRotation, type EventSink } from './send-rotation.js';
import { SessionWatchers, type WatcherLink } from './session-watchers.js';
import { SessionTimers } from './session-timers.js';
import { ShareSeat } from './share-seat.js';

export type { WatcherLink } from './session-watchers.js';

/** What a session needs from the connection it is attached to: where its events go (send-rotation.ts), and more. */
export interface SessionLink extends EventSink {
  /** Ends the link: the session is gone underneath it (its back-end lost its work). */
  drop?(reason: string): void;
  /** Checks the link is still alive; drops it if it does not answer within `timeoutMs`. */
  probe(timeoutMs: number): void;
  /** Extension `attach`: another connection took its place as the writer (`take`); it watches `session` from now on, and is told. */
  writerTaken?(session: Session): void;
}

export interface SessionLimits {
  /** How long it outlives a drop: the session TTL, or what its client asked for and was granted (`sessionKeep`, session-keep.ts). */
  ttlMs: number;
  /**
   * Codex dialect: after a resume, how long output recorded while detached waits for the
   * client to read it back with `process/read` before it is sent as notifications.
   */
  resumeGraceMs: number;
  closedRetentionMs: number;
  output: OutputLimits;
  maxProcesses: number;
}

/** What a resuming client tells about its processes (`acks`): the last seq it delivered, by process id. */
export type DeliveredMap = Readonly<Record<string, number>>;

export class Session implements ProcessHost {
  readonly processes = new Map<string, ManagedProcess>();
  /** Process ids whose start is in flight (reserved so a duplicate is refused at once). */
  readonly starting = new Set<string>();
  /** With `fsResume`: its live missing-watch and open file handles, as its session record keeps them (fs/kept-fs.ts). */
  keptFs: KeptFsRecord | undefined;
  /** Extension `binaryOutput`: process by handle (null while its start is in flight). */
  private readonly handles = new HandleTable<ManagedProcess>();
  private _adopted = false;
  private link: SessionLink | null = null;
  /** Its processes' events, sent over `link` in turn once it answered initialize (send-rotation.ts). */
  private readonly sends = new SendRotation(() => this.link);
  /** The TTL once detached, and the Codex resume grace (session-timers.ts). */
  private readonly timers: SessionTimers;
  /** Closed processes stay readable for closedRetentionMs, then go (closed-retention.ts). */
  private readonly retention: ClosedRetention<ManagedProcess>;
  /** Its processes' trees, listed or outliving the list: they all die with the session (process-trees.ts). */
  private readonly trees = new ProcessTrees(this.processes);
  private expired = false;
  private readonly expiryListeners: Array<() => void> = [];
  /** Where its work is done (backend.ts): given when `initialize` creates it, closed when it expires. */
  backend!: SessionBackend;
  /** Its seat in the memory budget's fair shares (share-seat.ts). */
  private readonly share: ShareSeat;
  /** Extension `attach`: its name, unique among its token's live sessions (kept through restart adoption), or null. */
  name: string | null = null;
  /** Connections watching it read-only (extension `attach`, session-watchers.ts). */
  private readonly watcherLinks = new SessionWatchers();

  constructor(
    readonly id: string,
    /** sha256 of the bearer token that created it (empty when auth is off). */
    private readonly credential: Buffer,
    readonly limits: SessionLimits,
    private readonly hooks: {
      expired(session: Session): void;
      detached(session: Session): void;
      /** Its process list changed (a process removed): a state dir's record is rewritten. */
      processesChanged?(session: Session): void;
    },
    /** The extensions negotiated at creation (protocol/extensions.ts); fixed for the session's life. */
    readonly extensions: ReadonlySet<ExtensionName> = new Set(),
  ) {
    this.retention = new ClosedRetention(limits.closedRetentionMs, this);
    this.share = new ShareSeat(credential, this.processes);
    this.timers = new SessionTimers(
      limits,
      () => this.expire('expired'),
      () => {
        for (const proc of this.processes.values()) proc.releaseHold();
      },
    );
  }

  /** Takes its place in the budget's fair shares (as its owner's session): its children pause when it is over its share. */
  joinShares(shares: OutputShares): void {
    if (!this.expired) this.share.join(shares);
  }

  /** Why the memory budget holds its children back now, as `session/list` shows it; null while it does not. */
  get budgetHold(): string | null {
    return this.share.holdText;
  }

  /** Hex of the digest of the token that created it (the session record's `credential`). @internal */
  get credentialHex(): string {
    return this.credential.toString('hex');
  }

  /** The next handle it would give (the session record's `nextHandle`). @internal */
  get handleCursor(): number {
    return this.handles.cursor;
  }

  /**
   * Rebuilt by a successor server (restart adoption): its handle cursor as recorded, and the TTL of
   * a detached session running from now.
   * @internal
   */
  restoreDetached(nextHandle: number): void {
    this.handles.restoreCursor(nextHandle);
    this.timers.startTtl();
  }

  /** An adopted process joins the session under its id and handle (restart adoption). @internal */
  adoptProcess(proc: ManagedProcess): void {
    this.processes.set(proc.id, proc);
    if (proc.handle !== 0) this.handles.bind(proc.handle, proc);
    this.track(proc);
    if (proc.closed) this.retention.schedule(proc);
  }

  /**
   * The server stops and keeps its sessions (the restart hand-over): every keeper is let go of without
   * killing anything, for a successor to adopt; nothing of it runs here any more.
   * @internal
   */
  handOver(): void {
    // What other modules keep for it (open files) goes; its record and journal stay on disk.
    this.end((proc) => proc.handOver());
  }

  /** How an attacher is told which session it is about: its name, or the first 8 characters of its id. */
  get label(): string {
    return this.name ?? this.id.slice(0, 8);
  }

  /** `link` watches it read-only from now on (extension `attach`) until `unwatch`. */
  watch(link: WatcherLink): void {
    if (this.expired) link.sessionEnded({ reason: 'ended', processes: [] });
    else this.watcherLinks.add(link);
  }

  /** `link` no longer watches it (its connection closed). */
  unwatch(link: WatcherLink): void {
    this.watcherLinks.delete(link);
  }

  /** How many connections watch it. */
  get watchers(): number {
    return this.watcherLinks.size;
  }

  /** How many of its watchers hold `credential` (they count against that token's session cap). */
  watchersHolding(credential: Buffer): number {
    return this.watcherLinks.holding(credential);
  }

  /**
   * Another connection takes the writer's place (`attach` with `take`): the current one is
   * detached as by a drop (its unacknowledged output is unsent again, for the new writer) and
   * becomes a watcher (`writerTaken`); returns it, or null when none was attached.
   */
  releaseWriter(): SessionLink | null {
    const link = this.link;
    if (!link) return null;
    this.detach(link);
    link.writerTaken?.(this);
    return link;
  }

  /** Short form for logs: the id is the resume credential. */
  get shortId(): string {
    return `${this.id.slice(0, 8)}…`;
  }

  get isExpired(): boolean {
    return this.expired;
  }

  /** Rebuilt by this server from its predecessor's state dir (restart adoption); `session/list` and `tether ps` say so. */
  get adopted(): boolean {
    return this._adopted;
  }

  /** Marks it adopted (the adoption calls it once, after rebuilding it). */
  markAdopted(): void {
    this._adopted = true;
  }

  /** Which token created it, for an admin's `session/list`: a digest prefix, never the token. */
  get ownerTag(): string {
    return this.credential.length > 0 ? this.credential.subarray(0, 4).toString('hex') : 'none';
  }

  /** The client acknowledges what it consumed (extension `acks`). */
  get clientAcks(): boolean {
    return this.extensions.has('acks');
  }

  ownedBy(credential: Buffer): boolean {
    return credential.length === this.credential.length && timingSafeEqual(credential, this.credential);
  }

  /** Its back-end lost it: the session expires and its connection, if any, is dropped. */
  lost(reason: string): void {
    const link = this.link;
    this.expire();
    link?.drop?.(reason);
  }

  /** Its client asked to be kept this long after a drop, and was granted it (`sessionKeep`): the next detach waits this long. */
  keepFor(ms: number): void {
    this.limits.ttlMs = ms;
  }

  /** A resume was refused because we are attached: make sure the current link is not a dead one. */
  probeAttached(timeoutMs: number): void {
    this.link?.probe(timeoutMs);
  }

  /**
   * A connection takes the session (created or resumed). Nothing is sent until
   * `startSending` (called once the initialize answer is out, so it comes first).
   */
  attach(link: SessionLink, delivered?: DeliveredMap): void {
    const resumed = this.link === null && this.processes.size > 0;
    this.link = link;
    this.timers.stopTtl();
    // Closed processes kept while detached get their full readable window again.
    for (const proc of this.processes.values()) if (proc.closed) this.retention.schedule(proc);
    if (!resumed) return;
    for (const proc of this.processes.values()) proc.resumed(delivered && Object.hasOwn(delivered, proc.id) ? delivered[proc.id] : undefined);
    if (!this.clientAcks) {
      // The backlog is held until the client reads it back; one that never does gets it as
      // notifications after the grace.
      this.timers.startGrace();
    }
  }

  /** The attached connection answered initialize: send what is waiting, and everything from now on. */
  startSending(link: SessionLink): void {
    if (this.link === link) this.sends.start(this.processes.values());
  }

  detach(link: SessionLink): void {
    if (this.link !== link) return;
    this.link = null;
    this.sends.stop();
    this.timers.stopGrace();
    for (const proc of this.processes.values()) proc.detached();
    if (this.expired) return; // closed by its client: nothing to wait for
    this.timers.startTtl();
    this.hooks.detached(this);
  }

  /** Sends waiting events in turn until the connection's buffer is full (send-rotation.ts); called again once it drained. */
  pump(): void {
    this.sends.pump();
  }

  /** Whether events wait for the connection's buffer to drain. */
  get hasQueued(): boolean {
    return this.sends.hasQueued;
  }

  /** `process/ack` from the client (extension `acks`). Unknown ids are ignored (already forgotten). */
  acknowledge(processId: string, seq: number): void {
    this.processes.get(processId)?.acknowledge(seq);
  }

  /** A binary ack frame (extensions `acks` + `binaryOutput`). Unknown handles are ignored, like unknown ids. */
  acknowledgeHandle(handle: number, seq: number): void {
    this.handles.get(handle)?.acknowledge(seq);
  }

  /**
   * Reserves a handle for a process being started (extension `binaryOutput`): the one the
   * client asked for, or the next free one. Returns a refusal sentence when `requested` is in use.
   */
  claimHandle(requested: number | null | undefined): number | string {
    return this.handles.claim(requested);
  }

  /** The start of the process holding `handle` is settled: bind it, or (`proc` null: the start failed) free it. */
  bindHandle(handle: number, proc: ManagedProcess | null): void {
    this.handles.bind(handle, proc);
  }

  /** The client is done (`session/close`): the same as expiry, now. */
  close(): void {
    this.expire('closed');
  }

  /** Keeps `proc`'s process tree tied to the session until everything in it is gone. */
  track(proc: ManagedProcess): void {
    this.trees.track(proc);
  }

  /** Kills every process of the session, and everything they started, and forgets it. */
  expire(reason: SessionEndedNotification['reason'] = 'ended'): void {
    // What its watchers are told: each process as it stands before the end kills it.
    const processes = this.expired ? [] : this.watcherLinks.endingProcesses(this.processes.values());
    const ended = this.end((proc) => {
      proc.killTree();
      proc.release();
    });
    if (!ended) return;
    // Its watchers have nothing left to watch (a hand-over keeps them: the server's stop closes them).
    this.watcherLinks.ended({ reason, processes });
    this.hooks.expired(this);
  }

  /** Ends it once (false if it had ended): timers stopped, `each` process let go of, its shares and back-end closed, listeners told. */
  private end(each: (proc: ManagedProcess) => void): boolean {
    if (this.expired) return false;
    this.expired = true;
    this.timers.stop();
    this.retention.clear();
    this.sends.clear();
    for (const proc of this.trees.every) each(proc);
    this.share.close();
    this.backend?.close();
    for (const listener of this.expiryListeners.splice(0)) listener();
    return true;
  }

  /** Synchronous last resort (the server process is exiting): every process tree is told to die (kept ones only with `evenKept`). */
  killAllSync(evenKept = false): void {
    this.trees.killAllSync(evenKept);
  }

  /** Runs `listener` once when the session expires or is closed (for state other modules keep per session, e.g. open files). */
  onExpired(listener: () => void): void {
    if (this.expired) listener();
    else this.expiryListeners.push(listener);
  }

  /** Resolves when every process has closed and every process tree is gone (after `expire`), bounded by `timeoutMs`. */
  async waitAllClosed(timeoutMs: number): Promise<void> {
    await this.trees.waitAllClosed(timeoutMs);
  }

  get liveProcessCount(): number {
    let n = this.starting.size;
    for (const proc of this.processes.values()) if (!proc.closed) n++;
    return n;
  }

  // ---- ProcessHost ------------------------------------------------------------------------------

  get attached(): boolean {
    return this.link !== null;
  }

  get watched(): boolean {
    return this.watcherLinks.size > 0;
  }

  outputHeldChanged(delta: number): void {
    this.share.outputChanged(delta);
  }

  get outputHeldBack(): boolean | undefined {
    return this.share.heldBack;
  }

  /**
   * What its connection holds besides output changed by `delta` bytes: answers its client has
   * not read (the send buffer) and messages still being received count in its share too.
   */
  connectionHeldChanged(delta: number): void {
    this.share.otherChanged(delta);
  }

  /** Its fair share of the memory budget now, bytes (Infinity without shares). */
  get shareBytes(): number {
    return this.share.shareBytes;
  }

  /** The budget holds it back for holding its fair share or more (not merely because the budget is full). */
  get overShare(): boolean {
    return this.share.overShare;
  }

  /** Why an answer of about `bytes` is refused for this session now (the budget is pressed and it is past its share), or null. */
  answerRefusal(bytes: number): string | null {
    return this.share.answerRefusal(bytes);
  }

  /** Resolves once the memory budget no longer holds this session back (at once when it does not). */
  whenUnheld(): Promise<void> {
    return this.share.whenUnheld();
  }

  outputReady(proc: ManagedProcess): void {
    if (this.processes.get(proc.id) === proc) this.sends.ready(proc);
  }

  processClosed(proc: ManagedProcess): void {
    if (this.expired) return;
    this.retention.schedule(proc);
  }

  processDone(proc: ManagedProcess): void {
    // Nothing left to send; the process itself goes with the closed retention.
    this.sends.delete(proc);
  }

  /** Its closed retention ran out (closed-retention.ts): the process is forgotten. @internal */
  remove(proc: ManagedProcess): void {
    this.retention.cancel(proc);
    this.sends.delete(proc);
    if (this.processes.get(proc.id) === proc) this.processes.delete(proc.id);
    this.handles.release(proc.handle, proc);
    proc.release();
    this.hooks.processesChanged?.(this);
  }
}
