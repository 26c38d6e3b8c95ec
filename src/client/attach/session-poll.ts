/**
 * A watcher's look at processes started after it attached (extension `attach`): it polls
 * `session/watch` (the session's processes now) while attached. `newProcesses` decides which
 * of a snapshot's processes it had not seen (pure); `SessionPoller` is the schedule: one poll
 * in flight at most, the next `SESSION_POLL_MS` after the last one answered, none once
 * stopped (an answer that comes after `stop()` is dropped). Timers only, no sockets: the
 * request itself is the host's (which re-sends through drops, as every request).
 */
import type { AttachedProcess } from './attach-wire.js';

/** How long a watcher waits between two `session/watch` polls (after an answer: never two in flight). */
export const SESSION_POLL_MS = 500;

/**
 * The processes of `snapshot` whose ids are not in `known` (in the server's order, each id
 * once), and the ids to know from now on: the snapshot's. An id the server no longer lists
 * (it forgot the closed process) is let go, so `known` stays bounded by what the server
 * holds, and an id a writer uses again after that is a new process.
 */
export function newProcesses(known: ReadonlySet<string>, snapshot: readonly AttachedProcess[]): { added: AttachedProcess[]; known: Set<string> } {
  const next = new Set<string>();
  const added: AttachedProcess[] = [];
  for (const p of snapshot) {
    if (typeof p?.processId !== 'string' || next.has(p.processId)) continue;
    next.add(p.processId);
    if (!known.has(p.processId)) added.push(p);
  }
  return { added, known: next };
}

/** What a `SessionPoller` polls with and tells. */
export interface SessionPollHost {
  /** One `session/watch`: the session's processes now. */
  poll(): Promise<AttachedProcess[]>;
  /** A poll's answer (never after `stop()`). */
  answered(processes: AttachedProcess[]): void;
  /** A poll failed: true to poll on at the next tick, false to stop (the session is gone, the server cannot). */
  failed(error: unknown): boolean;
}

export class SessionPoller {
  #timer: ReturnType<typeof setTimeout> | null = null;
  #inFlight = false;
  #stopped = false;

  constructor(
    private readonly host: SessionPollHost,
    private readonly intervalMs = SESSION_POLL_MS,
  ) {}

  /** Polls from `intervalMs` from now on, until `stop()`. */
  start(): void {
    if (this.#stopped || this.#timer || this.#inFlight) return;
    this.#schedule();
  }

  /** No poll after this one; an answer still on its way is dropped. */
  stop(): void {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }

  /** Polling (started, not stopped). */
  get running(): boolean {
    return !this.#stopped && (this.#timer !== null || this.#inFlight);
  }

  /** A poll waiting for its answer. */
  get inFlight(): boolean {
    return this.#inFlight;
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => void this.#tick(), this.intervalMs);
    // The client's socket is what keeps a program alive, not its watcher's schedule.
    this.#timer.unref?.();
  }

  async #tick(): Promise<void> {
    this.#timer = null;
    if (this.#stopped || this.#inFlight) return;
    this.#inFlight = true;
    let goOn = true;
    try {
      const processes = await this.host.poll();
      if (!this.#stopped) this.host.answered(Array.isArray(processes) ? processes : []);
    } catch (err) {
      if (!this.#stopped) goOn = this.host.failed(err);
    } finally {
      this.#inFlight = false;
    }
    if (goOn) this.#schedule();
    else this.stop();
  }
}
