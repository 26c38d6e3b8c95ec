/**
 * A session outlives its connections: it owns the processes, is attached to at most one
 * connection at a time, and once detached lives for the session TTL before it is removed and
 * every process it started is killed with all its descendants (no orphans).
 */
import { timingSafeEqual } from 'node:crypto';
import type { ExtensionName, OutputStream } from '../protocol/index.js';
import type { ManagedProcess, ProcessHost } from './process.js';
import { settleWithin } from '../util/timeouts.js';

/** What a session needs from the connection it is attached to. */
export interface SessionLink {
  sendOutput(processId: string, seq: number, stream: OutputStream, chunk: string, onWritten: (ok: boolean) => void): boolean;
  sendNotification(method: string, params: object): void;
  readonly backpressured: boolean;
  /** Checks the link is still alive; drops it if it does not answer within `timeoutMs`. */
  probe(timeoutMs: number): void;
}

export interface SessionLimits {
  ttlMs: number;
  /** After a resume, how long output recorded while detached waits to be read back before it may be evicted. */
  resumeGraceMs: number;
  closedRetentionMs: number;
  outputRetentionBytes: number;
  maxProcesses: number;
}

export class Session implements ProcessHost {
  readonly processes = new Map<string, ManagedProcess>();
  /** Process ids whose start is in flight (reserved so a duplicate is refused at once). */
  readonly starting = new Set<string>();
  private link: SessionLink | null = null;
  private ttlTimer: NodeJS.Timeout | null = null;
  private graceTimer: NodeJS.Timeout | null = null;
  private removalTimers = new Map<ManagedProcess, NodeJS.Timeout>();
  /**
   * Processes whose keeper still runs — the command, or something it started that outlived
   * it (a daemon, a background job) — whether or not they are still listed in `processes`:
   * they all die with the session.
   */
  private readonly kept = new Set<ManagedProcess>();
  private expired = false;
  private readonly expiryListeners: Array<() => void> = [];

  constructor(
    readonly id: string,
    /** sha256 of the bearer token that created it (empty when auth is off). */
    private readonly credential: Buffer,
    readonly limits: SessionLimits,
    private readonly hooks: { expired(session: Session): void; detached(session: Session): void },
    /** The extensions negotiated at creation (protocol/extensions.ts); fixed for the session's life. */
    readonly extensions: ReadonlySet<ExtensionName> = new Set(),
  ) {}

  /** Short form for logs: the id is the resume credential. */
  get shortId(): string {
    return `${this.id.slice(0, 8)}…`;
  }

  get attached(): boolean {
    return this.link !== null;
  }

  get isExpired(): boolean {
    return this.expired;
  }

  /** Which token created it, for an admin's `session/list`: a digest prefix, never the token. */
  get ownerTag(): string {
    return this.credential.length > 0 ? this.credential.subarray(0, 4).toString('hex') : 'none';
  }

  ownedBy(credential: Buffer): boolean {
    return credential.length === this.credential.length && timingSafeEqual(credential, this.credential);
  }

  get backpressured(): boolean {
    return this.link?.backpressured ?? false;
  }

  /** A resume was refused because we are attached: make sure the current link is not a dead one. */
  probeAttached(timeoutMs: number): void {
    this.link?.probe(timeoutMs);
  }

  attach(link: SessionLink): void {
    this.link = link;
    if (this.ttlTimer) {
      clearTimeout(this.ttlTimer);
      this.ttlTimer = null;
    }
    // Closed processes kept while detached get their full readable window again.
    for (const proc of this.processes.values()) if (proc.closed) this.scheduleRemoval(proc);
    this.flowChanged();
    // The backlog recorded while detached stays protected (its children paused) until the
    // client reads it back — or, for a client that never does, until the grace runs out.
    this.graceTimer = setTimeout(() => {
      this.graceTimer = null;
      for (const proc of this.processes.values()) proc.releaseBacklog();
    }, this.limits.resumeGraceMs);
    this.graceTimer.unref?.();
  }

  detach(link: SessionLink): void {
    if (this.link !== link) return;
    this.link = null;
    if (this.expired) return; // closed by its client: nothing to wait for
    if (this.graceTimer) {
      clearTimeout(this.graceTimer);
      this.graceTimer = null;
    }
    this.ttlTimer = setTimeout(() => this.expire(), this.limits.ttlMs);
    this.ttlTimer.unref?.();
    this.flowChanged();
    this.hooks.detached(this);
  }

  /** Backpressure or attachment changed: every process re-evaluates whether to read its pipes. */
  flowChanged(): void {
    for (const proc of this.processes.values()) proc.updateFlow();
  }

  /** The client is done (`session/close`): the same as expiry, now. */
  close(): void {
    this.expire();
  }

  /** Keeps `proc`'s process tree tied to the session until everything in it is gone. */
  track(proc: ManagedProcess): void {
    if (!proc.keeperAlive) return;
    this.kept.add(proc);
    void proc.whenGone.then(() => this.kept.delete(proc));
  }

  private get everyProcess(): Set<ManagedProcess> {
    return new Set([...this.processes.values(), ...this.kept]);
  }

  /** Kills every process of the session, and everything they started, and forgets it. */
  expire(): void {
    if (this.expired) return;
    this.expired = true;
    if (this.ttlTimer) clearTimeout(this.ttlTimer);
    if (this.graceTimer) clearTimeout(this.graceTimer);
    for (const timer of this.removalTimers.values()) clearTimeout(timer);
    this.removalTimers.clear();
    for (const proc of this.everyProcess) {
      proc.killTree();
      proc.release();
    }
    for (const listener of this.expiryListeners.splice(0)) listener();
    this.hooks.expired(this);
  }

  /** Synchronous last resort (the server process is exiting): every process tree is told to die. */
  killAllSync(): void {
    for (const proc of this.everyProcess) proc.killTreeSync();
  }

  /** Runs `listener` once when the session expires or is closed (for state other modules keep per session, e.g. open files). */
  onExpired(listener: () => void): void {
    if (this.expired) listener();
    else this.expiryListeners.push(listener);
  }

  /** Resolves when every process has closed and every process tree is gone (after `expire`), bounded by `timeoutMs`. */
  async waitAllClosed(timeoutMs: number): Promise<void> {
    await settleWithin(Promise.all([...this.everyProcess].map((p) => Promise.all([p.whenClosed, p.whenGone]))), timeoutMs);
  }

  get liveProcessCount(): number {
    let n = this.starting.size;
    for (const proc of this.processes.values()) if (!proc.closed) n++;
    return n;
  }

  // ProcessHost
  sendOutput(processId: string, seq: number, stream: OutputStream, chunk: string, onWritten: (ok: boolean) => void): boolean {
    return this.link ? this.link.sendOutput(processId, seq, stream, chunk, onWritten) : false;
  }

  sendNotification(method: string, params: object): void {
    this.link?.sendNotification(method, params);
  }

  processClosed(proc: ManagedProcess): void {
    if (this.expired) return;
    this.scheduleRemoval(proc);
  }

  /** A closed process stays readable for closedRetentionMs — counted only while a client is attached. */
  private scheduleRemoval(proc: ManagedProcess): void {
    const previous = this.removalTimers.get(proc);
    if (previous) clearTimeout(previous);
    const timer = setTimeout(() => {
      this.removalTimers.delete(proc);
      if (!this.link) return; // detached: keep it for the returning client; re-armed on attach
      if (this.processes.get(proc.id) === proc) this.processes.delete(proc.id);
      proc.release();
    }, this.limits.closedRetentionMs);
    timer.unref?.();
    this.removalTimers.set(proc, timer);
  }
}
