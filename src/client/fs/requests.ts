/**
 * How the remote filesystem API sends its requests through drops:
 * - reads (readFile, getMetadata, readDirectory, walk, readBlock by offset…) are re-sent
 *   after a lost answer: doing them twice changes nothing;
 * - requests that change something carry an `idempotencyKey` when the session has tether's
 *   `fsResume` extension, and are re-sent with the same key: the server answers the copy
 *   with the first outcome, so a re-sent remove reports the original success;
 * - without it (a Codex exec-server) such a request whose answer was lost fails with
 *   `OutcomeUnknownError` and is never re-sent behind the caller's back.
 */
import { randomUUID } from 'node:crypto';
import type { EnvironmentInfo, ExtensionName } from '../../protocol/index.js';
import { ConnectionLostError } from '../errors.js';
import { OutcomeUnknownError, toFsError } from './errors.js';

/** What the filesystem API needs from its client (ExecClient hands it a private one). */
export interface FsHost {
  /** One attempt on the current connection (waiting while recovering): a lost answer rejects with ConnectionLostError. */
  requestOnce<T>(method: string, params: object): Promise<T>;
  readonly extensions: ReadonlySet<ExtensionName>;
  /** Incremented for every new connection (handles of a non-fsResume server die with theirs). */
  readonly generation: number;
  environmentInfo(): Promise<EnvironmentInfo>;
  /** Called after every successful recovery (a new connection on the same session). */
  onRecovered(listener: () => void): void;
  /** Called for every `fs/missingChanged` notification. */
  onMissingChanged(listener: (watchId: number) => void): void;
}

export class FsRequests {
  constructor(readonly host: FsHost) {}

  /** The session keeps handles and the watch through drops, and answers re-sent keys from memory. */
  get resumable(): boolean {
    return this.host.extensions.has('fsResume');
  }

  /** A request that may be sent again: re-sent until it is answered (or the session is lost). */
  async read<T>(method: string, params: object, syscall: string, path: string): Promise<T> {
    for (;;) {
      try {
        return await this.host.requestOnce<T>(method, params);
      } catch (err) {
        if (err instanceof ConnectionLostError) continue;
        throw toFsError(err, syscall, path);
      }
    }
  }

  /** A request that changes something: exactly once with `fsResume`, else at most once (OutcomeUnknownError). */
  async mutate<T>(method: string, params: object, syscall: string, path: string): Promise<T> {
    if (!this.resumable) {
      try {
        return await this.host.requestOnce<T>(method, params);
      } catch (err) {
        if (err instanceof ConnectionLostError) throw new OutcomeUnknownError(syscall, path, { cause: err });
        throw toFsError(err, syscall, path);
      }
    }
    return this.read<T>(method, { ...params, idempotencyKey: randomUUID() }, syscall, path);
  }
}
