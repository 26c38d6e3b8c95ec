/**
 * The reconnect engine of one logical client (docs/protocol.md, "How a client recovers"), apart from sockets and
 * from the protocol: connection generations, callers waiting for a usable connection, the
 * recovery loop (immediate first attempt, jittered backoff, one deadline counted in running
 * time, so that a stop or a sleep of the client does not use it up), and the single
 * failure that ends it all. What one recovery attempt does — open a socket, resume the
 * session, catch up — is the owner's `resume` function. Clock and randomness are
 * injectable, so the whole state machine is tested with fake timers
 * (test/unit/client/engine.test.ts).
 *
 * States: recovering (before the first connection, and after a drop) → connected → … , or
 * failed (for good: every waiter and the owner get the same `SessionLostError`), or closed
 * (the owner closed it: nothing failed; later callers still get a `SessionLostError`, reason
 * `closed`).
 *
 * What the server said as it closed the connection (a `CloseNotice`: it restarts or stops) changes the
 * drop: "stopped" fails at once (a `ServerStoppedError`: the processes are gone, nothing to
 * wait for), "restarting" recovers on the short restart schedule (`restartRetryDelayMs`,
 * first attempt at once) within the same recovery deadline, after a 'restarting' event.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import { reconnectDelayMs } from './backoff.js';
import { RunningClock } from './running-clock.js';
import { restartRetryDelayMs } from '../util/backoff.js';
import { sessionLostError, type SessionLostError, type SessionLostReason } from './errors.js';
import type { CloseNotice } from '../protocol/close-reasons.js';
import type { Logger } from '../util/logger.js';

export type EngineState = 'connected' | 'recovering' | 'failed' | 'closed';

/** The engine has ended (failed, or closed by its owner): it never connects again. */
export function isEnded(state: EngineState): boolean {
  return state === 'failed' || state === 'closed';
}

/** What the engine needs of a connection. */
export interface EngineConnection {
  readonly generation: number;
  readonly isOpen: boolean;
  /** Abrupt close (the link is considered dead). */
  destroy(reason: Error): void;
  /** Orderly close. */
  close(): void;
}

export interface StateChange {
  state: EngineState;
  previous: EngineState;
  /** Generation of the current (or last) connection. */
  generation: number;
  /** Recovery attempt: 1 on entering recovering; on connected/failed after a recovery, the attempts it took. */
  attempt: number;
  /** Why: the transport error that started a recovery, or the failure (none for a close by the owner). */
  reason?: string;
  error?: Error;
}

export interface RecoveredEvent {
  generation: number;
  /** Attempts it took (1 = the first, immediate one succeeded). */
  attempts: number;
  /** `now()` (performance.now by default) when the drop was noticed, and when the catch-up finished. */
  lostAt: number;
  recoveredAt: number;
  /** recoveredAt - lostAt: the time the session was unusable. */
  downtimeMs: number;
  reason: string;
}

export interface ReconnectEngineOptions<C extends EngineConnection> {
  /**
   * How long a recovery may take, from the drop, before the session counts as lost: running
   * time (running-clock.ts), so a process stopped or a laptop asleep meanwhile goes on
   * recovering when it wakes.
   */
  recoveryDeadlineMs: number;
  /**
   * One recovery attempt: a new connection with the session resumed and caught up. It must
   * give up (and destroy what it opened) when `signal` aborts: the deadline, or a failure.
   */
  resume(attempt: number, remainingMs: number, signal: AbortSignal): Promise<C>;
  /** A failure no retry can fix (auth refused, session unknown): its reason. Undefined: retry. */
  fatal(error: unknown): SessionLostReason | undefined;
  /** For the failure's message (shortened there: it is a credential). */
  sessionId(): string;
  /** Clock for timestamps, and under the running clock of deadlines (performance.now). */
  now?: () => number;
  /** Randomness for the backoff jitter (Math.random). */
  random?: () => number;
  /** The wait before recovery attempt `attempt` after a plain drop (reconnectDelayMs). */
  delayMs?: (attempt: number, random: () => number) => number;
  logger?: Logger;
}

