/**
 * `tether relay` as a test target, in-process: a relay (its `server` is the downstream one:
 * tests that look inside a tether target see the relay's sessions) in front of an upstream
 * tether server (in-process) or the real Codex exec-server. The target's options are the
 * downstream's; the upstream runs with its defaults.
 */
import { startRelay, type Relay } from '../../src/relay/relay.js';
import type { TetherServer } from '../../src/server/index.js';
import type { Target, TargetOptions } from './target.js';

export interface RelayTarget extends Target {
  kind: 'relay:tether' | 'relay:codex';
  /** The relay's own (downstream) server. */
  server: TetherServer;
  relay: Relay;
  upstream: Target;
}

export async function startRelayTarget(upstreamKind: 'tether' | 'codex', options: TargetOptions = {}): Promise<RelayTarget> {
  const upstream =
    upstreamKind === 'codex'
      ? await (await import('./codex.js')).startCodexServer({})
      : await (await import('./tether.js')).startTetherServer({});
  const log = process.env.TETHER_TEST_LOG ? (level: string, msg: string) => process.stderr.write(`[relay ${level}] ${msg}\n`) : undefined;
  const relay = await startRelay({
    to: upstream.url,
    upstream: { log: log && ((m) => log('warn', m)) },
    server: { ...options, port: options.port ?? 0, logger: log },
  });
  return {
    kind: `relay:${upstreamKind}`,
    url: relay.url,
    server: relay.server,
    relay,
    upstream,
    async stop() {
      await relay.close();
      await upstream.stop();
    },
  };
}
