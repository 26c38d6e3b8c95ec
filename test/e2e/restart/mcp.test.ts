/**
 * An MCP server under `tether mcp` across a restart of the tether server (issue #27, "Must
 * show"): a tool call is in flight (the fixture got it and answers 1.5 s later) when the
 * server is killed -9 (or gets SIGTERM); another request is written while no server runs; a
 * successor starts on the same port and state dir; the host gets each answer exactly once,
 * the fixture saw the slow call once (its own count, same pid), and the bridge keeps working.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { spawnTether } from '../../helpers/cli.js';
import { node, repoRoot } from '../../helpers/mcp-peers.js';
import { restartingLine } from '../../../src/util/stop-notices.js';
import { ADOPT_WITHIN_MS, startRestartableServer, watchOutput, type RestartableServer } from '../../helpers/restart.js';
import { serverUsers } from '../../helpers/server-process.js';

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

describe.each(serverUsers())('tether mcp across a restart of the tether server (server runs as %s)', (user) => {
  for (const ending of ['SIGKILL', 'SIGTERM'] as const) {
    it(
      `${ending}: a call in flight is answered once, a call sent while no server runs too, the tool ran once, and the next call works`,
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
        const textOf = (id: number) => {
          const reply = replies(out.stdout()).find((r) => r.id === id)!;
          return reply.result?.content[0]?.text ?? JSON.stringify(reply);
        };

        send({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'host', version: '0' } } });
        await answered(1);
        send({ method: 'notifications/initialized' });
        send({ id: 2, method: 'tools/call', params: { name: 'slow', arguments: { ms: 1500, tag } } });
        await out.waitStderr(`slow-start ${tag} 1\n`);
        expect(replies(out.stdout()).map((r) => r.id), 'the call is still in flight at the stop').toEqual([1]);

        await server.stop(ending);
        // A request written while no server runs: the bridge holds it and sends it once.
        send({ id: 3, method: 'tools/call', params: { name: 'calls', arguments: {} } });
        await server.successor();

        await answered(2);
        await answered(3);
        const done = new RegExp(`^slow ${tag} done: call 1 of pid (\\d+)$`).exec(textOf(2));
        expect(done, textOf(2)).not.toBeNull();
        expect(textOf(3)).toBe(`slow calls 1 pid ${done![1]}`);

        send({ id: 4, method: 'tools/call', params: { name: 'calls', arguments: {} } });
        await answered(4);
        expect(textOf(4)).toBe(`slow calls 1 pid ${done![1]}`);
        expect(replies(out.stdout()).map((r) => r.id).sort()).toEqual([1, 2, 3, 4]); // each answered once

        bridge.stdin!.end();
        const { code } = await out.closedWithin(20_000, () => `server: ${server.current.stderr().slice(-1500)}`);
        expect(code, out.stderr()).toBe(0);
        expect(replies(out.stdout()).map((r) => r.id).sort()).toEqual([1, 2, 3, 4]);
        if (ending === 'SIGTERM') expect(out.stderr()).toContain(restartingLine(ADOPT_WITHIN_MS));
      },
      TEST_TIMEOUT_MS,
    );
  }
});
