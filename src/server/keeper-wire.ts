/**
 * The wire encoding of the keeper's channels (native/keeper.c), apart from any process or
 * socket: what the server writes on the control socket (the spec block, signal, kill,
 * resize), what the keeper answers there (exit), what the command's child says on the start
 * channel (pid, error), and the errno and signal names these numbers map to. Pure: the
 * lifecycle of one keeper is keeper.ts, launching it keeper-launch.ts.
 */
import { constants as osConstants } from 'node:os';

/** What the keeper needs to start a command (the "spec" message). */
export interface KeeperSpec {
  file: string;
  args: string[];
  /** Absolute directory the command runs in (the keeper reports chdir failures apart from exec failures). */
  cwd: string;
  /** The command's whole environment (the keeper itself runs with none). */
  env: Record<string, string>;
  /** argv[0] seen by the command (default: file). */
  argv0?: string;
  /** Run on a pseudo-terminal of this size; stdout then carries the terminal's output and stdin its input. */
  tty?: { cols: number; rows: number };
  /** Without a terminal: give the command a stdin pipe (else /dev/null). */
  stdin: boolean;
}

/** A start failure: `syscall` is 'chdir' for the working directory, `spawn <file>` for the program. */
export interface KeeperSpawnError extends Error {
  code?: string;
  errno?: number;
  syscall?: string;
  path?: string;
}

const ERRNO_NAMES = new Map<number, string>(Object.entries(osConstants.errno).map(([name, n]) => [n, name]));
const SIGNAL_NAMES = new Map<number, NodeJS.Signals>(
  Object.entries(osConstants.signals).map(([name, n]) => [n, name as NodeJS.Signals]),
);

/** The "spec" message (native/keeper.c): NUL-terminated fields, then the environment. */
export function encodeSpec(opts: KeeperSpec): Buffer {
  const fields = [
    opts.cwd,
    opts.tty ? `${Math.max(1, opts.tty.cols | 0)}x${Math.max(1, opts.tty.rows | 0)}` : '',
    opts.tty || opts.stdin ? '1' : '0',
    opts.argv0 === undefined ? '-' : `+${opts.argv0}`,
    String(1 + opts.args.length),
    opts.file,
    ...opts.args,
  ];
  for (const field of fields) {
    if (field.includes('\0')) throw Object.assign(new TypeError('arguments and the working directory must be strings without null bytes'), { code: 'ERR_INVALID_ARG_VALUE' });
  }
  for (const [name, value] of Object.entries(opts.env)) {
    if (name.includes('\0') || String(value).includes('\0')) {
      throw Object.assign(new TypeError(`The environment variable '${name.replace(/\0/g, '\\0')}' must be a string without null bytes`), {
        code: 'ERR_INVALID_ARG_VALUE',
      });
    }
    fields.push(`${name}=${value}`);
  }
  const body = Buffer.from(fields.map((f) => `${f}\0`).join(''));
  return Buffer.concat([Buffer.from(`spec ${body.length}\n`), body]);
}

/** The signal number of `signal`, or 0 if the OS has no such signal. */
export function signalNumber(signal: NodeJS.Signals | number): number {
  return (typeof signal === 'number' ? signal : osConstants.signals[signal]) ?? 0;
}

/** Control message: send signal `number` to the command's process group. */
export function signalMessage(number: number): string {
  return `signal ${number}\n`;
}

/** Control message: kill the command and every descendant. */
export const KILL_MESSAGE = 'kill\n';

/** Control message: the terminal's new size (at least 1x1). */
export function resizeMessage(cols: number, rows: number): string {
  return `resize ${Math.max(1, cols | 0)} ${Math.max(1, rows | 0)}\n`;
}

/** What the keeper says on the control socket: the command's exit. */
export interface ExitMessage {
  kind: 'exit';
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Splits the keeper's control-socket text into messages (lines may arrive in pieces). */
export class ControlReader {
  private buffer = '';

  /** The complete messages `text` finishes; unknown lines are skipped. */
  push(text: string): ExitMessage[] {
    this.buffer += text;
    const messages: ExitMessage[] = [];
    let nl: number;
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      const [kind, a = '', b = ''] = line.split(' ');
      if (kind === 'exit') {
        const code = Number(a);
        const signal = Number(b);
        messages.push({ kind: 'exit', code: code >= 0 ? code : null, signal: signal > 0 ? (SIGNAL_NAMES.get(signal) ?? 'SIGKILL') : null });
      }
    }
    return messages;
  }
}

/** What the start channel said before its end of file: "pid P K", maybe "error STAGE ERRNO". */
export interface StartReport {
  /** The command's pid (null: never said). */
  pid: number | null;
  /** The keeper's pid (0: not said). */
  keeperPid: number;
  /** The first failure reported. */
  error: { stage: string; errno: number } | null;
}

export function parseStartReport(text: string): StartReport {
  const report: StartReport = { pid: null, keeperPid: 0, error: null };
  for (const line of text.split('\n')) {
    const [kind, a = '', b = ''] = line.split(' ');
    if (kind === 'pid') {
      report.pid = Number(a);
      report.keeperPid = Number(b) || 0;
    } else if (kind === 'error') {
      report.error ??= { stage: a, errno: Number(b) };
    }
  }
  return report;
}

/** The error for a start that failed at `stage` ('exec' is the program, else e.g. 'chdir') with `errno`. */
export function startError(stage: string, errno: number, file: string): KeeperSpawnError {
  const code = ERRNO_NAMES.get(errno) ?? `E${errno}`;
  const syscall = stage === 'exec' ? `spawn ${file}` : stage;
  const err: KeeperSpawnError = new Error(`${syscall} ${code}`);
  err.code = code;
  err.errno = -errno;
  err.syscall = syscall;
  if (stage === 'exec') err.path = file;
  return err;
}
