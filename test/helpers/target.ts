/**
 * The server under test. Suites named `*.both.test.ts` are written once against this seam
 * and run against tether (`npm test`) and the real Codex exec-server (`npm run test:interop`).
 */
export type TargetKind = 'tether' | 'codex';

export const targetKind: TargetKind = process.env.TETHER_TEST_TARGET === 'codex' ? 'codex' : 'tether';
export const isCodex = targetKind === 'codex';

export interface TargetOptions {
  /** Bearer token the server requires (both servers support it). */
  token?: string;
  /** tether only: detached-session TTL (Codex keeps about 80 s and cannot be told). */
  sessionTtlMs?: number;
  /** tether only: per-process output retention in bytes. */
  outputRetentionBytes?: number;
  /** tether only: how long a closed process stays readable. */
  closedRetentionMs?: number;
  /** Fixed port (for restart scenarios); default any free port. */
  port?: number;
}

export interface Target {
  kind: TargetKind;
  /** ws://127.0.0.1:PORT */
  url: string;
  /** Pids of every live child process the server started (for orphan checks), if knowable. */
  stop(): Promise<void>;
}

export async function startTarget(options: TargetOptions = {}): Promise<Target> {
  if (isCodex) {
    const { startCodexServer } = await import('./codex.js');
    return startCodexServer(options);
  }
  const { startTetherServer } = await import('./tether.js');
  return startTetherServer(options);
}
