/**
 * An MCP server under `tether mcp` across a crash of the tether server (issue #27, "Must
 * show"): a tool call is in flight (the fixture got it and answers 1.5 s later) when the
 * server is killed -9; a successor starts on the same port and state dir; the host gets the
 * answer exactly once, the fixture was called once (its own count, same pid), and the bridge
 * keeps working for the next call.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { spawnTether } from './helpers/cli.js';
import { node, repoRoot } from './helpers/mcp-peers.js';
import { startRestartableServer, watchOutput, type RestartableServer } from './helpers/restart.js';
import { serverUsers } from './helpers/server-process.js';

const TEST_TIMEOUT_MS = 45_000;
const FIXTURE = path.join(repoRoot, 'test/fixtures/slow-mcp-server.mjs');

let restartables: RestartableServer[] = [];
const cleanups: (() => void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) c();
  for (const r of restartables.splice(0)) await r.dispose();
});

interface Reply {
  id: number;
  result?: { content: { type: string; text: string }[] };
  error?: unknown;
}

/** The JSON-RPC replies the bridge wrote to its stdout so far (every line must be one message). */
function replies(stdout: string): Reply[] {
  return stdout
    .split('\n')
    .slice(0, -1) // complete lines only
    .map((line) => JSON.parse(line) as Reply)
    .filter((m) => m.id !== undefined);
}

describe.each(serverUsers())('tether mcp across kill -9 of the tether server (server runs as %s)', (user) => {
  it(
    'a call in flight is answered once, the tool ran once, and the next call works',
    async () => {
      const server = await startRestartableServer(user);
      restartables.push(server);
      const tag = randomUUID().slice(0, 8);
      const bridge = spawnTether(['mcp', '--url', server.url, '--recovery-deadline', '120s', '--', node, FIXTURE], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      cleanups.push(() => bridge.exitCode === null && bridge.kill('SIGKILL'));
      const out = watchOutput(bridge);
      const send = (m: object) => bridge.stdin!.write(`${JSON.stringify({ jsonrpc: '2.0', ...m })}\n`);
      const answered = (id: number) => out.waitStdout(new RegExp(`"id":${id}[,}]`));

      send({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'host', version: '0' } } });
      await answered(1);
      send({ method: 'notifications/initialized' });
      send({ id: 2, method: 'tools/call', params: { name: 'slow', arguments: { ms: 1500, tag } } });
      await out.waitStderr(`slow-start ${tag} 1\n`);
      expect(replies(out.stdout()).map((r) => r.id), 'the call is still in flight at the kill').toEqual([1]);

      await server.stop('SIGKILL');
      await server.successor();

      await answered(2);
      const slow = replies(out.stdout()).find((r) => r.id === 2)!;
      const slowText = slow.result?.content[0]?.text ?? JSON.stringify(slow);
      const done = new RegExp(`^slow ${tag} done: call 1 of pid (\\d+)$`).exec(slowText);
      expect(done, slowText).not.toBeNull();

      send({ id: 3, method: 'tools/call', params: { name: 'calls', arguments: {} } });
      await answered(3);
      const all = replies(out.stdout());
      expect(all.map((r) => r.id)).toEqual([1, 2, 3]); // each answered once
      expect(all[2]!.result?.content[0]?.text).toBe(`slow calls 1 pid ${done![1]}`);

      bridge.stdin!.end();
      const { code } = await out.closedWithin(20_000, () => `server: ${server.current.stderr().slice(-1500)}`);
      expect(code, out.stderr()).toBe(0);
      expect(replies(out.stdout()).map((r) => r.id)).toEqual([1, 2, 3]);
    },
    TEST_TIMEOUT_MS,
  );
});
