/**
 * The one logger shape of tether: a function of a level and a line. Libraries (server,
 * client, supervisor, gateway) take an optional `Logger` and call it; programs (the CLIs)
 * decide where lines go — always stderr, never stdout (stdout is the protocol of `tether mcp`
 * and the data of `tether exec`).
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export type Logger = (level: LogLevel, message: string) => void;

export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error'];

const rank: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 };

export function isLogLevel(value: string): value is LogLevel {
  return value in rank;
}

/** Drops lines below `min`. */
export function atLeast(min: LogLevel, sink: Logger): Logger {
  return (level, message) => {
    if (rank[level] >= rank[min]) sink(level, message);
  };
}

/** Lines on stderr as `<ISO time> <level> <message>`, from `min` up. */
export function stderrLogger(min: LogLevel = 'info', prefix = ''): Logger {
  return atLeast(min, (level, message) => process.stderr.write(`${new Date().toISOString()} ${level} ${prefix}${message}\n`));
}

/** Discards everything (the default of every library). */
export const silentLogger: Logger = () => {};
