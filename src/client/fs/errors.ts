/**
 * Errors of the remote filesystem API in Node's `fs` shape: `code` ('ENOENT', 'EISDIR'…),
 * `errno`, `syscall` and `path`, so code written for `node:fs/promises` handles them as it
 * would local ones. The server's error (Codex's "No such file or directory (os error 2)")
 * stays in the message and as `cause`. This module is the one place fs error TEXT is read
 * (error-text.ts is the one for process and session errors).
 */
import { constants } from 'node:os';
import { ErrorCode } from '../../protocol/codes.js';
import { RpcError } from '../../protocol/errors.js';

const errnoNames = new Map<number, string>(Object.entries(constants.errno).map(([name, value]) => [value, name]));

export class RemoteFsError extends Error {
  override readonly name = 'RemoteFsError';
  /** Node's negative errno, when the server reported an OS error. */
  readonly errno: number | undefined;

  constructor(
    readonly code: string,
    readonly syscall: string,
    readonly path: string,
    detail: string,
    options?: { cause?: unknown; errno?: number },
  ) {
    super(`${code}: ${detail}, ${syscall} '${path}'`, { cause: options?.cause });
    this.errno = options?.errno === undefined ? undefined : -options.errno;
  }
}

/**
 * A lost answer to a request that changes something, on a server that cannot answer a re-sent
 * request from memory (no `fsResume`: a Codex exec-server). The request may or may not have
 * happened; it was not re-sent, because a re-sent remove turns success into ENOENT and a
 * re-sent write may overwrite what someone wrote since. Check the remote state, then decide.
 */
export class OutcomeUnknownError extends Error {
  override readonly name = 'OutcomeUnknownError';
  readonly code = 'EOUTCOMEUNKNOWN';

  constructor(
    readonly syscall: string,
    readonly path: string,
    options?: { cause?: unknown },
  ) {
    super(
      `${syscall} '${path}': outcome unknown: the connection was lost before the server answered, and this server ` +
        `cannot answer a re-sent request from memory (it lacks tether's fsResume extension), so the request was not re-sent; ` +
        `check the remote state before retrying`,
      options,
    );
  }
}

/** "unknown file handle `h`" (-32004): fs/readBlock, fs/writeBlock or fs/close of a handle the server does not have. */
const UNKNOWN_HANDLE = /unknown file handle/;

/** The server no longer has the file handle (it died with its connection, on a server without fsResume). */
export function isUnknownHandle(err: unknown): boolean {
  return err instanceof RpcError && err.code === ErrorCode.NotFound && UNKNOWN_HANDLE.test(err.message);
}

/** The Node-style error for a server's answer to an fs request about `path`. */
export function toFsError(err: unknown, syscall: string, path: string): Error {
  if (!(err instanceof RpcError)) return err as Error;
  const os = /\(os error (\d+)\)$/.exec(err.message);
  if (os) {
    const errno = Number(os[1]);
    return new RemoteFsError(errnoNames.get(errno) ?? 'EIO', syscall, path, err.message, { cause: err, errno });
  }
  if (err.code === ErrorCode.NotFound) {
    // "unknown file handle `h`": the handle is gone (a reconnect on a server without fsResume).
    return new RemoteFsError(UNKNOWN_HANDLE.test(err.message) ? 'EBADF' : 'ENOENT', syscall, path, err.message, { cause: err });
  }
  if (/ is not a file$/.test(err.message)) return new RemoteFsError('EISDIR', syscall, path, `${err.message} (not a regular file)`, { cause: err });
  if (/too large to read/.test(err.message)) return new RemoteFsError('EFBIG', syscall, path, err.message, { cause: err });
  if (/ exist/.test(err.message) && err.code === ErrorCode.InvalidRequest) return new RemoteFsError('EEXIST', syscall, path, err.message, { cause: err });
  return new RemoteFsError('EINVAL', syscall, path, err.message, { cause: err });
}
