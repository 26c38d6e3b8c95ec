/**
 * Nothing of one session reaches another through the server (issue 11, descriptor and
 * process isolation). `tether serve` runs as nobody when the tests run as root: as root,
 * /proc permission checks prove nothing.
 *   - a pipe child of session B inherits no descriptor beyond 0-2, even while session A has
 *     a pty (node-pty leaked its master into every later child);
 *   - it cannot open /proc/<server>/fd/N, environ (the token) or mem (every session id), nor
 *     the fds of A's keeper (which holds A's terminal): both are non-dumpable;
 *   - a soak of sessions opening and closing ptys while other clients connect: no response
 *     carries another session's bytes;
 *   - tty input is bounded: a write is answered only once the terminal took it.
 */
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RawClient, type Frame } from '../helpers/raw-client.js';
import { eventually, processesWithMarker, serverUsers, startServerProcess, type ServerProcess } from '../helpers/server-process.js';

const CWD = 'file:///tmp';
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const TOKEN = `isolation-${randomInt(1e9, 9e9)}`;
const user = serverUsers().includes('nobody') ? 'nobody' : 'self';
const b64 = (s: string | Buffer) => Buffer.from(s).toString('base64');

let server: ServerProcess;
const clients: RawClient[] = [];

beforeAll(async () => {
  server = await startServerProcess({ user, env: { TETHER_TOKEN: TOKEN } });
});

afterAll(async () => {
  for (const c of clients.splice(0)) await c.close().catch(() => {});
  await server?.dispose();
});

async function session(name: string): Promise<RawClient> {
  const c = await RawClient.connect(server.url, { token: TOKEN });
  clients.push(c);
  await c.handshake(name);
  return c;
}

async function run(c: RawClient, processId: string, argv: string[], extra: object = {}): Promise<{ out: string; code: number }> {
  await c.request('process/start', { processId, argv, cwd: CWD, env: ENV, tty: false, ...extra });
  await c.waitClosed(processId, 20_000);
  return { out: c.output(processId), code: exitCodeOf(c, processId) };
}

function exitCodeOf(c: RawClient, processId: string): number {
  const exited = c.notifications.find((n) => n.method === 'process/exited' && n.params.processId === processId);
  return exited?.params.exitCode ?? -1;
}

function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? 0);
}

