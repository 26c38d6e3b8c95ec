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

/** A digest of the request; long strings (file data) are hashed as they are, not through JSON.stringify (slow for megabytes). */
function fingerprintOf(method: string, params: unknown): string {
  const hash = createHash('sha256').update(method);
  for (const [key, value] of Object.entries(params as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1))) {
    hash.update(`\0${key}\0`).update(typeof value === 'string' ? `s${value}` : `j${JSON.stringify(value)}`);
  }
  return hash.digest('base64');
}
