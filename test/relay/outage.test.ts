/**
 * `tether relay` while its upstream is down: a downstream session closed during the outage
 * costs the upstream nothing (no retries left running, no upstream session opened at
 * recovery), so the sessions still open (the innocents) are served once it is back.
 *
 * Scaled down from the measured case (8,317 sessions created and closed during a 50 s
 * outage, ~2,900 upstream sessions opened at once at recovery, 19 of 30 innocents refused by
 * the upstream's 256-per-token cap) to 60 sessions against a cap of 8, each expired as soon
 * as its client leaves (a session TTL of 1 ms downstream). The upstream is
 * a tether server spoken to in the Codex dialect (no `sessionClose`, as in front of Codex): an
 * upstream session the relay opens and closes stays detached there for its TTL and holds a
 * slot of the cap, so every closed session that still reaches the upstream at recovery takes
 * one, whatever the timing. Loopback only; the outage is the proxy refusing connections.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { ExecClient } from '../../src/client/index.js';
import { startRelay, type Relay } from '../../src/relay/relay.js';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { collect } from '../helpers/client-util.js';
import { serverInternals } from '../../src/server/server.js';

const CAP = 8;

/** Waits (bounded) for a condition that has no event (the relay's count of opens). */
async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const INNOCENTS = 4;
const CHURN = 60;

let upstream: TetherServer;
let proxy: ChaosProxy;
let relay: Relay | undefined;

beforeEach(async () => {
  // Its own upstream each: sessions a test leaves detached there hold slots of its cap.
  upstream = await startServer({ port: 0, maxSessionsPerToken: CAP });
  proxy = await ChaosProxy.inFrontOf(upstream.url);
});

afterEach(async () => {
  await relay?.close();
  relay = undefined;
  await proxy?.close();
  await upstream?.close();
});

describe('tether relay, upstream down', () => {
  it('drops the upstream work of sessions closed during an outage: the open ones are served after it', async () => {
    // A Codex-dialect client's session ends when it leaves (no resume awaited): each churned
    // session expires as soon as its client closes, as a closed one would.
    const churning = (relay = await startRelay({ to: proxy.url, upstream: { recoveryDeadlineMs: 60_000, extensions: [] }, server: { sessionTtlMs: 1 } }));
    const before = serverInternals(upstream).sessions.size; // the relay's probe, left detached (no sessionClose)
    proxy.refuse(true);
    let expired = 0;
    let allExpired: () => void = () => {};
    const churned = new Promise<void>((resolve) => (allExpired = resolve));
    churning.server.on('session-expired', () => ++expired === CHURN && allExpired());
    const innocents = await Promise.all(Array.from({ length: INNOCENTS }, (_, i) => ExecClient.connect(churning.url, { clientName: `innocent-${i}` })));
    for (let i = 0; i < CHURN; i++) {
      const churn = await ExecClient.connect(churning.url, { clientName: `churn-${i}` });
      await churn.close();
    }
    await churned;
    expect(churning.backend.openSessions).toBe(INNOCENTS);
    // The opens of the churned sessions end as their attempt in flight is refused; then only
    // the open sessions have upstream work left.
    await until(() => churning.backend.opening.inFlight === INNOCENTS, 'only the open sessions are being opened');
    expect(churning.backend.opening).toEqual({ inFlight: INNOCENTS, queued: 0 });
    proxy.refuse(false);
    const outputs = await Promise.all(innocents.map((client, i) => collect(client.spawn(['sh', '-c', `echo served ${i}`]).stdout)));
    expect(outputs).toEqual(innocents.map((_, i) => `served ${i}\n`));
    // No session closed during the outage reached the upstream.
    expect(serverInternals(upstream).sessions.size - before).toBe(INNOCENTS);
    await Promise.all(innocents.map((c) => c.close()));
  });

  it('opens at most maxOpening upstream sessions at once while the upstream is down, the rest in order after it', async () => {
    const gated = (relay = await startRelay({ to: proxy.url, upstream: { recoveryDeadlineMs: 60_000, maxOpening: 2 } }));
    {
      proxy.refuse(true);
      const clients = await Promise.all(Array.from({ length: 6 }, (_, i) => ExecClient.connect(gated.url, { clientName: `live-${i}` })));
      expect(gated.backend.opening).toEqual({ inFlight: 2, queued: 4 });
      proxy.refuse(false);
      const outputs = await Promise.all(clients.map((client, i) => collect(client.spawn(['sh', '-c', `echo served ${i}`]).stdout)));
      expect(outputs).toEqual(clients.map((_, i) => `served ${i}\n`));
      expect(gated.backend.opening).toEqual({ inFlight: 0, queued: 0 });
      await Promise.all(clients.map((c) => c.close()));
    }
  });

  it('a session waiting its turn is lost at the recovery deadline counted from its creation, with the reason', async () => {
    const logs: string[] = [];
    const gated = (relay = await startRelay({ to: proxy.url, upstream: { recoveryDeadlineMs: 1_000, maxOpening: 1, log: (m) => logs.push(m) } }));
    {
      proxy.refuse(true);
      let expired = 0;
      let allExpired: () => void = () => {};
      const gone = new Promise<void>((resolve) => (allExpired = resolve));
      gated.server.on('session-expired', () => ++expired === 3 && allExpired());
      const clients = await Promise.all(Array.from({ length: 3 }, (_, i) => ExecClient.connect(gated.url, { clientName: `late-${i}`, recoveryDeadlineMs: 1_000 })));
      await gone; // all three lost
      expect(gated.backend.opening).toEqual({ inFlight: 0, queued: 0 });
      expect(logs.filter((m) => /^cannot open an upstream session: /.test(m))).toHaveLength(3);
      // The two that waited their turn were ended by the deadline counted from their creation
      // (the first, in flight, by its client's own deadline or that one, whichever came first).
      expect(logs.filter((m) => /not reached within 1s \(the recovery deadline\)/.test(m)).length).toBeGreaterThanOrEqual(2);
      await Promise.all(clients.map((c) => c.close().catch(() => {})));
    }
  });
});