describe(`isolation between sessions (server runs as ${user})`, () => {
  it("a pipe child of session B sees no server descriptor beyond 0-2, and cannot open the server's or A's keeper's /proc entries", async () => {
    const a = await session('a');
    const mark = `${randomInt(1000, 9000)}.${randomInt(1e6, 9e6)}`;
    await a.request('process/start', { processId: 'shell', argv: ['/bin/sh', '-i'], arg0: `sh-${mark}`, cwd: CWD, env: ENV, tty: true });
    await a.request('process/write', { processId: 'shell', chunk: b64(`sleep ${mark}\n`), writeId: 'w' });
    await a.request('process/start', { processId: 'cat', argv: ['cat'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
    expect(await eventually(() => processesWithMarker(mark, 'sleep').length === 1, 10_000)).toBe(true);

    const b = await session('b');
    // ls opens /proc/self/fd itself (as fd 3): any other descriptor above 2 is inherited.
    const fds = await run(b, 'fds', ['/bin/sh', '-c', 'exec ls -l /proc/self/fd/']);
    const entries = fds.out.split('\n').filter((l) => / \d+ -> /.test(l));
    expect(entries.length).toBeGreaterThanOrEqual(3);
    for (const line of entries) {
      const [, fd, target] = / (\d+) -> (.*)$/.exec(line)!;
      if (Number(fd) <= 2) continue;
      expect(target, `inherited descriptor ${fd} -> ${target}`).toMatch(/^\/proc\/\d+\/fd$/);
    }

    // A's keeper, which holds A's terminal (its title shows its command: "tether-keeper: sh-<mark> -i").
    const keeperOfA = processesWithMarker(`sh-${mark}`).filter((pid) => readFileSync(`/proc/${pid}/cmdline`, 'latin1').startsWith('tether-keeper:'));
    expect(keeperOfA.length).toBe(1);
    const probe = [
      `S=${server.pid}`,
      `for f in /proc/$S/environ /proc/$S/mem /proc/$S/fd/0 /proc/$S/fd/1 /proc/$S/fd/2; do (: < "$f") 2>/dev/null && echo "OPENED $f"; done`,
      'for n in $(seq 3 200); do (: < /proc/$S/fd/$n) 2>/dev/null && echo "OPENED /proc/$S/fd/$n"; done',
      'ls /proc/$S/fd >/dev/null 2>&1 && echo "LISTED /proc/$S/fd"',
      `for k in ${keeperOfA.join(' ')}; do ls /proc/$k/fd >/dev/null 2>&1 && echo "LISTED /proc/$k/fd"; done`,
      // the token is nowhere a same-user process can read it
      `grep -l ${TOKEN} /proc/$S/environ /proc/$S/cmdline 2>/dev/null && echo FOUND-TOKEN`,
      'echo done',
    ].join('\n');
    const reach = await run(b, 'probe', ['/bin/sh', '-c', probe]);
    expect(reach.out).toBe('done\n');
    await a.request('process/terminate', { processId: 'shell' });
    await a.request('process/terminate', { processId: 'cat' });
  });

  it('soak: sessions open and close ptys while other clients connect; no response carries a foreign byte', async () => {
    const until = Date.now() + Number(process.env.TETHER_SOAK_MS ?? 6_000);
    // A loaded machine does fewer rounds in the same time: each worker then goes on until its
    // kind reached the minimum the assertions below ask for (within a hard cap), so the counts
    // check the soak happened rather than how fast the machine is.
    const hardUntil = until + 15_000;
    const more = (done: number, minimum: number) => Date.now() < until || (done < minimum && Date.now() < hardUntil);
    const TOKEN_RE = /([TP])(\d+)x(\d+)/g;
    const foreign: string[] = [];
    /** Every token in `text` must belong to session `owner`. */
    const check = (where: string, text: string, owner: number | null) => {
      for (const m of text.matchAll(TOKEN_RE)) if (owner === null || Number(m[2]) !== owner) foreign.push(`${where}: ${m[0]}`);
    };
    let ptyRounds = 0;
    let pipeRounds = 0;
    let refused = 0;

    const ttyWorker = async (s: number) => {
      const c = await session(`tty-${s}`);
      for (let k = 0; more(ptyRounds, 21); k++) {
        const id = `t${k}`;
        const word = `T${s}x${k}`;
        if (k % 2 === 0) {
          // A terminal round trip: echo and cat's copy.
          await c.request('process/start', { processId: id, argv: ['cat'], cwd: CWD, env: ENV, tty: true });
          await c.request('process/write', { processId: id, chunk: b64(`${word}\n`), writeId: `${id}w` });
          await c.waitFor(() => c.output(id).split(word).length >= 3, 10_000, true);
          await c.request('process/terminate', { processId: id });
        } else {
          // Killed with input still queued for a terminal that does not read: where node-pty
          // retried the write on a reused descriptor number (another client's socket).
          const argv = ['/bin/sh', '-c', 'stty raw -echo; echo ready; exec sleep 1000'];
          await c.request('process/start', { processId: id, argv, cwd: CWD, env: ENV, tty: true });
          await c.waitFor(() => c.output(id).includes('ready'), 10_000, true);
          const flood = c.call('process/write', { processId: id, chunk: b64(`${word} `.repeat(32 * 1024)), writeId: `${id}w` });
          await c.request('process/terminate', { processId: id });
          await flood;
        }
        await c.waitClosed(id, 10_000);
        ptyRounds++;
      }
      for (const f of c.frames) check(`tty session ${s}`, decoded(f), s);
    };
    const pipeWorker = async (s: number) => {
      const c = await session(`pipe-${s}`);
      for (let k = 0; more(pipeRounds, 11); k++) {
        const id = `p${k}`;
        const word = `P${s}x${k}`;
        await c.request('process/start', { processId: id, argv: ['cat'], cwd: CWD, env: ENV, tty: false, pipeStdin: true });
        await c.request('process/write', { processId: id, chunk: b64(`${word}\n`), writeId: `${id}w`, closeStdin: true });
        await c.waitClosed(id, 10_000);
        expect(c.output(id)).toBe(`${word}\n`);
        pipeRounds++;
      }
      for (const f of c.frames) check(`pipe session ${s}`, decoded(f), s);
    };
    const intruder = async () => {
      while (more(refused, 51)) {
        const reply = await unauthenticatedUpgrade(server.url);
        check('unauthenticated connection', reply, null);
        expect(reply.startsWith('HTTP/1.1 401 '), reply.slice(0, 80)).toBe(true);
        refused++;
      }
    };
    await Promise.all([...[1, 2, 3, 4].map(ttyWorker), ...[5, 6].map(pipeWorker), intruder(), intruder()]);
    expect(foreign).toEqual([]);
    expect(ptyRounds).toBeGreaterThan(20);
    expect(pipeRounds).toBeGreaterThan(10);
    expect(refused).toBeGreaterThan(50);
  }, 45_000);

  it('bounds tty input: a write is answered once the terminal took it, not before', async () => {
    const c = await session('tty-input');
    // Non-canonical, like an editor or a REPL that is busy: the terminal throttles input once
    // its queue is full. (In canonical mode the kernel discards what overflows a line instead:
    // writes are then answered at the pace it takes them, and memory stays flat too.)
    await c.request('process/start', { processId: 'deaf', argv: ['/bin/sh', '-c', 'stty -icanon -echo; echo raw; exec sleep 1000'], cwd: CWD, env: ENV, tty: true });
    await c.waitFor(() => c.output('deaf').includes('raw'), 10_000, true);
    const rssBefore = rssKiB(server.pid);
    const piece = Buffer.alloc(1024 * 1024, 'x');
    let accepted = 0;
    let pending: Promise<Frame> | undefined;
    for (let i = 0; i < 64; i++) {
      const reply = c.call('process/write', { processId: 'deaf', chunk: b64(piece), writeId: `w${i}` });
      const answered = await Promise.race([reply.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1_000))]);
      if (!answered) {
        pending = reply;
        break;
      }
      accepted += piece.length;
    }
    // The terminal's queues, the keeper's 64 KiB and two socket buffers: well under 2 MiB.
    expect(pending, 'a write to a terminal nobody reads stays unanswered').toBeDefined();
    expect(accepted).toBeLessThan(2 * 1024 * 1024);
    expect(rssKiB(server.pid) - rssBefore).toBeLessThan(64 * 1024);
    expect(await c.request('process/terminate', { processId: 'deaf' })).toEqual({ running: true });
    expect((await pending!).result).toEqual({ status: 'accepted' });
    await c.waitClosed('deaf', 10_000);
    expect(exitCodeOf(c, 'deaf')).toBe(137);
  });
});

/** A frame's output chunk decoded (tokens are searched in the bytes a client would see). */
function decoded(f: Frame): string {
  return f.method === 'process/output' ? Buffer.from(f.params.chunk, 'base64').toString('latin1') : '';
}

/** Everything the server answers to an upgrade without a token, until it closes the socket. */
function unauthenticatedUpgrade(url: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = tcpConnect(Number(port), hostname);
    const chunks: Buffer[] = [];
    socket.on('connect', () =>
      socket.write(
        `GET / HTTP/1.1\r\nHost: ${hostname}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
      ),
    );
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    socket.on('error', reject);
  });
}
