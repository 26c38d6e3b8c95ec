import { defineConfig } from 'vitest/config';

// `npm test`: everything against the tether server. Interop files (which need the real
// Codex binary) run only under vitest.interop.config.ts, install files (the packed package,
// cross toolchains, qemu) only under vitest.install.config.ts.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/interop/**/*.interop.test.ts', 'test/install/**', 'node_modules/**'],
    // Child processes (and the non-dumpable server: prctl is per process) want forked workers, not threads.
    pool: 'forks',
    // The CLI runs from dist/ (as installed): rebuilt first when a source changed.
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    env: { TETHER_TEST_TARGET: 'tether' },
  },
});
