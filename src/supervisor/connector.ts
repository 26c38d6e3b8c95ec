/**
 * One connection attempt of a supervisor: a fresh transport and client, initialize bounded
 * by connectTimeoutMs, then discovery into the catalog. A failed attempt is classified and
 * described (diagnosis.ts) and its half-open connection closed; what to do next is the
 * supervisor's (and its retry policy's) decision.
 *
 * The protocol era: the first attempt speaks 2025 (`initialize`), which every server of
 * either era answers, a 2026-07-28-only one with -32022; then, in the same attempt, a
 * fresh transport speaks 2026-07-28. The era that connected is kept (`era`) and tried first
 * next time. A server is never sent a `server/discover` probe it does not know, so none can
 * die of one; and a dual server is spoken to in 2025, where its own requests (sampling,
 * elicitation, roots) are plain requests the gateway forwards as it always has.
 */
import type { Catalog } from './catalog.js';
import { closeQuietly, createConnection, initialize, type Connection, type ConnectionContext, type ConnectionWatcher, type Era } from './transport/connection.js';
import { classifyFailure, describeFailure } from './diagnosis.js';
import type { FailureKind } from './policy.js';
import { watchTetherLink, type TetherLinkListener } from './tether-link.js';
import type { TransportFactory } from './transport/transports.js';
import type { ServerSpec } from './types.js';

export type AttemptOutcome = { ok: true; conn: Connection } | { ok: false; failure: FailureKind; reason: string };

export interface ConnectorParts {
  spec: ServerSpec;
  factory: TransportFactory;
  context: ConnectionContext;
  connectTimeoutMs: number;
  /** Discovery fills it (lists, capabilities, server info). */
  catalog: Catalog;
  /** Hears every connection's close, errors and list changes. */
  watcher: ConnectionWatcher;
  /** exec: what hears the tether link under `conn` once it is open. */
  linkListener: (conn: Connection) => TetherLinkListener;
}

export class Connector {
  /** The connection an attempt is opening, so stop() can abort it instead of waiting. */
  opening: Connection | null = null;
  /** The era that last connected (tried first), or null before any did. */
  era: Era | null = null;
  private seq = 0;

  constructor(private readonly parts: ConnectorParts) {}

  /** Opens and discovers, in the known era or else both in turn; never throws (a failure is an outcome). */
  async attempt(): Promise<AttemptOutcome> {
    const first: Era = this.era ?? 'legacy';
    const outcome = await this.attemptIn(first);
    if (outcome.ok || outcome.failure !== 'refused') return outcome;
    const other: Era = first === 'legacy' ? 'modern' : 'legacy';
    const second = await this.attemptIn(other);
    // Both refused: say what each era was told.
    if (!second.ok && second.failure === 'refused') return { ...second, reason: `${eraName(first)}: ${outcome.reason}; ${eraName(other)}: ${second.reason}` };
    return second;
  }

  private async attemptIn(era: Era): Promise<AttemptOutcome> {
    const { spec, catalog } = this.parts;
    let conn: Connection | undefined;
    try {
      conn = await this.open(era);
      await catalog.discover(conn.client);
      if (conn.closed) throw conn.errors.at(-1) ?? new Error('connection closed during discovery');
    } catch (err) {
      conn ??= (err as { connection?: Connection } | undefined)?.connection;
      const failure = classifyFailure(spec.kind, err, conn);
      if (conn && !conn.closedByUs) {
        conn.closedByUs = true;
        void closeQuietly(conn.client);
      }
      return { ok: false, failure, reason: describeFailure(spec, err, conn, failure) };
    }
    this.era = era;
    return { ok: true, conn };
  }

  /** Creates transport + client and runs initialize, all bounded by connectTimeoutMs. */
  private async open(era: Era): Promise<Connection> {
    const { spec, factory, context, watcher, connectTimeoutMs } = this.parts;
    const transport = await factory(spec, era);
    const conn = createConnection(++this.seq, transport, context, watcher, era);
    this.opening = conn;
    try {
      await initialize(conn, connectTimeoutMs);
    } finally {
      if (this.opening === conn) this.opening = null;
    }
    if (spec.kind === 'exec') watchTetherLink(transport, this.parts.linkListener(conn));
    return conn;
  }
}

function eraName(era: Era): string {
  return era === 'legacy' ? '2025-11-25 (initialize)' : '2026-07-28 (server/discover)';
}
