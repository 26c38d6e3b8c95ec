/**
 * `tether serve --listen stdio`: one connection on this process's stdin and stdout
 * (server/stdio-listener.ts). stdout carries protocol lines only, logs go to stderr. The
 * end of stdin ends the connection and its session (its processes killed), and the process
 * exits 0; a signal stops it as it stops `tether serve`, within the same deadline, whether or
 * not the client still reads stdout (stdio-stop.ts).
 */
import { serveStdio } from '../../server/edge/index.js';
import { startStdioServer } from '../../server/server-start.js';
import { installLastResort } from '../../server/last-resort.js';
import { Defaults } from '../../server/options.js';
import type { Logger } from '../../util/logger.js';
import type { ServeConfig } from './config.js';
import { endStdio, SIGNAL_FLUSH_MS, stopOnSignals } from '../stdio-stop.js';

export async function serveOnStdio(config: ServeConfig, logger: Logger): Promise<void> {
  let server;
  try {
    server = startStdioServer({ ...config.options, logger });
  } catch (err) {
    process.stderr.write(`tether serve: ${(err as Error).message}\n`);
    process.exitCode = 1;
    return;
  }
  process.on('exit', () => server.killAllChildrenSync());
  installLastResort({ log: logger, killChildren: () => server.killAllChildrenSync() });
  process.stderr.on('error', () => {});
  const signals = stopOnSignals({
    log: logger,
    stop: (signal) => {
      logger('info', `${signal}: shutting down, killing every child process`);
      void server.close();
    },
    killNow: () => server.killAllChildrenSync(),
  });
  logger('info', 'tether serve on stdio (one connection; it ends at the end of stdin)');
  await serveStdio(server, process.stdin, process.stdout);
  logger('info', 'stdio connection ended: its processes were killed');
  await server.close();
  // Stopped by a signal, the client's last lines get a short grace; at the end of stdin, as
  // long as the stall rule gives a reader.
  await endStdio(process.stdout, signals.signal ? SIGNAL_FLUSH_MS : config.options.stallTimeoutMs ?? Defaults.stallTimeoutMs, logger);
  signals.release();
}
