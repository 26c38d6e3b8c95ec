import { defineConfig } from 'vitest/config';

// `npm run test:install`: the packed package (`npm run pack`, made once by the global setup)
// installed as users install it: without a compiler, with --ignore-scripts, without any
// native part (client only), and the arm64 prebuilds under qemu. Needs the cross toolchains
// and qemu-user (.ci/run installs them); a missing tool fails the run naming its package.
export default defineConfig({
  test: {
    include: ['test/install/**/*.test.ts'],
    pool: 'forks',
    // test/helpers/tether.ts serves from src/ in-process; the installed copies run their own dist/.
    globalSetup: ['test/install-setup.ts'],
    testTimeout: 120_000,
    hookTimeout: 300_000,
  },
});
