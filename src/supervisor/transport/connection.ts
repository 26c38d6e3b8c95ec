/**
 * One connection of a supervisor to its MCP server: a fresh SDK Client over a fresh
 * transport, with what it reported (errors, stderr, stray stdout) kept to explain its end;
 * and the two ways to end one (politely, bounded; or at once).
 */
import type { Readable } from 'node:stream';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { PromptListChangedNotificationSchema, ResourceListChangedNotificationSchema, ToolListChangedNotificationSchema, type Implementation } from '@modelcontextprotocol/sdk/types.js';
import { InvalidLineError } from '../../mcp/framing.js';
import { settleWithin, withTimeout } from '../../util/timeouts.js';
import { bridgeToHosts, CLIENT_CAPABILITIES } from './host-bridge.js';
import { createModernClient } from './modern-client.js';
import { STDERR_KEEP_BYTES } from '../stderr-summary.js';
import type { Logger, SupervisorHooks } from '../types.js';

/** One live (or dying) connection: a fresh SDK Client over a fresh transport. */
/** The MCP protocol era a connection speaks: 2025-11-25 and before (`initialize`), or 2026-07-28. */
export type Era = 'legacy' | 'modern';

export interface Connection {
  id: number;
  /** A v1 SDK Client (legacy), or a v2 one pinned to 2026-07-28 (modern-client.ts) with the same methods. */
  client: Client;
  era: Era;
  transport: Transport;
  /** We closed it (stop, forced reconnect, or after detecting a loss ourselves). */
  closedByUs: boolean;
  /** The transport reported close. */
  closed: boolean;
  /** Errors the transport reported, newest last; they explain a close (auth? session lost?). */
  errors: Error[];
  /** The last STDERR_KEEP_BYTES the server wrote to stderr; they explain a crash. */
  stderrTail: string;
  /** The first lines the server wrote to stdout that were not JSON-RPC. */
  invalidStdout: string[];
  /**
   * exec: the tether server refuses the connection while the session may still resume
   * (the reason), or null. The connection is kept; the status says `reconnecting`.
   */
  linkDown: string | null;
}

/** Non-JSON stdout lines kept per connection to explain a server that never answers. */
const INVALID_STDOUT_KEPT = 3;
/** Transport errors kept per connection. */
const ERRORS_KEPT = 10;

/** What a supervisor hears from one of its connections. */
export interface ConnectionWatcher {
  /** The transport closed (`conn.closed` is set). */
  onClose(conn: Connection): void;
  /** The transport reported an error (kept in `conn.errors`; stray stdout lines are not errors). */
  onError(conn: Connection, error: Error): void;
  /** The server announced that one of its lists changed. */
  onListChanged(conn: Connection, list: 'tools' | 'resources' | 'prompts'): void;
}

export interface ConnectionContext {
  name: string;
  clientInfo: Implementation;
  hooks: SupervisorHooks;
  log: Logger;
}

/** A fresh SDK Client of `era` over `transport` (not connected yet), watched by `watcher`. */
export function createConnection(id: number, transport: Transport, ctx: ConnectionContext, watcher: ConnectionWatcher, era: Era = 'legacy'): Connection {
  const conn: Connection = { id, client: undefined as unknown as Client, era, transport, closedByUs: false, closed: false, errors: [], stderrTail: '', invalidStdout: [], linkDown: null };
  const client = era === 'modern'
    ? createModernClient(ctx.clientInfo, ctx.name, ctx.hooks, { onListChanged: (list) => watcher.onListChanged(conn, list) })
    : new Client(ctx.clientInfo, { capabilities: CLIENT_CAPABILITIES });
  conn.client = client;
  tailStderr(conn, ctx.log, ctx.name);
  client.onclose = () => {
    conn.closed = true;
    watcher.onClose(conn);
  };
  client.onerror = (error) => {
    if (noteTransportError(conn, error, ctx.log, ctx.name)) watcher.onError(conn, error);
  };
  if (era === 'modern') return conn; // its handlers are set by modern-client.ts
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => watcher.onListChanged(conn, 'tools'));
  client.setNotificationHandler(ResourceListChangedNotificationSchema, () => watcher.onListChanged(conn, 'resources'));
  client.setNotificationHandler(PromptListChangedNotificationSchema, () => watcher.onListChanged(conn, 'prompts'));
  bridgeToHosts(client, ctx.name, ctx.hooks);
  return conn;
}

/**
 * Runs initialize on a fresh connection, bounded by `timeoutMs`. A failure carries the
 * half-open connection (`connection`): the caller needs it to classify the failure and close it.
 */
export async function initialize(conn: Connection, timeoutMs: number): Promise<void> {
  try {
    await withTimeout(conn.client.connect(conn.transport, { timeout: timeoutMs }), timeoutMs, 'connection attempt');
  } catch (err) {
    throw Object.assign(err instanceof Error ? err : new Error(String(err)), { connection: conn });
  }
}

/**
 * Keeps an error the transport reported. Returns false for a stray stdout line (kept apart:
 * not a transport problem, but the likeliest reason a server never answers).
 */
function noteTransportError(conn: Connection, error: Error, log: Logger, name: string): boolean {
  if (error instanceof InvalidLineError) {
    if (conn.invalidStdout.length < INVALID_STDOUT_KEPT) conn.invalidStdout.push(error.line);
    log('debug', `[${name}] ${error.message}`);
    return false;
  }
  conn.errors.push(error);
  if (conn.errors.length > ERRORS_KEPT) conn.errors.shift();
  return true;
}

/** Keeps the tail of the server's stderr on the connection and logs its lines at debug. */
function tailStderr(conn: Connection, log: Logger, name: string): void {
  const stderr = (conn.transport as { stderr?: Readable | null }).stderr;
  if (!stderr || typeof stderr.on !== 'function') return;
  let partial = '';
  stderr.setEncoding?.('utf8');
  stderr.on('data', (chunk: string | Buffer) => {
    const text = chunk.toString();
    conn.stderrTail = (conn.stderrTail + text).slice(-STDERR_KEEP_BYTES);
    const lines = (partial + text).split('\n');
    partial = (lines.pop() ?? '').slice(-STDERR_KEEP_BYTES);
    for (const line of lines) if (line.trim()) log('debug', `[${name}] stderr: ${line}`);
  });
  stderr.on('error', () => {});
}

/** The server process id of a local stdio server, or null. */
export function pidOf(conn: Connection | null): number | null {
  const pid = (conn?.transport as { pid?: unknown } | undefined)?.pid;
  return typeof pid === 'number' ? pid : null;
}

/** Ends a connection now: a local server's process group is killed, a remote session closed. */
export function forceClose(conn: Connection): void {
  const transport = conn.transport as { kill?: () => void; client?: { close?: () => Promise<void> } };
  try {
    transport.kill?.();
  } catch {
    // already gone
  }
  void transport.client?.close?.().catch(() => {});
}

/**
 * Closes a client, waiting at most `timeoutMs`: a remote server whose tether link is down can
 * take its recovery deadline to close, and stop() must not hang on it (the tether server ends
 * the process when the session expires).
 */
export async function closeQuietly(client: Client, timeoutMs = 5000): Promise<void> {
  // Already closed or never opened: nothing to release (settleWithin never rejects).
  await settleWithin(client.close(), timeoutMs);
}
