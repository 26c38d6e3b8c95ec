/**
 * OS error texts in the form Codex (Rust std::io::Error) prints them, e.g.
 * "No such file or directory (os error 2)", so spawn failures read the same on both servers.
 */
import { constants } from 'node:os';

const DESCRIPTIONS: Record<string, string> = {
  ENOENT: 'No such file or directory',
  EACCES: 'Permission denied',
  ENOTDIR: 'Not a directory',
  EISDIR: 'Is a directory',
  ENOEXEC: 'Exec format error',
  E2BIG: 'Argument list too long',
  EAGAIN: 'Resource temporarily unavailable',
  ENOMEM: 'Cannot allocate memory',
  EMFILE: 'Too many open files',
  ENFILE: 'Too many open files in system',
  EPERM: 'Operation not permitted',
  ELOOP: 'Too many levels of symbolic links',
  ENAMETOOLONG: 'File name too long',
  EINVAL: 'Invalid argument',
  ETXTBSY: 'Text file busy',
};

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
