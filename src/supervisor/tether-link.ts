/**
 * The one place the supervisor listens to a tether ExecClient (the client under an exec
 * server's transport): its `retry` and `state` events, typed by ExecClient's own event map.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { ExecClientEventMap } from '../client/client.js';

export type TetherLinkEvents = Pick<ExecClientEventMap, 'retry' | 'state'>;
export type LinkRetry = TetherLinkEvents['retry'][0];
export type LinkStateChange = TetherLinkEvents['state'][0];

export interface TetherLinkListener {
  /** A recovery attempt failed (`error` says why; a refusal means nobody listens). */
  onRetry(event: LinkRetry): void;
  /** The session changed state (recovering, connected again, failed). */
  onState(change: LinkStateChange): void;
}

/** What the adapter needs of the client: subscribing to those two events. */
interface LinkEmitter {
  on<K extends keyof TetherLinkEvents>(event: K, listener: (...args: TetherLinkEvents[K]) => void): unknown;
}

/**
 * Subscribes `listener` to the ExecClient under `transport` (ExecStdioClientTransport's
 * `client`). False when the transport has none (not an exec transport, or a test's stand-in).
 */
export function watchTetherLink(transport: Transport, listener: TetherLinkListener): boolean {
  const client = (transport as { client?: Partial<LinkEmitter> }).client;
  if (!client || typeof client.on !== 'function') return false;
  const emitter = client as LinkEmitter;
  emitter.on('retry', (event) => listener.onRetry(event));
  emitter.on('state', (change) => listener.onState(change));
  return true;
}
