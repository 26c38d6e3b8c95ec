/**
 * A session's idempotency-key journal in the state dir (restart adoption): `DIR/sessions/<id>.keys`,
 * JSON lines, so that a successor server answers a re-sent mutating fs request (`fsResume`,
 * fs/results.ts) as the first copy was answered instead of running it again:
 *
 *     {"k":KEY,"s":1,"f":FINGERPRINT}   before the operation runs
 *     {"k":KEY,"r":ANSWER}              after it, before the answer is sent
 *
 * A key started but never answered (the server died while it ran) loads as `unknown`: the
 * successor answers "outcome unknown (the server restarted during this call)" rather than
 * run it twice. A corrupt line (a crash mid-line) is ignored. Bounded: when the file holds
 * more than twice the lines of `capacity` keys (2 lines a key: 4 × capacity lines) it is
 * rewritten (temporary file + rename) with the newest `capacity` keys, the number ResultMemory
 * remembers; the slack makes the rewrite happen once per `capacity` keys at most.
 */
import { closeSync, constants as fsConstants, fstatSync, openSync, readFileSync, renameSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import type { Logger } from '../../util/logger.js';

/**
 * The largest journal read back. Compaction keeps it to 4 × capacity lines of small answers
 * (mutating fs requests answer a few bytes): one bigger than this was not written by us, or
 * was torn apart; it is set aside (renamed `<id>.keys.set-aside-<time>`) with a log line,
 * and the session starts a new one (its earlier keys forgotten), rather than be read whole.
 */
export const MAX_JOURNAL_BYTES = 64 * 1024 * 1024;

/** What the journal knows of one key. */
export type KeyOutcome =
  | { state: 'answered'; fingerprint: string | null; answer: unknown }
  | { state: 'unknown'; fingerprint: string | null };

export class KeyJournal {
  private fd: number | null = null;
  private lines: number | null = null;

  /** `path`: DIR/sessions/<id>.keys. `capacity`: keys remembered (FsServerLimits.rememberedResults). */
  constructor(
    readonly path: string,
    readonly capacity: number,
    private readonly log?: Logger,
  ) {}

  /** Records that the operation of `key` is about to run; call before running it. */
  started(key: string, fingerprint: string | null = null): void {
    this.append(fingerprint === null ? { k: key, s: 1 } : { k: key, s: 1, f: fingerprint });
  }

  /** Records the answer of `key` (JSON-serializable); call before sending it. */
  answered(key: string, answer: unknown): void {
    this.append({ k: key, r: answer ?? null });
  }

  /** The keys on file, oldest first (a Map iterates in insertion order), at most `capacity`. */
  load(): Map<string, KeyOutcome> {
    let text: string;
    let fd: number;
    try {
      // No symlink, and not a FIFO to block on: what is checked below is what is read.
      fd = openSync(this.path, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW | fsConstants.O_NONBLOCK);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Map();
      return this.setAside((err as Error).message);
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) return this.setAside('not a regular file');
      if (st.size > MAX_JOURNAL_BYTES) return this.setAside(`${st.size} bytes, over ${MAX_JOURNAL_BYTES}`);
      text = readFileSync(fd, 'utf8');
    } finally {
      closeSync(fd);
    }
    const keys = new Map<string, KeyOutcome>();
    const lines = text.split('\n');
    for (const line of lines) {
      if (line === '') continue;
      let entry: { k?: unknown; s?: unknown; f?: unknown; r?: unknown };
      try {
        entry = JSON.parse(line);
      } catch {
        continue; // cut short by a crash, or not ours: ignored
      }
      if (typeof entry !== 'object' || entry === null || typeof entry.k !== 'string') continue;
      if (entry.s === 1) {
        keys.delete(entry.k); // a key started again is the newest
        keys.set(entry.k, { state: 'unknown', fingerprint: typeof entry.f === 'string' ? entry.f : null });
      } else if ('r' in entry) {
        const known = keys.get(entry.k);
        keys.set(entry.k, { state: 'answered', fingerprint: known?.fingerprint ?? null, answer: entry.r });
      }
    }
    while (keys.size > this.capacity) keys.delete(keys.keys().next().value!);
    this.lines = lines.filter((l) => l !== '').length;
    return keys;
  }

  /** A journal that cannot be read is moved out of the way (one log line); its keys are forgotten. */
  private setAside(why: string): Map<string, KeyOutcome> {
    const to = `${this.path}.set-aside-${Date.now()}`;
    let where = `set aside as ${to}`;
    try {
      renameSync(this.path, to);
    } catch (err) {
      where = `could not be set aside (${(err as Error).message})`;
    }
    this.log?.('warn', `state dir: key journal ${this.path} not read (${why}): ${where}; its idempotency keys are forgotten (a re-sent request runs again)`);
    this.lines = 0;
    return new Map();
  }

  /** Closes the file (appending again reopens it). */
  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  /** Closes and deletes the journal (the session is gone). */
  remove(): void {
    this.close();
    try {
      unlinkSync(this.path);
    } catch {
      // already gone
    }
  }

  /**
   * Synchronous on purpose: the line must have reached the kernel (write(2) returned) before
   * the operation runs or its answer is sent. An async append may still sit in libuv's
   * queue when the server is killed: the successor would find no "started" line and run the
   * operation a second time, or call an answered one unknown.
   */
  private append(entry: object): void {
    if (this.lines === null) this.load();
    if (this.lines! + 1 > 4 * this.capacity) this.compact();
    this.fd ??= openSync(this.path, 'a', 0o600);
    writeSync(this.fd, `${JSON.stringify(entry)}\n`);
    this.lines!++;
  }

  /** Rewrites the file with the newest `capacity` keys (temporary file + rename). */
  private compact(): void {
    const keys = this.load();
    let text = '';
    let count = 0;
    for (const [k, outcome] of keys) {
      text += `${JSON.stringify(outcome.fingerprint === null ? { k, s: 1 } : { k, s: 1, f: outcome.fingerprint })}\n`;
      count++;
      if (outcome.state === 'answered') {
        text += `${JSON.stringify({ k, r: outcome.answer })}\n`;
        count++;
      }
    }
    const tmp = `${this.path}.tmp-${process.pid}`;
    writeFileSync(tmp, text, { mode: 0o600 });
    renameSync(tmp, this.path);
    this.close();
    this.lines = count;
  }
}
