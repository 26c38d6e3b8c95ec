/**
 * An in-process tether server (test/helpers/tether.ts) and a pool of raw clients for each
 * test of a file: after each test the clients are dropped, then the server stopped.
 */
import { afterEach } from 'vitest';
import type { TetherServerOptions } from '../../src/server/index.js';
import { RawClientPool } from './raw-client.js';
import type { TargetOptions } from './target.js';
import { startTetherServer, type TetherTarget } from './tether.js';

export interface TetherPerTest {
  /** Raw clients, dropped after the test. */
  readonly pool: RawClientPool;
  /** startTetherServer: this test's server, stopped after it. */
  start(options?: TargetOptions & Partial<TetherServerOptions>): Promise<TetherTarget>;
  /** This test's server (throws before start). */
  readonly target: TetherTarget;
  /** Now, what comes after each test: the clients dropped, then the server stopped. */
  stopNow(): Promise<void>;
}

/** Call at the top of the test file. */
export function tetherAfterEach(): TetherPerTest {
  const pool = new RawClientPool();
  let target: TetherTarget | undefined;
  const stopNow = async () => {
    await pool.dropAll();
    await target?.stop();
    target = undefined;
  };
  afterEach(stopNow);
  return {
    pool,
    stopNow,
    async start(options) {
      target = await startTetherServer(options);
      return target;
    },
    get target() {
      if (!target) throw new Error('no tether server started in this test');
      return target;
    },
  };
}
