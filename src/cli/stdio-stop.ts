/**
 * How a command serving one connection on its own stdin and stdout (`tether serve --listen
 * stdio`, `tether relay --listen stdio`) stops. Its stdout is a pipe that the client may have
 * stopped reading: a write Node could not hand to the kernel keeps the process alive for as
 * long as nobody reads, so a stop (a signal, or the end of stdin) would never finish. Here a
 * stop is bounded: what the client has not read within a grace is dropped, and a stop that has
 * not finished by the deadline (the one `tether serve` documents) ends the process anyway.
 */
import type { Writable } from 'node:stream';
import type { Logger } from '../util/logger.js';
import { dieOf, STOP_SIGNALS } from './die-of.js';

/** After a signal: how long stdout may take to hand what it holds to a reader. */
export const SIGNAL_FLUSH_MS = 2_000;
/** How long a stop by signal may take in all before the process exits anyway (as `tether serve`). */
export const STOP_DEADLINE_MS = 10_000;

export interface StopSignals {
  /** The signal that asked for the stop, if one did. */
  readonly signal: NodeJS.Signals | undefined;
  /** The command's stop is over: the handlers and the deadline are removed. */
  release(): void;
}

/**
 * On SIGINT, SIGTERM, SIGHUP or SIGQUIT: `stop` once, and from then on a deadline of
 * `STOP_DEADLINE_MS` after which `killNow` runs and the process dies of the signal; a second
 * signal runs `killNow` and dies of that signal at once (128+N to a shell). Release it once the command is over, its
 * stdout flushed or given up (`endStdio`), so that the deadline covers the flush too.
 */
export function stopOnSignals(options: { log: Logger; stop: (signal: NodeJS.Signals) => void; killNow?: () => void }): StopSignals {
  let received: NodeJS.Signals | undefined;
  let deadline: NodeJS.Timeout | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    if (received !== undefined) {
      options.log('warn', `${signal} again: exiting now`);
      options.killNow?.();
      dieOf(signal);
      return;
    }
    received = signal;
    deadline = setTimeout(() => {
      options.log('error', `shutdown did not finish within ${STOP_DEADLINE_MS / 1000} s: exiting`);
      options.killNow?.();
      dieOf(signal);
    }, STOP_DEADLINE_MS).unref();
    options.stop(signal);
  };
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
  return {
    get signal() {
      return received;
    },
    release() {
      clearTimeout(deadline);
      for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
    },
  };
}

/**
 * Resolves true once `output` holds nothing it has not handed to the kernel, or false if it
 * still does after `withinMs` (its reader stopped reading, or reads too slowly).
 */
export function flushed(output: Writable, withinMs: number): Promise<boolean> {
  if (output.writableLength === 0 || output.destroyed) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), withinMs);
    // An empty write's callback runs once every write before it was handed over (or failed).
    output.write('', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * The end of a stdio command: waits (at most `withinMs`) for stdout to be read, and if it is
 * not, says so in one line and exits with the exit code set so far, dropping what is unread
 * (nothing else would end a process whose pending write nobody takes).
 */
export async function endStdio(output: Writable, withinMs: number, log: Logger): Promise<void> {
  if (await flushed(output, withinMs)) return;
  log('warn', `stdout was not read for ${withinMs / 1000} s: exiting without the last ${output.writableLength} bytes`);
  process.exit();
}
