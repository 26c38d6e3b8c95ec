/**
 * What the server did, for operators: counts for `/metrics`, what `session/list` shows of
 * each session and process (client name, argv, age, bytes in), and the audit line every
 * process leaves at info level when it ends. It watches sessions and processes from the
 * outside (hooks called by the methods and the server; `whenClosed` of each process), so
 * the process and session code keep their one job.
 */
import { performance } from 'node:perf_hooks';
import { listedArgv } from './listed-argv.js';
import type { ManagedProcess } from '../output/index.js';
import type { Session } from './session.js';
import type { Logger } from '../../util/logger.js';

export interface MonitorOptions {
  /** Put the whole argv in audit lines (off: only argv[0]; arguments can hold secrets). */
  auditArgv?: boolean;
}

export interface SessionFacts {
  clientName: string;
  /** Epoch ms. */
  createdAt: number;
  /** Epoch ms of the last detach while detached; null while attached. */
  detachedAt: number | null;
}

export interface ProcessFacts {
  session: Session;
  proc: ManagedProcess;
  /** The beginning of its argv (listed-argv.ts): megabytes of arguments are not kept. */
  argv: readonly string[];
  /** argv was cut. */
  argvTruncated: boolean;
  /** Epoch ms. */
  startedAt: number;
  /** performance.now() at start, for durations that ignore clock changes. */
  readonly started: number;
}

/** Monotonic totals since the server started. */
export interface MonitorCounters {
  sessionsCreated: number;
  sessionResumes: number;
  sessionsExpired: number;
  sessionsClosed: number;
  processesStarted: number;
  processStartFailures: number;
  processesEnded: number;
}

/**
 * Why a new session or process was refused: --max-sessions, --max-sessions-per-token, the
 * memory budget (for a session, for a process), the process or pty caps.
 */
export type RefusalReason = 'sessions' | 'sessionsPerToken' | 'memoryBudget' | 'processMemoryBudget' | 'processCapacity';

/** What every process ever started adds up to (live ones as of now). */
export interface OutputTotals {
  outputBytes: number;
  inputBytes: number;
  evictedBytes: number;
  pausedMs: number;
  retainedBytes: number;
  pausedProcesses: number;
  /** Paused because their output past the window cannot go to disk: the quota, a full filesystem. */
  pausedDiskQuota: number;
  pausedDiskFull: number;
  /** Unacknowledged output on disk (the spills of live processes). */
  spilledBytes: number;
}

/** A logfmt value: bare when it is one plain word, JSON-quoted otherwise (no newline can forge a line). */
export function logfmtValue(value: string | number): string {
  if (typeof value === 'number') return String(value);
  return /^[\w.:/@+,=-]+$/.test(value) && !value.includes('=') ? value : JSON.stringify(value);
}

const CLEANUP_EVERY = 256;

export class ServerMonitor {
  readonly counters: MonitorCounters = {
    sessionsCreated: 0,
    sessionResumes: 0,
    sessionsExpired: 0,
    sessionsClosed: 0,
    processesStarted: 0,
    processStartFailures: 0,
    processesEnded: 0,
  };
  /** Refusals of new sessions and processes, by reason (monotonic). */
  readonly refusals: Record<RefusalReason, number> = { sessions: 0, sessionsPerToken: 0, memoryBudget: 0, processMemoryBudget: 0, processCapacity: 0 };
  private readonly sessions = new WeakMap<Session, SessionFacts>();
  private readonly closing = new WeakSet<Session>();
  /** Every process that may still be listed; gone ones are folded into `folded`. */
  private readonly processes = new Map<ManagedProcess, ProcessFacts>();
  private readonly folded = { outputBytes: 0, inputBytes: 0, evictedBytes: 0, pausedMs: 0 };
  private sinceCleanup = 0;

  constructor(
    private readonly log: Logger,
    private readonly options: MonitorOptions = {},
  ) {}

  sessionCreated(session: Session, clientName: string): void {
    this.counters.sessionsCreated++;
    this.sessions.set(session, { clientName, createdAt: Date.now(), detachedAt: null });
  }

  /** Returns how long the session was detached, in ms (null if unknown). */
  sessionResumed(session: Session, clientName: string): number | null {
    this.counters.sessionResumes++;
    const facts = this.sessions.get(session);
    const detachedMs = facts?.detachedAt != null ? Date.now() - facts.detachedAt : null;
    if (facts) Object.assign(facts, { clientName, detachedAt: null });
    return detachedMs;
  }

