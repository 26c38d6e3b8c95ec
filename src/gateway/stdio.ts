/**
 * `tether gateway --stdio`: the host's first message says its era. `initialize` (or anything
 * else of 2025) → the gateway's 2025 server, with its host session (sampling, elicitation,
 * roots, logging, subscriptions); `server/discover`, or a request carrying the 2026-07-28
 * `_meta` envelope → its 2026-07-28 server (modern-host.ts) under the SDK v2's `serveStdio`.
 * The first line is read, then replayed to the chosen server with everything after it.
 */
import { PassThrough, Writable, type Readable } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { Gateway } from './gateway.js';
import { createGatewayServer } from './mcp-server.js';
import { createModernGatewayServer } from './modern-host.js';

const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';
/** A first line longer than this is not a JSON-RPC opening we could read: served as 2025 (which answers it). */
const MAX_FIRST_LINE = 1 << 20;
/**
 * What stdout may hold unread by the host before the gateway stops reading stdin: above it,
 * stdin is paused (further requests wait in the host's pipe) until stdout drains. The answers
 * to requests already read still come on top of it.
 */
const STDOUT_HIGH_MARK = 1 << 20;

export type HostEra = 'legacy' | 'modern';

export interface GatewayStdioOptions {
  input?: Readable;
  output?: Writable;
  /** The host closed stdin (either era). */
  onClose?: () => void;
  /** stdout went over STDOUT_HIGH_MARK (`held`, stdin paused) or drained (stdin read again). */
  onHold?: (held: boolean, unread: number) => void;
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
  const gated = gateInput(input, replay, output, opts.onHold);
  if (ended) replay.end();
  else gated.start();
  replay.once('end', () => opts.onClose?.());
  const era = eraOfOpening(head.toString('utf8').split('\n')[0] ?? '');
  if (era === 'modern') {
    const { serveStdio, StdioServerTransport: ModernStdio } = await import('@modelcontextprotocol/server/stdio');
    serveStdio(() => createModernGatewayServer(gateway), { transport: new ModernStdio(replay, gated.output), legacy: 'reject' });
  } else {
    const server = createGatewayServer(gateway);
    const transport = new StdioServerTransport(replay, gated.output);
    await server.connect(transport);
  }
  return era;
}

/**
 * Backpressure from stdout to stdin. The transports are handed `output`, which takes every
 * message at once (so they never wait for 'drain': one listener each would pile up on stdout)
 * and passes it on; while stdout holds more than STDOUT_HIGH_MARK, stdin is paused, with one
 * 'drain' listener to read it again. stdin is also paused while the replay stream is full.
 */
function gateInput(input: Readable, replay: PassThrough, stdout: Writable, onHold?: (held: boolean, unread: number) => void) {
  let outputHeld = false;
  let replayHeld = false;
  const update = () => {
    if (outputHeld || replayHeld) input.pause();
    else input.resume();
  };
  const onStdoutDrain = () => {
    outputHeld = false;
    onHold?.(false, stdout.writableLength);
    update();
  };
  const onReplayDrain = () => {
    replayHeld = false;
    update();
  };
  const output = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      stdout.write(chunk);
      if (!outputHeld && stdout.writableLength > STDOUT_HIGH_MARK) {
        outputHeld = true;
        stdout.once('drain', onStdoutDrain);
        onHold?.(true, stdout.writableLength);
        update();
      }
      callback();
    },
  });
  // stdout's errors (EPIPE: the host went away) reach the transports as before.
  stdout.on('error', (err) => output.destroy(err));
  const start = () => {
    input.on('data', (chunk: Buffer) => {
      if (!replay.write(chunk) && !replayHeld) {
        replayHeld = true;
        replay.once('drain', onReplayDrain);
        update();
      }
    });
    input.once('end', () => replay.end());
    update();
  };
  return { output, start };
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
