/**
 * An in-process MCP server (the SDK's McpServer over InMemoryTransport) behind a transport
 * factory the test steers: refuse connections, answer 401, exit during startup, die later,
 * fail or ignore pings. No timers of its own, so it works under vitest fake timers.
 */
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { TransportFactory } from '../../src/supervisor/index.js';

/** `version`: answers initialize (and server/discover) with -32022, refusing every protocol version. */
export type PeerMode = 'ok' | 'refuse' | 'auth' | 'exit' | 'hang' | 'version';
export type PingMode = 'ok' | 'error' | 'hang' | 'unsupported' | 'refuse';

export class MemoryMcpPeer {
  /** Transports the supervisor asked for (= connection attempts). */
  attempts = 0;
  mode: PeerMode = 'ok';
  ping: PingMode = 'ok';
  tools: string[] = ['echo'];
  /** tools/list requests seen (health fallback, discovery). */
  listToolsCalls = 0;
  pings = 0;
  /** tools/list answers an error (re-discovery failure). */
  failToolsList = false;
  private serverSide: InMemoryTransport | undefined;
  private server: McpServer | undefined;

  /** Adds a tool to the live server: the SDK announces it with notifications/tools/list_changed. */
  addTool(name: string): void {
    this.tools.push(name);
    this.server?.registerTool(name, { description: name }, async () => ({ content: [{ type: 'text', text: name }] }));
  }

  factory: TransportFactory = async () => {
    this.attempts++;
    if (this.mode === 'refuse') throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9'), { code: 'ECONNREFUSED' });
    if (this.mode === 'auth') throw new StreamableHTTPError(401, 'Error POSTing to endpoint: unauthorized');
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    if (this.mode === 'exit') {
      // Starts, then goes away before answering initialize: a process that exits at once.
      return new ExitingTransport(clientSide);
    }
    if (this.mode === 'hang') return new SwallowingTransport(clientSide, () => true, this);
    const server = new McpServer({ name: 'memory-peer', version: '1.0.0' });
    for (const name of this.tools) {
      server.registerTool(name, { description: name, inputSchema: { message: z.string().optional() } }, async ({ message }) => ({
        content: [{ type: 'text', text: `${name}: ${message ?? ''}` }],
      }));
    }
    await server.connect(serverSide);
    this.serverSide = serverSide;
    this.server = server;
    return new SwallowingTransport(clientSide, (msg) => this.intercept(msg), this);
  };

  /** The server goes away (process died / connection dropped). */
  async kill(): Promise<void> {
    const s = this.serverSide;
    this.serverSide = undefined;
    await s?.close();
  }

  /** Returns true to swallow an outgoing message; may answer it instead. */
  private intercept(msg: JSONRPCMessage): boolean | JSONRPCMessage {
    if (!('method' in msg) || !('id' in msg)) return false;
    if (this.mode === 'version' && (msg.method === 'initialize' || msg.method === 'server/discover')) {
      return { jsonrpc: '2.0', id: msg.id, error: { code: -32022, message: 'Unsupported protocol version: 2025-11-25', data: { supported: ['2026-07-28'] } } };
    }
    if (msg.method === 'tools/list') {
      this.listToolsCalls++;
      if (this.failToolsList) return { jsonrpc: '2.0', id: msg.id, error: { code: -32603, message: 'tools/list failed' } };
    }
    if (msg.method !== 'ping') return false;
    this.pings++;
    switch (this.ping) {
      case 'ok':
        return false;
      case 'hang':
        return true;
      case 'error':
        return { jsonrpc: '2.0', id: msg.id, error: { code: -32603, message: 'ping failed' } };
      case 'unsupported':
        return { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found' } };
      case 'refuse':
        throw Object.assign(new Error('fetch failed'), { name: 'TypeError', cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) });
    }
  }
}

/** Wraps the client side: outgoing messages can be swallowed or answered locally. */
class SwallowingTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  constructor(
    private readonly inner: InMemoryTransport,
    private readonly filter: (msg: JSONRPCMessage) => boolean | JSONRPCMessage,
    readonly peer: MemoryMcpPeer,
  ) {
    inner.onclose = () => this.onclose?.();
    inner.onerror = (e) => this.onerror?.(e);
    inner.onmessage = (m) => this.onmessage?.(m);
  }

  start(): Promise<void> {
    return this.inner.start();
  }

  async send(message: JSONRPCMessage): Promise<void> {
    const verdict = this.filter(message);
    if (verdict === true) return;
    if (verdict !== false) {
      queueMicrotask(() => this.onmessage?.(verdict));
      return;
    }
    return this.inner.send(message);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}

class ExitingTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  private closed = false;

  constructor(private readonly inner: InMemoryTransport) {}

  async start(): Promise<void> {
    await this.inner.start();
  }

  async send(): Promise<void> {
    // The process is gone by the time the first message arrives.
    queueMicrotask(() => void this.close());
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.onclose?.();
  }
}
