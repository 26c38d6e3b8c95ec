/**
 * What `tether serve` runs with: its flags parsed (serve.ts, `parseServeArgs`), read by the
 * port listener (serve.ts) and the stdio one (serve-stdio.ts).
 */
import type { TetherServerOptions } from '../../server/index.js';
import type { LogLevel } from '../../util/logger.js';

export interface ServeConfig {
  options: TetherServerOptions;
  /** `--listen stdio`: one connection on stdin/stdout instead of a port. */
  stdio: boolean;
  logLevel: LogLevel;
  help: boolean;
  /** The state dir, or null (`--state-dir none`). */
  stateDir: string | null;
  /** `--replace`: take over the listening socket of the server on the same state dir. */
  replace: boolean;
}
