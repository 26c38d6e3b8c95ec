/**
 * The end of a child's stdin on the kept path (a state dir: stdin goes to the keeper as frames
 * answered on its `took`) survives a cut at every step, and the interleaving that lost it:
 *
 * - `tether exec sh -c 'sha256sum; exit 7' < FILE` through the chaos proxy, the link cut once
 *   at one step of the stdin close, triggered by the traffic itself (the server receiving the
 *   last data write, the close request on its way up, the server applying it, the keeper
 *   taking the eof, the child's output, its exit, its close): the child gets its end of input
 *   exactly once, after every byte (its hash is the file's, printed once), and the client
 *   exits with the child's status. The file and where an upward cut falls are seeded.
 * - The interleaving found: the keeper reads the last data frame and the eof together, and
 *   writes that frame to the command at once. It used to leave the eof unparsed while polling
 *   nothing for it: the command never got its end of file. Made certain here by stopping the
 *   keeper (SIGSTOP) while both arrive, so they wait in its socket together.
 *
 * Bounded: every run has a deadline that reports a hang; loopback only.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, openSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ChaosProxy } from '../../../../src/chaos/proxy.js';
import { seededRandom } from '../../../../src/chaos/random.js';
import { ChildStdin } from '../../../../src/server/output/child-stdin.js';
import { FramedStdin } from '../../../../src/server/local/keeper/kept.js';
import { ManagedProcess } from '../../../../src/server/output/process.js';
import { b64, RawClient } from '../../../helpers/raw-client.js';
import { spawnTether } from '../../../helpers/cli.js';
import { startTetherServer, type TetherTarget } from '../../../helpers/tether.js';
import { serverInternals } from '../../../../src/server/server.js';

const CHILD = ['sh', '-c', 'sha256sum; exit 7'];
/** A run that has not ended by then hangs (a healthy one takes well under a second here). */
const RUN_DEADLINE_MS = 20_000;

let target: TetherTarget;
let proxy: ChaosProxy;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'tether-kept-stdin-'));
  target = await startTetherServer({ stateDir: join(dir, 'state'), adoptWithinMs: 5_000 });
  proxy = await ChaosProxy.inFrontOf(target.url);
});

afterAll(async () => {
  vi.restoreAllMocks();
  await proxy?.close();
  await target?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/**
 * Seeded bytes, 3 to 15 reads of 64 KiB and a shorter last one (its frame and the eof then
 * fit in one read of the keeper's): several writes, then the close.
 */
function payload(seed: number): Buffer {
  const random = seededRandom(seed);
  const size = 64 * 1024 * (3 + Math.floor(random() * 12)) + 1 + Math.floor(random() * 50_000);
  const out = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i++) out[i] = Math.floor(random() * 256);
  return out;
}

/** `tether exec` of CHILD with `file` as its stdin, through the proxy; bounded. */
async function exec(file: string): Promise<{ code: number | null; stdout: string; stderr: string; hung: boolean }> {
  const input = openSync(file, 'r');
  const child = spawnTether(['exec', '--url', proxy.url, ...CHILD], { stdio: [input, 'pipe', 'pipe'] });
  closeSync(input);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d));
  child.stderr!.on('data', (d: Buffer) => (stderr += d));
  let hung = false;
  const deadline = setTimeout(() => {
    hung = true;
    child.kill('SIGKILL');
  }, RUN_DEADLINE_MS);
  const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
  clearTimeout(deadline);
  return { code, stdout, stderr, hung };
}

/** Where in a stdin close the link is cut: the trigger, seen on the server as the traffic arrives. */
type Step =
  | 'last data write arrives'
  | 'last data write arrives, keeper slow'
  | 'close request on its way'
  | 'close applied'
  | 'keeper took the eof'
  | 'output'
  | 'exit'
  | 'closed';
const STEPS: Step[] = [
  'last data write arrives',
  'last data write arrives, keeper slow',
  'close request on its way',
  'close applied',
  'keeper took the eof',
  'output',
  'exit',
  'closed',
];

/** The pid of the keeper running CHILD now (the parent of its command, a running `sh`). */
function runningKeeper(): number {
  for (const pid of target.server.childPids()) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes('sha256sum')) continue;
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      /* gone meanwhile */
    }
  }
  throw new Error('no running keeper of the child');
}

/** One turn of the event loop: what can be answered without anything else happening, is. */
const turn = () => new Promise<'turn'>((resolve) => setImmediate(() => resolve('turn')));

