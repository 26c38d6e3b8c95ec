import { defineConfig } from 'vitest/config';

// `npm run test:unit`: the pure-core tests, in well under a minute: everything under
// test/unit/ (which mirrors src/). Each file there imports only src/ modules and in-memory
// helpers: no server, no child process, no socket, no browser, and no dist/ (so no build
// first). Everything, these included, runs in `npm test`.
export default defineConfig({
  test: {
    include: ['test/unit/**/*.test.ts'],
    testTimeout: 30_000,
    env: { TETHER_TEST_TARGET: 'tether' },
  },
});
