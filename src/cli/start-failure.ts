/**
 * What to tell a user whose remote command could not start. The OS says "No such file or
 * directory" both for a missing program and for a missing working directory; a tether
 * server says which (extension `startErrorDetail`), so the message can name the real problem.
 * Against a Codex server the OS text is all there is.
 */
import { RpcError } from '../protocol/errors.js';
import type { StartErrorDetail } from '../protocol/extensions.js';

const CWD_PROBLEMS: Record<string, string> = {
  ENOENT: 'no such directory',
  ENOTDIR: 'not a directory',
  EACCES: 'permission denied entering the directory',
};

const EXEC_PROBLEMS: Record<string, string> = {
  ENOENT: 'no such command',
  EACCES: 'permission denied (not executable, or a directory)',
  ENOEXEC: 'not an executable the server can run (no #! line, or another architecture)',
  ENOTDIR: 'no such command (a part of its path is not a directory)',
};

export function describeStartFailure(err: RpcError, program: string, cwd: string | undefined): string {
  const detail = err.data as Partial<StartErrorDetail> | undefined;
  const code = typeof detail?.code === 'string' ? detail.code : '';
  if (detail?.stage === 'cwd') return `${CWD_PROBLEMS[code] ?? err.message}: ${cwd ?? "the server's working directory"} (--cwd)`;
  if (detail?.stage === 'exec') return `${EXEC_PROBLEMS[code] ?? err.message}: ${program}`;
  return `cannot start ${JSON.stringify(program)}: ${err.message}`;
}