/** Arms a single cut at `step` (spies on the server's own objects, in this process): whether it fired, and a way to resume a stopped keeper. */
function armCut(step: Step, size: number, random: () => number): { fired: () => boolean; resume: () => void } {
  let fired = false;
  const cut = () => {
    if (fired) return;
    fired = true;
    proxy.cutAll();
  };
  const write = ChildStdin.prototype.write;
  let stopped = 0;
  const resume = () => {
    if (stopped) process.kill(stopped, 'SIGCONT');
    stopped = 0;
  };
  let lastId: string | undefined;
  vi.spyOn(ChildStdin.prototype, 'write').mockImplementation(function (this: ChildStdin, data, writeId, closeStdin, exited) {
    const resent = writeId === lastId;
    const arriving = !closeStdin && !resent && this.bytesWritten + data.length === size;
    if (step === 'last data write arrives, keeper slow' && arriving && !fired) {
      // A keeper slow to read (stopped here) while the answer is lost: the frame waits in its socket.
      stopped = runningKeeper();
      process.kill(stopped, 'SIGSTOP');
      cut();
    }
    const answer = write.call(this, data, writeId, closeStdin, exited);
    const last = !closeStdin && this.bytesWritten === size;
    if (last) lastId ??= writeId;
    if (step === 'last data write arrives' && last) cut(); // its answer is lost: re-sent
    if (resent && stopped) {
      // The re-send: answered at once, the client closes stdin before the keeper took the data
      // (the keeper resumes at the close, below); waiting for the keeper, it resumes it.
      void Promise.race([answer.then(() => 'answered' as const), turn()]).then((first) => first === 'turn' && resume());
    }
    if (closeStdin) void answer.then(resume);
    if (step === 'close request on its way' && last && !fired) {
      // Once the last write is answered, the next 1..64 bytes up (seeded: the close request) are cut.
      void answer.then(() => {
        fired = true;
        proxy.cutAfterBytes(1 + Math.floor(random() * 64), { direction: 'up' });
      });
    }
    if (step === 'close applied' && closeStdin) cut(); // applied; its answer is lost
    return answer;
  });
  const took = FramedStdin.prototype.took;
  vi.spyOn(FramedStdin.prototype, 'took').mockImplementation(function (this: FramedStdin, count) {
    took.call(this, count);
    if (step === 'keeper took the eof' && this.closed) cut();
  });
  const proto = ManagedProcess.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
  const hook = (method: string, when: Step) => {
    const original = proto[method]!;
    vi.spyOn(proto, method as never).mockImplementation(function (this: unknown, ...args: unknown[]) {
      const result = original.apply(this, args);
      if (step === when) cut();
      return result;
    } as never);
  };
  hook('onOutput', 'output');
  hook('recordExit', 'exit');
  hook('recordClosed', 'closed');
  return { fired: () => fired, resume };
}

describe('a stdin close on the kept path, cut at each step', () => {
  for (const [index, step] of STEPS.entries()) {
    it(`cut at: ${step}: EOF exactly once, after every byte; the client exits with the child's status`, async () => {
      const data = payload(35 + index);
      const file = join(dir, `in-${index}.bin`);
      writeFileSync(file, data);
      const armed = armCut(step, data.length, seededRandom(350 + index));
      try {
        const run = await exec(file);
        expect({ hung: run.hung, code: run.code, stdout: run.stdout }, run.stderr).toEqual({ hung: false, code: 7, stdout: `${sha256(data)}  -\n` });
        expect(armed.fired()).toBe(true);
      } finally {
        armed.resume();
        proxy.stopCuttingAfterBytes();
        vi.restoreAllMocks();
      }
    });
  }
});

describe('the last data frame and the eof read together by the keeper', () => {
  /** The keeper of the session's only running process (the command's parent). */
  function keeperOf(commandPid: number): number {
    const stat = readFileSync(`/proc/${commandPid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  }

  for (const how of ['in one write (chunk and closeStdin)', 'in two writes, the close sent before the data is answered'] as const) {
    it(`${how}: the command gets its end of input`, async () => {
      const c = await RawClient.connect(target.url);
      try {
        const { sessionId } = await c.handshake();
        const processId = `together-${how.length}`;
        await c.request('process/start', { processId, argv: CHILD, cwd: pathToFileURL(dir).href, env: { PATH: process.env.PATH ?? '/usr/bin:/bin' }, tty: false, pipeStdin: true });
        const proc = serverInternals(target.server).sessions.get(sessionId)!.processes.get(processId)!;
        const keeper = keeperOf(proc.pid);
        const data = payload(3500);
        // Stopped, the keeper reads nothing: the frames wait in its socket, together.
        process.kill(keeper, 'SIGSTOP');
        let written: Promise<unknown>;
        try {
          if (how === 'in one write (chunk and closeStdin)') {
            written = c.request('process/write', { processId, chunk: b64(data.subarray(0, 40_000)), writeId: 'w1', closeStdin: true });
            await written;
          } else {
            written = c.request('process/write', { processId, chunk: b64(data.subarray(0, 40_000)), writeId: 'w1' });
            expect(await c.request('process/write', { processId, chunk: '', writeId: 'close', closeStdin: true })).toEqual({ status: 'accepted' });
          }
        } finally {
          process.kill(keeper, 'SIGCONT');
        }
        expect(await written).toEqual({ status: 'accepted' });
        const closed = await c.waitClosed(processId, RUN_DEADLINE_MS);
        expect(closed.params).toMatchObject({ processId });
        expect(c.output(processId)).toBe(`${sha256(data.subarray(0, 40_000))}  -\n`);
        expect(c.frames.find((f) => f.method === 'process/exited' && f.params.processId === processId)?.params.exitCode).toBe(7);
      } finally {
        await c.drop();
      }
    });
  }
});
