/**
 * The tether server as a test target, in-process (fast to start, and tests can look inside:
 * `server.childPids()`, `serverInternals(server).sessions` from server.ts).
 */
import { startServer, type TetherServer, type TetherServerOptions } from '../../src/server/index.js';
import type { Target, TargetOptions } from './target.js';

export interface TetherTarget extends Target {
  kind: 'tether';
  server: TetherServer;
}

export async function startTetherServer(options: TargetOptions & Partial<TetherServerOptions> = {}): Promise<TetherTarget> {
  const server = await startServer({
    ...options,
    port: options.port ?? 0,
    logger: options.logger ?? (process.env.TETHER_TEST_LOG ? (level, msg) => process.stderr.write(`[tether ${level}] ${msg}\n`) : undefined),
  });
  return {
    kind: 'tether',
    url: server.url,
    server,
    stop: () => server.close(),
  };
}
