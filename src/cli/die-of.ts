/**
 * How a stopping command ends when it cannot wait any longer (its stop deadline passed, or a
 * second signal came): by the signal's own default action. `process.exit` would not do: Node's
 * exit joins every thread-pool thread, and one stuck in a system call (a blocking open of a
 * FIFO, a copy out of /sys, a hung network filesystem) would hold the process forever.
 */

/** The signals every long-running `tether` command takes as "stop". */
export const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;

/**
 * Ends the process at once by `signal`'s default action (status 128+N to a shell): no exit
 * handlers, no waiting for the thread pool. SIGQUIT becomes SIGTERM (its default dumps core).
 */
export function dieOf(signal: NodeJS.Signals): void {
  for (const s of STOP_SIGNALS) process.removeAllListeners(s);
  process.kill(process.pid, signal === 'SIGQUIT' ? 'SIGTERM' : signal);
  setTimeout(() => process.kill(process.pid, 'SIGKILL'), 1000).unref(); // should the signal not end it
}
