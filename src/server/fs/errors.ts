/**
 * fs errors as Codex reports them: an io::Error's kind picks the code (not found -> -32004;
 * permission denied and invalid input -> -32600; anything else -> -32603) and its Display
 * is the message, "No such file or directory (os error 2)".
 */
import { ErrorCode, RpcError, internalError, invalidRequest } from '../../protocol/index.js';
import { errnoCode, osErrorMessage } from '../../util/os-error.js';

/** Rust maps these errno values to ErrorKind::PermissionDenied / InvalidInput: -32600. */
const INVALID_REQUEST_ERRNOS = new Set(['EACCES', 'EPERM', 'EINVAL']);

/** A Node fs error (or an RpcError already shaped for the wire) as the RpcError Codex would send. */
export function fsError(err: unknown): RpcError {
  if (err instanceof RpcError) return err;
  const code = errnoCode(err);
  const message = osErrorMessage(err);
  if (code === 'ENOENT') return new RpcError(ErrorCode.NotFound, message);
  if (code && INVALID_REQUEST_ERRNOS.has(code)) return invalidRequest(message);
  return internalError(message);
}

/** Runs an fs operation, turning what it throws into the wire error. */
export async function mapFsErrors<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (err) {
    throw fsError(err);
  }
}

/** A Node-style error with an errno code, for checks the server makes itself (Rust's io::Error::from_raw_os_error). */
export function errnoError(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(code), { code });
}

export const notFound = (message: string): RpcError => new RpcError(ErrorCode.NotFound, message);

/** `path \`/x\` is not a file`: readFile/open of a directory, FIFO or device (Codex's text, -32600). */
export const notAFile = (display: string): RpcError => invalidRequest(`path \`${display}\` is not a file`);
