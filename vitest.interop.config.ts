import { defineConfig } from 'vitest/config';

// `npm run test:interop`: the target-parameterized suites (protocol, client chaos) run
// against the real Codex exec-server, plus the interop-only suites (the Codex agent).
export default defineConfig({
  test: {
    include: ['test/interop/**/*.test.ts'],
    pool: 'forks',
    // The CLI runs from dist/ (as installed): rebuilt first when a source changed.
    globalSetup: ['test/global-setup.ts'],
    // One Codex server process per file is heavy on a 2-core machine: run files in turn.
    fileParallelism: false,
    testTimeout: 60_000,
    hookTimeout: 180_000,
    env: { TETHER_TEST_TARGET: 'codex' },
  },
});