interface Waiter<C> {
  resolve: (connection: C) => void;
  reject: (error: Error) => void;
}

export interface ReconnectEngineEvents {
  state: [change: StateChange];
  recovered: [event: RecoveredEvent];
  retry: [event: { attempt: number; error: Error }];
  /** The server closed the connection saying it restarts and keeps the session for `keptMs`; a recovery follows. */
  restarting: [event: RestartingEvent];
}

export interface RestartingEvent {
  /** The generation of the connection the server closed. */
  generation: number;
  /** How long the server said it keeps the session. */
  keptMs: number;
}

export class ReconnectEngine<C extends EngineConnection> extends EventEmitter<ReconnectEngineEvents> {
  private _state: EngineState = 'recovering';
  private _generation = 0;
  private _current: C | null = null;
  private _failure: SessionLostError | null = null;
  private waiters: Waiter<C>[] = [];
  /** Cut every wait short (a failure or close while sleeping or attempting). */
  private stop = new AbortController();
  /** The recovery attempt in progress (for state events). */
  private attempt = 0;
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(private readonly options: ReconnectEngineOptions<C>) {
    super();
    this.now = options.now ?? (() => performance.now());
    this.random = options.random ?? Math.random;
  }

  get state(): EngineState {
    return this._state;
  }

  get generation(): number {
    return this._generation;
  }

  /** The connection in use (the last one, once failed). */
  get current(): C | null {
    return this._current;
  }

  /** Set once failed: the error every caller gets. */
  get failure(): SessionLostError | null {
    return this._failure;
  }

  /** Aborts when the engine fails (for waits of the owner that must end with it). */
  get stopped(): AbortSignal {
    return this.stop.signal;
  }

  /** The first connection is up (the session was created on it): connected, without events. */
  start(connection: C): void {
    this._current = connection;
    this._generation = connection.generation;
    this._state = 'connected';
  }

  /**
   * A connection died. Only the current generation in the connected state starts a
   * recovery: a candidate that dies during recovery fails its attempt by itself, and an old
   * socket's late close changes nothing.
   */
  lost(connection: C, reason: Error, notice: CloseNotice | null = null): void {
    if (connection !== this._current || this._state !== 'connected') return;
    this.log('info', `connection ${connection.generation} lost: ${reason.message}`);
    if (notice?.kind === 'stopped') {
      // The server ended the session with itself: no reconnect can find it again.
      this.fail('stopped', reason);
      return;
    }
    this._state = 'recovering';
    const restarting = notice?.kind === 'restarting';
    if (restarting) this.emit('restarting', { generation: connection.generation, keptMs: notice.keptMs });
    this.emitState('connected', 1, reason);
    void this.recover(reason, this.now(), restarting ? restartRetryDelayMs : (this.options.delayMs ?? reconnectDelayMs));
  }

