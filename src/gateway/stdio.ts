/**
 * `tether gateway --stdio`: the host's first message says its era. `initialize` (or anything
 * else of 2025) → the gateway's 2025 server, with its host session (sampling, elicitation,
 * roots, logging, subscriptions); `server/discover`, or a request carrying the 2026-07-28
 * `_meta` envelope → its 2026-07-28 server (modern-host.ts) under the SDK v2's `serveStdio`.
 * The first line is read, then replayed to the chosen server with everything after it.
 */
import { PassThrough, type Readable, type Writable } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Gateway } from './gateway.js';
import { createGatewayServer } from './mcp-server.js';
import { createModernGatewayServer } from './modern-host.js';

const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';
/** A first line longer than this is not a JSON-RPC opening we could read: served as 2025 (which answers it). */
const MAX_FIRST_LINE = 1 << 20;

export type HostEra = 'legacy' | 'modern';

export interface GatewayStdioOptions {
  input?: Readable;
  output?: Writable;
  /** The host closed stdin (either era). */
  onClose?: () => void;
}

/** The era a host's first message opens (pure). */
export function eraOfOpening(line: string): HostEra {
  let msg: { method?: unknown; params?: { _meta?: Record<string, unknown> } };
  try {
    msg = JSON.parse(line) as typeof msg;
  } catch {
    return 'legacy';
  }
  if (msg.method === 'server/discover') return 'modern';
  if (msg.method !== 'initialize' && typeof msg.params?._meta?.[PROTOCOL_VERSION_META_KEY] === 'string') return 'modern';
  return 'legacy';
}

/** Serves the gateway on stdio in the era the host opens with; resolves with that era once chosen. */
export async function serveGatewayStdio(gateway: Gateway, opts: GatewayStdioOptions = {}): Promise<HostEra> {
  const input = opts.input ?? process.stdin;
  const output = opts.output ?? process.stdout;
  const { head, ended } = await readFirstLine(input);
  const replay = new PassThrough();
  replay.write(head);
  if (ended) replay.end();
  else input.pipe(replay);
  replay.once('end', () => opts.onClose?.());
  const era = eraOfOpening(head.toString('utf8').split('\n')[0] ?? '');
  if (era === 'modern') {
    const { serveStdio, StdioServerTransport: ModernStdio } = await import('@modelcontextprotocol/server/stdio');
    serveStdio(() => createModernGatewayServer(gateway), { transport: new ModernStdio(replay, output), legacy: 'reject' });
  } else {
    const server = createGatewayServer(gateway);
    const transport = new StdioServerTransport(replay, output);
    await server.connect(transport);
  }
  return era;
}

/** Reads until the first newline (or the end, or MAX_FIRST_LINE); leaves the rest unread. */
function readFirstLine(input: Readable): Promise<{ head: Buffer; ended: boolean }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (ended: boolean) => {
      input.off('data', onData);
      input.off('end', onEnd);
      input.pause();
      resolve({ head: Buffer.concat(chunks), ended });
    };
    const onData = (chunk: Buffer | string) => {
      const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
      chunks.push(buf);
      size += buf.length;
      if (buf.includes(10) || size > MAX_FIRST_LINE) done(false);
    };
    const onEnd = () => done(true);
    input.on('data', onData);
    input.once('end', onEnd);
  });
}
