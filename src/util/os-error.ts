/**
 * OS error texts in the form Codex (Rust std::io::Error) prints them, e.g.
 * "No such file or directory (os error 2)", so spawn and fs failures read the same on both
 * servers (the local back-end's spawn and walk, and the fs handlers' error mapping).
 */
import { constants } from 'node:os';

/**
 * The texts are musl's strerror (the Codex binary is a static musl build, so its io::Error
 * messages use them, e.g. "Filename too long" where glibc says "File name too long").
 */
const DESCRIPTIONS: Record<string, string> = {
  EPERM: 'Operation not permitted',
  ENOENT: 'No such file or directory',
  ESRCH: 'No such process',
  EINTR: 'Interrupted system call',
  EIO: 'I/O error',
  ENXIO: 'No such device or address',
  E2BIG: 'Argument list too long',
  ENOEXEC: 'Exec format error',
  EBADF: 'Bad file descriptor',
  EAGAIN: 'Resource temporarily unavailable',
  ENOMEM: 'Out of memory',
  EACCES: 'Permission denied',
  EBUSY: 'Resource busy',
  EEXIST: 'File exists',
  EXDEV: 'Cross-device link',
  ENODEV: 'No such device',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  EINVAL: 'Invalid argument',
  ENFILE: 'Too many open files in system',
  EMFILE: 'No file descriptors available',
  ETXTBSY: 'Text file busy',
  EFBIG: 'File too large',
  ENOSPC: 'No space left on device',
  ESPIPE: 'Invalid seek',
  EROFS: 'Read-only file system',
  EMLINK: 'Too many links',
  EPIPE: 'Broken pipe',
  ENAMETOOLONG: 'Filename too long',
  ENOTEMPTY: 'Directory not empty',
  ELOOP: 'Symbolic link loop',
  EOVERFLOW: 'Value too large for data type',
  EDQUOT: 'Quota exceeded',
  ESTALE: 'Stale file handle',
  EOPNOTSUPP: 'Not supported',
  ENOTSUP: 'Not supported',
};

/** The errno name of a Node error (`ENOENT`…), if it has one. */
export function errnoCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && code in constants.errno ? code : undefined;
}

export function osErrorMessage(err: unknown): string {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string') {
    const errno = (constants.errno as Record<string, number>)[code];
    const text = DESCRIPTIONS[code];
    if (text && errno !== undefined) return `${text} (os error ${errno})`;
    if (errno !== undefined) return `${(err as Error).message} (os error ${errno})`;
  }
  return err instanceof Error ? err.message : String(err);
}
