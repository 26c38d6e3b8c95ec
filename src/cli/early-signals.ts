/**
 * Ctrl-C, SIGTERM or SIGHUP before the remote command exists (while connecting, or asking
 * the server's environment): Node's default would kill us on the spot and leave a fresh
 * session detached on the server for its TTL. Instead abort the client, whose `close()`
 * ends the session, and exit 128+N as the signal would have.
 */
import { constants as osConstants } from 'node:os';

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

export interface EarlySignals {
  /** Give it to `ExecClient.connect`: it aborts on the first signal. */
  readonly signal: AbortSignal;
  /** 128 + the number of the signal received, or undefined. */
  readonly exitCode: number | undefined;
  /** The command's own handlers take over from here. */
  release(): void;
}

export function catchEarlySignals(): EarlySignals {
  const controller = new AbortController();
  const handlers = SIGNALS.map((name) => {
    const handler = () => controller.abort(name);
    process.on(name, handler);
    return [name, handler] as const;
  });
  return {
    signal: controller.signal,
    get exitCode() {
      return controller.signal.aborted ? 128 + (osConstants.signals[controller.signal.reason as NodeJS.Signals] ?? 2) : undefined;
    },
    release() {
      for (const [name, handler] of handlers) process.off(name, handler);
    },
  };
}
