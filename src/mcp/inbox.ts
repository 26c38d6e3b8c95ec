/**
 * What `ExecStdioClientTransport` hands to the MCP SDK, in order: the messages the remote
 * server wrote, then (when the transport ends with an error) an answer for every request still
 * waiting, and nothing after the transport has closed.
 */
import { ErrorCode, type JSONRPCMessage, type RequestId } from '@modelcontextprotocol/sdk/types.js';

export interface InboxSink {
  /** The SDK's `onmessage` (read at each delivery: the SDK installs it after construction). */
  message(message: JSONRPCMessage): void;
  /** A handler threw: reported, and delivery goes on. */
  error(error: Error): void;
}

export class Inbox {
  private queue: JSONRPCMessage[] = [];
  /** Ids of requests sent and not answered yet (see failPending). */
  private readonly pending = new Set<RequestId>();
  private delivering = false;
  private idleNow: Promise<void> = Promise.resolve();
  private markIdle: () => void = () => {};
  private closed = false;

  constructor(private readonly sink: InboxSink) {}

  /** Resolves once every message handed to deliver() so far has reached the sink. */
  get idle(): Promise<void> {
    return this.idleNow;
  }

  /** A request went out (it is answered by failPending if the transport ends first). */
  sent(id: RequestId): void {
    this.pending.add(id);
  }

  /** A request failed to go out: the SDK fails it with that error, so it is not answered again. */
  unsent(id: RequestId): void {
    this.pending.delete(id);
  }

  /**
   * Hands messages to the sink in order, letting one microtask pass after each one.
   * The SDK's Protocol dispatches notifications in a microtask but responses synchronously,
   * so a progress notification immediately followed by its response in the same chunk
   * would reach the Client after the response and be dropped (the request's progress
   * handler is already gone). After a reconnect, replayed output arrives exactly in such
   * bursts; yielding between messages keeps every notification ahead of what follows it.
   */
  deliver(messages: JSONRPCMessage[]): void {
    if (this.closed) return; // nothing reaches the Client after onclose
    this.queue.push(...messages);
    if (this.delivering) return;
    this.delivering = true;
    this.idleNow = new Promise((resolve) => (this.markIdle = resolve));
    void this.drain();
  }

  private async drain(): Promise<void> {
    try {
      while (this.queue.length > 0) {
        const message = this.queue.shift()!;
        if (!('method' in message) && 'id' in message && message.id !== undefined) this.pending.delete(message.id);
        try {
          this.sink.message(message);
        } catch (error) {
          this.sink.error(error instanceof Error ? error : new Error(String(error)));
        }
        await Promise.resolve();
      }
    } finally {
      this.delivering = false;
      this.markIdle();
    }
  }

  /**
   * Answers every request still waiting with an error that says why, before onclose: the
   * SDK would otherwise reject them all with a bare "Connection closed". Same code
   * (ConnectionClosed, -32000), so callers that test the code see no difference.
   */
  failPending(error: Error): void {
    const ids = [...this.pending];
    this.pending.clear();
    for (const id of ids) {
      try {
        this.sink.message({
          jsonrpc: '2.0',
          id,
          error: { code: ErrorCode.ConnectionClosed, message: `Connection closed: ${error.message}` },
        });
      } catch {
        // a throwing handler must not stop the others from being answered
      }
    }
  }

  /** onclose has fired: nothing more is delivered. */
  close(): void {
    this.closed = true;
  }
}
