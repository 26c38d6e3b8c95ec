/**
 * The restartable servers (test/helpers/restart.ts) and raw clients a test file's tests start,
 * gone after each test: the clients dropped first, then the servers disposed (with their
 * keepers and state dirs).
 */
import { afterEach } from 'vitest';
import { RawClientPool } from './raw-client.js';
import { startRestartableServer, type RestartableServer } from './restart.js';
import type { ServerUser } from './server-process.js';

export interface RestartablesPerTest {
  /** startRestartableServer, disposed after the test. */
  start(user: ServerUser, extraArgs?: string[]): Promise<RestartableServer>;
  /** Raw clients, dropped after the test. */
  readonly pool: RawClientPool;
}

/** Call at the top of the test file. */
export function restartablesAfterEach(): RestartablesPerTest {
  const servers: RestartableServer[] = [];
  const pool = new RawClientPool();
  afterEach(async () => {
    await pool.dropAll();
    for (const server of servers.splice(0)) await server.dispose();
  });
  return {
    pool,
    async start(user, extraArgs) {
      const server = await startRestartableServer(user, extraArgs);
      servers.push(server);
      return server;
    },
  };
}
