import { defineConfig } from 'vitest/config';

// `npm test`: everything against the tether server. Interop files (which need the real
// Codex binary) run only under vitest.interop.config.ts.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/**/*.interop.test.ts', 'node_modules/**'],
    // node-pty and child processes are happier in forked workers than in threads.
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 30_000,
    env: { TETHER_TEST_TARGET: 'tether' },
  },
});
