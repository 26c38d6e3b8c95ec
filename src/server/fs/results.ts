/**
 * Exactly-once answers for mutating fs requests (extension `fsResume`): the client sends an
 * `idempotencyKey` and the same key when it re-sends after a lost answer; the server runs the
 * request once and answers every copy with the first outcome (success or error), even while
 * the first copy is still running. Bounded: the oldest keys are forgotten first.
 */
import { createHash } from 'node:crypto';
import { ErrorCode, invalidParams, RpcError } from '../../protocol/index.js';

/** What a journal knows of one key: answered (with the answer), or started and never answered. */
export type JournaledOutcome =
  | { state: 'answered'; fingerprint: string | null; answer: unknown }
  | { state: 'unknown'; fingerprint: string | null };

/** Where keys outlive the server (a state dir's key journal, restart/key-journal.ts). */
export interface ResultJournal {
  /** Records that the operation of `key` is about to run. */
  started(key: string, fingerprint: string | null): void;
  /** Records the answer of `key` (JSON-serializable). */
  answered(key: string, answer: unknown): void;
  /** The keys on file, oldest first. */
  load(): Map<string, JournaledOutcome>;
  close(): void;
}

interface Remembered {
  fingerprint: string;
  outcome: Promise<unknown>;
}

export class ResultMemory {
  private readonly entries = new Map<string, Remembered>();

  /**
   * `journal` (a state dir, restart adoption): every key is written down before its operation runs
   * and its outcome before it is answered, so a successor server answers a re-sent key as the
   * first copy was answered, or "outcome unknown" when the server died while it ran.
   */
  constructor(
    private readonly capacity: number,
    private readonly journal: ResultJournal | null = null,
  ) {
    if (!journal) return;
    for (const [key, known] of journal.load()) {
      const outcome = known.state === 'answered' ? replay(known.answer) : Promise.reject(restartedError());
      outcome.catch(() => {});
      this.entries.set(key, { fingerprint: known.fingerprint ?? '', outcome });
    }
  }

  /** Runs `operation` once per key; a re-sent key gets the remembered outcome. `params` must be the request minus nothing that varies between copies. */
  run<T>(key: string, method: string, params: unknown, operation: () => Promise<T>): Promise<T> {
    const fingerprint = fingerprintOf(method, params);
    const known = this.entries.get(key);
    if (known) {
      if (known.fingerprint !== fingerprint) {
        return Promise.reject(
          invalidParams(`invalid params for ${method}: idempotencyKey: the key ${JSON.stringify(key)} was already used for a different request`),
        );
      }
      return known.outcome as Promise<T>;
    }
    const journal = this.journal;
    journal?.started(key, fingerprint);
    const outcome = journal
      ? operation().then(
          (result) => {
            journal.answered(key, { ok: result ?? null });
            return result;
          },
          (err: unknown) => {
            if (err instanceof RpcError) journal.answered(key, { err: err.toJSON() });
            throw err;
          },
        )
      : operation();
    outcome.catch(() => {}); // remembered, not unhandled
    this.entries.set(key, { fingerprint, outcome });
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
    return outcome;
  }

  get size(): number {
    return this.entries.size;
  }
}

/** A journaled answer as the first copy got it: its result, or its error. */
function replay(answer: unknown): Promise<unknown> {
  const { ok, err } = (answer ?? {}) as { ok?: unknown; err?: { code: number; message: string; data?: unknown } };
  if (err && typeof err.code === 'number') return Promise.reject(new RpcError(err.code, err.message, err.data));
  return Promise.resolve(ok);
}

/** A key whose operation was running when the server died: it may or may not have happened. */
function restartedError(): RpcError {
  return new RpcError(ErrorCode.InternalError, 'outcome unknown (the server restarted during this call)');
}

/** A digest of the request; long strings (file data) are hashed as they are, not through JSON.stringify (slow for megabytes). */
function fingerprintOf(method: string, params: unknown): string {
  const hash = createHash('sha256').update(method);
  for (const [key, value] of Object.entries(params as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1))) {
    hash.update(`\0${key}\0`).update(typeof value === 'string' ? `s${value}` : `j${JSON.stringify(value)}`);
  }
  return hash.digest('base64');
}
