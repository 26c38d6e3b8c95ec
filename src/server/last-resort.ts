/**
 * The process-wide handler for errors nobody handled: a last resort, not the plan (every
 * socket and child stream has its own error handler). It logs, and keeps the server up when
 * the error can only concern one stream — an operating-system error on a socket, pipe or
 * terminal (a peer that reset, a child that closed its end) — because exiting would kill
 * every session's processes for one broken descriptor. Anything else (a TypeError, a
 * failed assertion) means the server's own state may be wrong: it kills every child and
 * exits 1, so a supervisor restarts it clean.
 */

export type LastResortVerdict = 'continue' | 'exit';

/** errno codes of one descriptor's I/O: the stream is dead, the server is not. */
const STREAM_ERRNOS = new Set([
  'ECONNRESET',
  'ECONNABORTED',
  'ECONNREFUSED',
  'EPIPE',
  'ENOTCONN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EIO', // a pty whose other side closed
  'EBADF', // a write queued for a descriptor that was closed meanwhile
  'EAGAIN',
  'ECANCELED',
]);

/** Node's own codes for I/O on a stream that already ended. */
const STREAM_STATE_CODES = new Set([
  'ERR_STREAM_DESTROYED',
  'ERR_STREAM_WRITE_AFTER_END',
  'ERR_STREAM_PREMATURE_CLOSE',
  'ERR_SOCKET_CLOSED',
  'ERR_STREAM_ALREADY_FINISHED',
]);

export function classifyUnhandled(error: unknown): LastResortVerdict {
  if (!(error instanceof Error)) return 'exit';
  const { code, syscall } = error as NodeJS.ErrnoException;
  if (typeof code !== 'string') return 'exit';
  if (STREAM_STATE_CODES.has(code)) return 'continue';
  // A system error names the syscall that failed; only I/O calls qualify.
  return STREAM_ERRNOS.has(code) && typeof syscall === 'string' && /^(read|write|writev|shutdown|close|connect|recv|send)/.test(syscall)
    ? 'continue'
    : 'exit';
}

export interface LastResortOptions {
  log: (level: 'error', message: string) => void;
  /** Synchronous: SIGKILL every child (their process groups) before exiting. */
  killChildren: () => void;
  /** process.exit, replaceable in tests. */
  exit?: (code: number) => never;
  /** At most this many errors are logged in full per 10 s; the rest are counted (20). */
  logBurst?: number;
}

/**
 * Installs the handlers on `process` (uncaught exceptions and unhandled rejections alike)
 * and returns a function that removes them.
 */
export function installLastResort(options: LastResortOptions): () => void {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const burst = options.logBurst ?? 20;
  let windowStart = 0;
  let logged = 0;
  let suppressed = 0;
  const handle = (error: unknown, origin: string) => {
    const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
    if (classifyUnhandled(error) === 'exit') {
      options.log('error', `${origin}, killing every child and exiting: ${text}`);
      options.killChildren();
      exit(1);
      return;
    }
    // Survivable, but never silent: each one is a missing error handler to fix.
    const now = Date.now();
    if (now - windowStart > 10_000) {
      if (suppressed) options.log('error', `${suppressed} more unhandled stream errors were not logged`);
      windowStart = now;
      logged = 0;
      suppressed = 0;
    }
    if (logged++ < burst) options.log('error', `${origin} on one stream, still serving: ${text}`);
    else suppressed++;
  };
  const onException = (error: Error) => handle(error, 'uncaught exception');
  const onRejection = (reason: unknown) => handle(reason, 'unhandled rejection');
  process.on('uncaughtException', onException);
  process.on('unhandledRejection', onRejection);
  return () => {
    process.off('uncaughtException', onException);
    process.off('unhandledRejection', onRejection);
  };
}
