import { defineConfig } from 'vitest/config';

// `npm run test:relay` / `npm run test:relay-codex`: the target-parameterized suites run
// against `tether relay` in front of a tether server (relay:tether) or in front of the real
// Codex exec-server (relay:codex), held to the upstream's expectations (test/helpers/target.ts).
const target = process.env.TETHER_TEST_TARGET === 'relay:codex' ? 'relay:codex' : 'relay:tether';

export default defineConfig({
  test: {
    include: ['test/interop/**/*.both.test.ts'],
    pool: 'forks',
    globalSetup: ['test/global-setup.ts'],
    fileParallelism: target === 'relay:tether',
    testTimeout: target === 'relay:codex' ? 60_000 : 30_000,
    hookTimeout: target === 'relay:codex' ? 180_000 : 30_000,
    env: { TETHER_TEST_TARGET: target },
  },
});
