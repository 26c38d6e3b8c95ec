/**
 * The server under test. Suites named `*.both.test.ts` are written once against this seam
 * and run against tether (`npm test`), the real Codex exec-server (`npm run test:interop`),
 * and `tether relay` in front of either (`npm run test:relay`, `npm run test:relay-codex`):
 * a relay is held to its upstream's expectations (`isCodex` for a relay in front of Codex).
 */
export type TargetKind = 'tether' | 'codex' | 'relay:tether' | 'relay:codex';

const KINDS: readonly TargetKind[] = ['tether', 'codex', 'relay:tether', 'relay:codex'];
const asked = process.env.TETHER_TEST_TARGET as TargetKind | undefined;
export const targetKind: TargetKind = asked && KINDS.includes(asked) ? asked : 'tether';
/** The server the client ends up talking to behaves as Codex's (directly, or behind a relay). */
export const isCodex = targetKind === 'codex' || targetKind === 'relay:codex';
/** A relay stands between the client and the server. */
export const isRelay = targetKind === 'relay:tether' || targetKind === 'relay:codex';

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
  if (isRelay) {
    const { startRelayTarget } = await import('./relay.js');
    return startRelayTarget(targetKind === 'relay:codex' ? 'codex' : 'tether', options);
  }
  if (isCodex) {
    const { startCodexServer } = await import('./codex.js');
    return startCodexServer(options);
  }
  const { startTetherServer } = await import('./tether.js');
  return startTetherServer(options);
}
