/**
 * What to tell a user whose remote command could not start: the server's message. A tether
 * server's names what failed ("cannot start 'prog': …", "cannot start 'prog': cwd '/x': …");
 * a Codex server's is the OS's text alone ("No such file or directory (os error 2)", for a
 * missing program and a missing directory alike), so the program (and the --cwd given) are
 * put before it here. With extension `startErrorDetail` a tether server also says which step
 * failed and its errno name, which adds a hint where the OS's text is obscure.
 */
import { RpcError } from '../protocol/errors.js';
import type { StartErrorDetail } from '../protocol/extensions.js';
import { quoted } from '../util/format.js';

const EXEC_HINTS: Record<string, string> = {
  EACCES: 'not executable, or a directory',
  ENOEXEC: 'not an executable the server can run: no #! line, or built for another architecture',
};

export function describeStartFailure(err: RpcError, program: string, cwd: string | undefined): string {
  const named = err.message.startsWith('cannot start ')
    ? err.message
    : `cannot start ${quoted(program)}${cwd === undefined ? '' : ` (--cwd ${quoted(cwd)})`}: ${err.message}`;
  const detail = err.data as Partial<StartErrorDetail> | undefined;
  const hint = detail?.stage === 'exec' && typeof detail.code === 'string' ? EXEC_HINTS[detail.code] : undefined;
  return hint ? `${named} (${hint})` : named;
}