  sessionDetached(session: Session): void {
    const facts = this.sessions.get(session);
    if (facts) facts.detachedAt = Date.now();
  }

  /** Called before `session.close()` on `session/close`: its end is the client's doing. */
  sessionClosing(session: Session): void {
    this.closing.add(session);
  }

  sessionEnded(session: Session): void {
    if (this.closing.has(session)) this.counters.sessionsClosed++;
    else this.counters.sessionsExpired++;
  }

  /** A new session or process was refused (the caller got the reason as its error). */
  refused(reason: RefusalReason): void {
    this.refusals[reason]++;
  }

  sessionFacts(session: Session): SessionFacts | undefined {
    return this.sessions.get(session);
  }

  processStarted(session: Session, proc: ManagedProcess, argv: readonly string[]): void {
    this.counters.processesStarted++;
    const kept = listedArgv(argv);
    const facts: ProcessFacts = { session, proc, argv: kept.argv, argvTruncated: kept.truncated, startedAt: Date.now(), started: performance.now() };
    this.processes.set(proc, facts);
    void proc.whenClosed.then(() => this.processEnded(facts));
    if (++this.sinceCleanup >= CLEANUP_EVERY) this.cleanup();
  }

  processStartFailed(session: Session, processId: string, argv: readonly string[], error: string): void {
    this.counters.processStartFailures++;
    this.log('info', `audit process start failed: ${this.describe(session, processId, listedArgv(argv).argv)} error=${logfmtValue(error)}`);
  }

  processFacts(proc: ManagedProcess): ProcessFacts | undefined {
    return this.processes.get(proc);
  }

  /** Sums over every process so far; forgets (folds in) the ones no session holds any more. */
  totals(): OutputTotals {
    this.cleanup();
    const totals: OutputTotals = { ...this.folded, retainedBytes: 0, pausedProcesses: 0, pausedDiskQuota: 0, pausedDiskFull: 0, spilledBytes: 0 };
    for (const facts of this.processes.values()) {
      const { proc } = facts;
      totals.outputBytes += proc.bytesRead;
      totals.inputBytes += proc.bytesWritten;
      totals.evictedBytes += proc.bytesRead - proc.retained;
      totals.pausedMs += proc.pausedMs;
      totals.retainedBytes += proc.retained;
      if (proc.isPaused) totals.pausedProcesses++;
      const reason = proc.pauseReason;
      if (reason === 'output-disk-quota') totals.pausedDiskQuota++;
      else if (reason === 'output-disk-full') totals.pausedDiskFull++;
      totals.spilledBytes += proc.spilled;
    }
    return totals;
  }

  private processEnded(facts: ProcessFacts): void {
    this.counters.processesEnded++;
    const { proc } = facts;
    const duration = (performance.now() - facts.started) / 1000;
    this.log(
      'info',
      `audit process ended: ${this.describe(facts.session, proc.id, facts.argv)} pid=${proc.pid} exit=${proc.exitCode ?? 'none'} ` +
        `duration=${duration.toFixed(3)}s out_bytes=${proc.bytesRead} in_bytes=${proc.bytesWritten} paused=${(proc.pausedMs / 1000).toFixed(3)}s`,
    );
  }

  /** session, process id, argv[0] (all of argv only when asked): never the environment. */
  private describe(session: Session, processId: string, argv: readonly string[]): string {
    const program = `argv0=${logfmtValue(argv[0] ?? '')}`;
    const all = this.options.auditArgv ? ` argv=${JSON.stringify(argv)}` : '';
    return `session=${session.id.slice(0, 8)} process=${logfmtValue(processId)} ${program}${all}`;
  }

  /** A process no session can reach any more is done changing: fold its numbers in and forget it. */
  private cleanup(): void {
    this.sinceCleanup = 0;
    for (const [proc, facts] of this.processes) {
      const reachable = !facts.session.isExpired && facts.session.processes.get(proc.id) === proc;
      if (reachable || !proc.closed) continue;
      this.folded.outputBytes += proc.bytesRead;
      this.folded.inputBytes += proc.bytesWritten;
      this.folded.evictedBytes += proc.bytesRead - proc.retained;
      this.folded.pausedMs += proc.pausedMs;
      this.processes.delete(proc);
    }
  }
}