  /** The current connection, waiting while recovering; rejects once failed. */
  ready(): Promise<C> {
    if (this._failure) return Promise.reject(this._failure);
    if (this._state === 'connected' && this._current?.isOpen) return Promise.resolve(this._current);
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /**
   * Ends it all: one `SessionLostError` for every waiter (and the owner, through the 'state'
   * event). Reason `closed` (the owner closed the client) ends in state `closed`, logged at
   * debug and with no reason in the state event: a deliberate close is not a failure.
   */
  fail(reason: SessionLostReason, cause?: unknown): SessionLostError {
    if (this._failure) return this._failure;
    const previous = this._state;
    const error = sessionLostError(reason, { cause, sessionId: this.options.sessionId() });
    this._failure = error;
    this._state = reason === 'closed' ? 'closed' : 'failed';
    this.stop.abort(error);
    if (reason !== 'closed') this._current?.destroy(error);
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter.reject(error);
    this.log(reason === 'closed' ? 'debug' : 'error', error.message);
    this.emitState(previous, previous === 'recovering' ? this.attempt : 0, reason === 'closed' ? undefined : error);
    return error;
  }

  /** A sleep that a failure cuts short. */
  sleep(ms: number): Promise<void> {
    const signal = this.stop.signal;
    if (signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  private async recover(cause: Error, lostAt: number, delayMs: (attempt: number, random: () => number) => number): Promise<void> {
    // Ticks while the recovery lasts; the deadline is counted on it (running-clock.ts).
    const clock = new RunningClock({ now: this.now });
    try {
      await this.recoverOn(clock, cause, lostAt, delayMs);
    } finally {
      clock.stop();
    }
  }

  /** The recovery loop; its deadline is `clock`'s running time. */
  private async recoverOn(clock: RunningClock, cause: Error, lostAt: number, delayMs: (attempt: number, random: () => number) => number): Promise<void> {
    const deadline = this.options.recoveryDeadlineMs;
    let lastError: Error = cause;
    for (let attempt = 1; this._state === 'recovering'; attempt++) {
      this.attempt = attempt;
      const wait = delayMs(attempt, this.random);
      // A wait that would pass the deadline ends at it. A stop meanwhile ends the (plain) sleep
      // early in running time: then one more attempt follows, within what is left.
      const wanted = Math.min(wait, Math.max(0, deadline - clock.elapsed()));
      if (wanted > 0) await this.sleep(wanted);
      if (this._state !== 'recovering') return;
      const remaining = deadline - clock.elapsed();
      if (remaining < 1) {
        this.fail('deadline', lastError);
        return;
      }
      // The attempt may not outlive the deadline, whatever the link does.
      const attemptAbort = new AbortController();
      const onStop = () => attemptAbort.abort(this.stop.signal.reason);
      this.stop.signal.addEventListener('abort', onStop, { once: true });
      const timer = clock.after(remaining, () => attemptAbort.abort(new Error('recovery deadline reached')));
      try {
        const connection = await this.options.resume(attempt, remaining, attemptAbort.signal);
        if (this._state !== 'recovering') {
          connection.close();
          return;
        }
        this.becomeConnected(connection, attempt, lostAt, cause);
        return;
      } catch (err) {
        if (this._state !== 'recovering') return;
        const fatal = this.options.fatal(err);
        if (fatal) {
          this.fail(fatal, err);
          return;
        }
        lastError = err as Error;
        this.log('debug', `recovery attempt ${attempt} failed: ${(err as Error).message}`);
        this.emit('retry', { attempt, error: err as Error });
      } finally {
        timer.cancel();
        this.stop.signal.removeEventListener('abort', onStop);
      }
    }
  }

  private becomeConnected(connection: C, attempts: number, lostAt: number, cause: Error): void {
    const old = this._current;
    this._current = connection;
    this._generation = connection.generation;
    this._state = 'connected';
    if (old && old !== connection) old.destroy(new Error('replaced by a newer connection'));
    this.emitState('recovering', attempts);
    const recoveredAt = this.now();
    const event: RecoveredEvent = {
      generation: connection.generation,
      attempts,
      lostAt,
      recoveredAt,
      downtimeMs: recoveredAt - lostAt,
      reason: cause.message,
    };
    this.log('info', `session resumed on connection ${connection.generation} after ${Math.round(event.downtimeMs)} ms (${attempts} attempt(s))`);
    this.emit('recovered', event);
    const waiters = this.waiters;
    this.waiters = [];
    for (const waiter of waiters) waiter.resolve(connection);
  }

  private emitState(previous: EngineState, attempt: number, reason?: Error): void {
    this.emit('state', {
      state: this._state,
      previous,
      generation: this._generation,
      attempt,
      reason: reason?.message,
      error: reason,
    });
  }

  private log(level: 'debug' | 'info' | 'warn' | 'error', message: string): void {
    this.options.logger?.(level, message);
  }
}
