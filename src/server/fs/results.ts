/**
 * Exactly-once answers for mutating fs requests (extension `fsResume`): the client sends an
 * `idempotencyKey` and the same key when it re-sends after a lost answer; the server runs the
 * request once and answers every copy with the first outcome (success or error), even while
 * the first copy is still running. Bounded: the oldest keys are forgotten first.
 */
import { createHash } from 'node:crypto';
import { invalidParams } from '../../protocol/index.js';

interface Remembered {
  fingerprint: string;
  outcome: Promise<unknown>;
}

export class ResultMemory {
  private readonly entries = new Map<string, Remembered>();

  constructor(private readonly capacity: number) {}

  /** Runs `operation` once per key; a re-sent key gets the remembered outcome. `params` must be the request minus nothing that varies between copies. */
  run<T>(key: string, method: string, params: unknown, operation: () => Promise<T>): Promise<T> {
    const fingerprint = createHash('sha256').update(method).update('\0').update(JSON.stringify(params)).digest('base64');
    const known = this.entries.get(key);
    if (known) {
      if (known.fingerprint !== fingerprint) {
        return Promise.reject(
          invalidParams(`invalid params for ${method}: idempotencyKey: the key ${JSON.stringify(key)} was already used for a different request`),
        );
      }
      return known.outcome as Promise<T>;
    }
    const outcome = operation();
    outcome.catch(() => {}); // remembered, not unhandled
    this.entries.set(key, { fingerprint, outcome });
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
    return outcome;
  }

  get size(): number {
    return this.entries.size;
  }
}
