import { existsSync } from 'node:fs';
import { defineConfig } from 'vitest/config';

// `npm run test:unit`: the pure-core tests, in well under a minute. Each file here imports
// only src/ modules and in-memory helpers: no server, no child process, no socket, no
// browser, and no dist/ (so no build first). Everything, these included, runs in `npm test`.
export const unitTests = [
  'byte-arena',
  'chaos-schedule',
  'chaos-stats',
  'client-acks',
  'client-engine',
  'client-kill',
  'client-sequencer',
  'exec-cli-options',
  'fair-share',
  'frame-cost',
  'frame-demux',
  'fs-base64',
  'fs-budget',
  'fs-copy-deadline',
  'gateway-config',
  'gateway-request-limits',
  'http-timeouts',
  'keeper-wire',
  'mcp-framing',
  'mcp-inbox',
  'protocol-dialect',
  'receive-guard',
  'relay-handles',
  'relay-open-gate',
  'relay-output-batch',
  'relay-remote-output',
  'relay-upstream-wait',
  'client-output-notification',
  'server-auth',
  'server-capacity',
  'server-closed-retention',
  'server-connection-parts',
  'server-descriptors',
  'server-env',
  'server-log-entries',
  'server-log-restore',
  'server-lost-processes',
  'server-memory-budget',
  'server-output-log',
  'server-process-parts',
  'server-session-store',
  'server-state-dir',
  'session-handles',
  'serve-keep-policy',
  'server-stdio-lines',
  'supervisor-diagnosis',
  'supervisor-policy',
  'supervisor-retry-policy',
  'supervisor-stderr',
  'util-backoff',
].map((name) => `test/${name}.test.ts`);

// A renamed or removed file must not drop out of the fast run unnoticed.
const missing = unitTests.filter((file) => !existsSync(file));
if (missing.length > 0) throw new Error(`vitest.unit.config.ts lists test files that do not exist: ${missing.join(', ')}`);

export default defineConfig({
  test: {
    include: unitTests,
    testTimeout: 30_000,
    env: { TETHER_TEST_TARGET: 'tether' },
  },
});
