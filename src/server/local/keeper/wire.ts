/**
 * The wire encoding of the keeper's channels (native/keeper.c), apart from any process or
 * socket: what the server writes on the control socket (the spec block, signal, kill,
 * resize), what the keeper answers there (exit), what the command's child says on the start
 * channel (pid, error), and the errno and signal names these numbers map to. Kept mode
 * (restart adoption): the keep message, stdin frames, mark/drop/release, the keeper's took lines and
 * the adoption dump. Pure: the
 * lifecycle of one keeper is keeper.ts, launching it launch.ts.
 */
import { constants as osConstants } from 'node:os';
import type { KeepOptions } from '../../backend/index.js';

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

  /** The complete exit messages `text` finishes; other lines (took, unknown) are skipped. */
  push(text: string): ExitMessage[] {
    return this.messages(text).filter((m): m is ExitMessage => m.kind === 'exit');
  }

  /** Every complete message `text` finishes, in order: exit, and in kept mode took; unknown lines are skipped. */
  messages(text: string): ControlMessage[] {
    this.buffer += text;
    const messages: ControlMessage[] = [];
    let nl: number;
    while ((nl = this.buffer.indexOf('\n')) >= 0) {
      const line = this.buffer.slice(0, nl);
      this.buffer = this.buffer.slice(nl + 1);
      const [kind, a = '', b = ''] = line.split(' ');
      if (kind === 'exit') messages.push({ kind: 'exit', ...exitFields(a, b) });
      else if (kind === 'took' && /^\d+$/.test(a)) messages.push({ kind: 'took', count: Number(a) });
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

/** The error for a start `who` (a zygote, or a keeper) did not pick up within `timeoutMs`. */
export function startTimeoutError(who: string, timeoutMs: number, file: string): KeeperSpawnError {
  return Object.assign(
    new Error(`${who} did not answer within ${timeoutMs} ms (stopped or overloaded); it was replaced: the start of ${file} failed, try again`),
    // Not `spawn <file>`: the program was never tried (a process/start says stage 'setup').
    { code: 'ETIMEDOUT', errno: -(osConstants.errno.ETIMEDOUT ?? 110), syscall: 'keeper' },
  );
}

/* ---- kept mode (restart adoption): the keeper outlives its server and is adopted by the next ---- */

/** The "keep" message, sent before "spec": `keep <ADOPT_MS> <CAP_BYTES> <PATHLEN> <METALEN>\n<PATH><META>`. */
export function encodeKeep(opts: KeepOptions): Buffer {
  const path = Buffer.from(opts.path);
  if (path.length === 0 || path.includes(0)) throw new TypeError('the keeper socket path must be a non-empty string without null bytes');
  const adopt = Math.max(0, Math.floor(opts.adoptMs));
  const cap = Math.max(1, Math.floor(opts.capBytes));
  return Buffer.concat([Buffer.from(`keep ${adopt} ${cap} ${path.length} ${opts.meta.length}\n`), path, opts.meta]);
}

/** A stdin frame on fd 0 in kept mode: `w <LEN> <IDLEN>\n<ID><DATA>` (IDLEN 0: no writeId). */
export function encodeStdinFrame(data: Buffer | string, writeId?: string): Buffer {
  const bytes = typeof data === 'string' ? Buffer.from(data) : data;
  const id = Buffer.from(writeId ?? '');
  return Buffer.concat([Buffer.from(`w ${bytes.length} ${id.length}\n`), id, bytes]);
}

/** The stdin frame that closes the command's stdin (kept mode). */
export const STDIN_EOF = 'eof\n';

/** What a mark covers: stdout (1) or stderr (2) up to an offset, or the exit ('x') or close ('c') event. */
export type MarkStream = 1 | 2 | 'x' | 'c';

/** Control message: the server's entry `seq` covers `stream` up to offset `end` (exclusive); `mark <SEQ> x|c` without end. */
export function markMessage(seq: number, stream: MarkStream, end?: number): string {
  if (stream === 'x' || stream === 'c') return `mark ${seq} ${stream}\n`;
  if (end === undefined) throw new TypeError(`mark ${seq} ${stream}: an output mark needs its end offset`);
  return `mark ${seq} ${stream} ${end}\n`;
}

/** Control message: the server keeps no entry <= `seq` any more (the keeper frees their bytes). */
export function dropMessage(seq: number): string {
  return `drop ${seq}\n`;
}

/** Control message: the server is done with this process for good (the keeper behaves as without keep). */
export const RELEASE_MESSAGE = 'release\n';

/** What the keeper says on the control socket in kept mode: stdin frames taken so far (cumulative, eof included). */
export interface TookMessage {
  kind: 'took';
  count: number;
}

export type ControlMessage = ExitMessage | TookMessage;

function exitFields(a: string, b: string): { code: number | null; signal: NodeJS.Signals | null } {
  const code = Number(a);
  const signal = Number(b);
  return { code: code >= 0 ? code : null, signal: signal > 0 ? (SIGNAL_NAMES.get(signal) ?? 'SIGKILL') : null };
}

/** One mark kept by the keeper (see markMessage). */
export interface KeeperMark {
  seq: number;
  stream: MarkStream;
  end?: number;
}

/** What an adopted keeper tells its successor (the dump, before the usual control protocol). */
export interface KeeperDump {
  pid: number;
  keeperPid: number;
  meta: Buffer;
  /** The retained bytes of each stream, [base, base + data.length) in the keeper's numbering. */
  streams: { 1: { base: number; data: Buffer }; 2: { base: number; data: Buffer } };
  marks: KeeperMark[];
  /** The command's exit, if it ended (as the control socket's exit message). */
  exited: { code: number | null; signal: NodeJS.Signals | null } | null;
  /** The highest seq the server dropped (0: none): a successor numbers on from it even when no mark is left. */
  droppedSeq: number;
  /** Nothing of the command's tree is left. */
  gone: boolean;
  stdin: { taken: number; eof: boolean };
  /** The remembered writeIds, oldest first. */
  ids: string[];
}

/** Longest header line of a dump (the fields are a few numbers). */
const DUMP_LINE_MAX = 256;
/** Largest `meta` a dump may carry (the server's own JSON: ids and the listed argv). */
export const DUMP_META_MAX = 1024 * 1024;
/** Largest dump by default (its retained output, marks and writeIds included). */
export const DUMP_MAX_BYTES = 64 * 1024 * 1024;

/**
 * Reads the adoption dump incrementally: push what the control socket gives; once `end\n` has
 * arrived, push returns the dump and the bytes after it (the control protocol's, for ControlReader).
 * Malformed input throws (the caller treats the keeper as unusable).
 */
export class DumpReader {
  /** Bytes pushed so far (bounded by `maxBytes`). */
  private total = 0;

  /** `maxBytes`: the whole dump, at most (a keeper streaming more is refused, not held). */
  constructor(private readonly maxBytes = DUMP_MAX_BYTES) {}

  /** The dump, once complete. */
  dump: KeeperDump | null = null;
  /** Bytes after `end\n` (set once complete). */
  rest: Buffer = Buffer.alloc(0);
  private line: Buffer[] = [];
  private lineLength = 0;
  private need = 0;
  private parts: Buffer[] = [];
  private onBytes: ((bytes: Buffer) => void) | null = null;
  private started = false;
  private readonly partial: KeeperDump = {
    pid: 0,
    keeperPid: 0,
    meta: Buffer.alloc(0),
    streams: { 1: { base: 0, data: Buffer.alloc(0) }, 2: { base: 0, data: Buffer.alloc(0) } },
    marks: [],
    exited: null,
    droppedSeq: 0,
    gone: false,
    stdin: { taken: 0, eof: false },
    ids: [],
  };

  push(chunk: Buffer): { dump: KeeperDump; rest: Buffer } | null {
    if (this.dump) throw new Error('keeper dump: already complete');
    let at = 0;
    // Counted up to where the dump ends (what follows `end` is the control protocol's).
    const room = this.maxBytes - this.total;
    while (at < chunk.length) {
      if (at >= room) throw new Error(`keeper dump: over ${this.maxBytes} bytes`);
      if (this.onBytes) {
        const take = Math.min(this.need, chunk.length - at);
        this.parts.push(chunk.subarray(at, at + take));
        at += take;
        this.need -= take;
        if (this.need === 0) this.finishBytes();
        continue;
      }
      const nl = chunk.indexOf(10, at);
      const end = nl < 0 ? chunk.length : nl;
      this.lineLength += end - at;
      if (this.lineLength > DUMP_LINE_MAX) throw new Error('keeper dump: line too long');
      this.line.push(chunk.subarray(at, end));
      at = nl < 0 ? chunk.length : nl + 1;
      if (nl < 0) continue;
      const text = Buffer.concat(this.line).toString('latin1');
      this.line = [];
      this.lineLength = 0;
      if (this.handleLine(text)) {
        this.total += at;
        this.dump = this.partial;
        this.rest = Buffer.from(chunk.subarray(at));
        return { dump: this.dump, rest: this.rest };
      }
    }
    this.total += chunk.length;
    return null;
  }

  private expect(length: number, onBytes: (bytes: Buffer) => void): void {
    // Refused before anything of it is held: what it announces must fit what is left.
    if (!(length >= 0)) throw new Error(`keeper dump: a part of ${length} bytes`);
    if (length > this.maxBytes - this.total) throw new Error(`keeper dump: a part of ${length} bytes, over the ${this.maxBytes} a dump may have`);
    this.need = length;
    this.parts = [];
    this.onBytes = onBytes;
    if (length === 0) this.finishBytes();
  }

  private finishBytes(): void {
    const onBytes = this.onBytes!;
    const bytes = Buffer.concat(this.parts);
    this.parts = [];
    this.onBytes = null;
    onBytes(bytes);
  }

  /** Returns true at `end`. */
  private handleLine(line: string): boolean {
    const words = line.split(' ');
    const num = (i: number): number => {
      const text = words[i] ?? '';
      if (!/^-?\d+$/.test(text)) throw new Error(`keeper dump: bad line '${line}'`);
      return Number(text);
    };
    const d = this.partial;
    if (!this.started) {
      if (line !== 'adopted 1') throw new Error(`keeper dump: expected 'adopted 1', got '${line.slice(0, 40)}'`);
      this.started = true;
      return false;
    }
    switch (words[0]) {
      case 'pid':
        d.pid = num(1);
        d.keeperPid = num(2);
        return false;
      case 'meta':
        if (num(1) > DUMP_META_MAX) throw new Error(`keeper dump: a meta of ${num(1)} bytes, over ${DUMP_META_MAX}`);
        this.expect(num(1), (bytes) => (d.meta = bytes));
        return false;
      case 'stream': {
        const stream = num(1);
        if (stream !== 1 && stream !== 2) throw new Error(`keeper dump: bad line '${line}'`);
        const base = num(2);
        this.expect(num(3), (data) => (d.streams[stream] = { base, data }));
        return false;
      }
      case 'mark': {
        const seq = num(1);
        if (words[2] === 'x' || words[2] === 'c') d.marks.push({ seq, stream: words[2] });
        else {
          const stream = num(2);
          if (stream !== 1 && stream !== 2) throw new Error(`keeper dump: bad line '${line}'`);
          d.marks.push({ seq, stream, end: num(3) });
        }
        return false;
      }
      case 'exited':
        num(1);
        num(2);
        d.exited = exitFields(words[1]!, words[2]!);
        return false;
      case 'dropped':
        d.droppedSeq = num(1);
        return false;
      case 'gone':
        d.gone = num(1) === 1;
        return false;
      case 'stdin':
        d.stdin = { taken: num(1), eof: num(2) === 1 };
        return false;
      case 'id':
        this.expect(num(1), (bytes) => d.ids.push(bytes.toString()));
        return false;
      case 'end':
        return true;
      default:
        throw new Error(`keeper dump: unknown line '${line.slice(0, 40)}'`);
    }
  }
}
