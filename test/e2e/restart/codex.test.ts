/**
 * The Codex dialect across a crash or restart of the server (issue #27, "Must show"): a client without
 * tether extensions starts a paced producer with `process/start` and reads it only with
 * `process/read`; the server is killed -9 (or gets SIGTERM) mid-output; a successor starts on the same port and
 * state dir; the client resumes its session (`resumeSessionId`) and reads on from the last seq
 * it had: every line once and in order, the seqs continuing those it saw, and exit code 7.
 */
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { RawClient } from '../../helpers/raw-client.js';
import { startRestartableServer, type RestartableServer } from '../../helpers/restart.js';
import { serverUsers } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 45_000;
const LINES = 60;
const EXPECTED = Array.from({ length: LINES }, (_, i) => `line ${i + 1}\n`).join('');
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

let restartables: RestartableServer[] = [];
let clients: RawClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) await c.drop().catch(() => {});
  for (const r of restartables.splice(0)) await r.dispose();
});

interface ReadResult {
  chunks: { seq: number; stream: string; chunk: string }[];
  nextSeq: number;
  exited: boolean;
  exitCode: number | null;
  closed: boolean;
}

/** What a Codex client keeps of one process: chunks by seq, and the last seq it had. */
class Reader {
  afterSeq = 0;
  readonly seqs: number[] = [];
  stdout = '';
  last: ReadResult | undefined;

  /** One `process/read` (long-polling up to 1 s); every chunk must be new and in order. */
  async read(client: RawClient, processId: string): Promise<ReadResult> {
    const result = await client.request<ReadResult>('process/read', { processId, afterSeq: this.afterSeq, maxBytes: null, waitMs: 1000 });
    for (const c of result.chunks) {
      expect(c.seq, 'a chunk already read, or out of order').toBeGreaterThan(this.afterSeq);
      this.seqs.push(c.seq);
      this.afterSeq = c.seq;
      if (c.stream === 'stdout') this.stdout += Buffer.from(c.chunk, 'base64').toString();
    }
    this.last = result;
    return result;
  }
}

describe.each(serverUsers())('a Codex client (process/start, process/read) across a restart of the server (server runs as %s)', (user) => {
  for (const ending of ['SIGKILL', 'SIGTERM'] as const) {
    it(
      `${ending}: resumes its session on the successor and reads every line once, in order, and exit code 7`,
      async () => {
        const server = await startRestartableServer(user);
        restartables.push(server);
        const first = await RawClient.connect(server.url);
        clients.push(first);
        const { sessionId } = await first.handshake('codex-environment');
        const marker = `codex-producer-${randomUUID()}`;
        const producer = `for i in $(seq 1 ${LINES}); do echo "line $i"; sleep 0.05; done; exit 7`;
        await first.request('process/start', { processId: 'p', argv: ['sh', '-c', producer, marker], cwd: 'file:///tmp', env: ENV, tty: false });

        const reader = new Reader();
        const deadline = Date.now() + 15_000;
        while (!reader.stdout.includes('line 10\n')) {
          expect(Date.now() < deadline, `line 10 within 15 s; got ${reader.stdout}`).toBe(true);
          await reader.read(first, 'p');
        }
        expect(reader.last!.exited).toBe(false); // mid-output
        // A long-poll read sent just before the kill (its answer, if it comes, is not used:
        // the client reads on from the last seq it had, as Codex does).
        void first.call('process/read', { processId: 'p', afterSeq: reader.afterSeq, maxBytes: null, waitMs: 30_000 });

        await server.stop(ending);
        await first.closed;
        await server.successor();

        const second = await RawClient.connect(server.url);
        clients.push(second);
        const resumed = await second.handshake('codex-environment', sessionId);
        expect(resumed.sessionId).toBe(sessionId);
        while (!reader.last!.closed) {
          expect(Date.now() < deadline + 20_000, `closed within the test; got ${reader.stdout}`).toBe(true);
          await reader.read(second, 'p');
        }
        expect(reader.stdout).toBe(EXPECTED);
        expect(reader.last).toMatchObject({ exited: true, exitCode: 7, closed: true });
        // One sequence: strictly increasing, and the close is the last seq.
        expect([...reader.seqs].sort((a, b) => a - b)).toEqual(reader.seqs);
        expect(reader.last!.nextSeq).toBeGreaterThan(reader.afterSeq);
      },
      TEST_TIMEOUT_MS,
    );
  }
});
