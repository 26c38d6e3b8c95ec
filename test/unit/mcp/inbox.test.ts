/** The MCP transport's inbox (src/mcp/inbox.ts): order, a microtask between messages, pending requests answered once. */
import { describe, expect, it } from 'vitest';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { Inbox } from '../../../src/mcp/inbox.js';

function sink() {
  const got: JSONRPCMessage[] = [];
  const errors: Error[] = [];
  return { got, errors, inbox: new Inbox({ message: (m) => got.push(m), error: (e) => errors.push(e) }) };
}

describe('Inbox', () => {
  it('delivers in order, one message per microtask, and idle resolves after the last', async () => {
    const { got, inbox } = sink();
    inbox.deliver([{ jsonrpc: '2.0', method: 'notifications/progress' }, { jsonrpc: '2.0', id: 1, result: {} }]);
    expect(got).toHaveLength(1); // the response waits a microtask behind the notification
    inbox.deliver([{ jsonrpc: '2.0', id: 2, result: {} }]);
    await inbox.idle;
    expect(got.map((m) => ('id' in m ? m.id : 'n'))).toEqual(['n', 1, 2]);
  });

  it('answers only the requests still waiting when it fails them, and nothing reaches the sink after close', async () => {
    const { got, inbox } = sink();
    inbox.sent(1);
    inbox.sent(2);
    inbox.sent(3);
    inbox.unsent(3); // failed to go out: the SDK already failed it
    inbox.deliver([{ jsonrpc: '2.0', id: 1, result: {} }]);
    await inbox.idle;
    inbox.failPending(new Error('session lost'));
    expect(got).toEqual([
      { jsonrpc: '2.0', id: 1, result: {} },
      { jsonrpc: '2.0', id: 2, error: { code: -32000, message: 'Connection closed: session lost' } },
    ]);
    inbox.failPending(new Error('again'));
    inbox.close();
    inbox.deliver([{ jsonrpc: '2.0', id: 9, result: {} }]);
    await inbox.idle;
    expect(got).toHaveLength(2);
  });

  it('a throwing handler is reported and delivery goes on', async () => {
    const errors: Error[] = [];
    const got: unknown[] = [];
    const inbox = new Inbox({
      message: (m) => {
        if ('id' in m && m.id === 1) throw new Error('handler broke');
        got.push(m);
      },
      error: (e) => errors.push(e),
    });
    inbox.deliver([{ jsonrpc: '2.0', id: 1, result: {} }, { jsonrpc: '2.0', id: 2, result: {} }]);
    await inbox.idle;
    expect(errors.map((e) => e.message)).toEqual(['handler broke']);
    expect(got).toHaveLength(1);
  });
});
