/**
 * A successor that always starts, and one that cannot serve hands back (kept-server.ts,
 * server-start.ts): after a kill -9 of the server,
 *
 * - a taken port: the successor says why in one line and exits 1 at once, the lock released
 *   and the keepers untouched (alive, waiting); a third server adopts everything;
 * - a poisoned state dir (a directory named like a keeper socket, a record whose output limits
 *   hold a 0, a record over the size bound, eight keeper sockets that accept and never
 *   answer, named to sort first, a fake keeper announcing a huge meta, and one whose dump
 *   claims the healthy session's process, named to sort before the real keeper): the successor
 *   listens within a bound (all keepers adopted at once, each within 5 s), `/readyz` says what
 *   it waits for meanwhile, it names each thing it set aside or skipped, and the healthy
 *   session's `tether exec` exits 7 with every line once, in order.
 *
 * The poisoned case runs as the test's own user only: its fake keepers are sockets this
 * process serves, and a server of another uid could not connect to them.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { nativeAddon } from '../../../src/server/native/native.js';
import { MAX_RECORD_BYTES } from '../../../src/server/restart/session-store.js';
import { socketFd } from '../../../src/util/node-internals.js';
import { execProducer, PRODUCER_OUTPUT, startRestartableServer, type RestartableServer } from '../../helpers/restart.js';
import { eventually, isLive, keeperPids, serverUsers } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 90_000;

/** `promise`, or a rejection saying `what` after `ms` (a bound, never a measurement). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
    promise.then(
      (v) => (clearTimeout(timer), resolve(v)),
      (e: unknown) => (clearTimeout(timer), reject(e as Error)),
    );
  });
}

/** The port taken by another HTTP server (answering every upgrade 503, so clients retry). */
async function takePort(port: number): Promise<HttpServer> {
  const blocker = createHttpServer((_req, res) => res.writeHead(503).end());
  blocker.on('upgrade', (_req, socket: Socket) => socket.end('HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n'));
  await new Promise<void>((resolve, reject) => {
    blocker.once('error', reject);
    blocker.listen(port, '127.0.0.1', resolve);
  });
  return blocker;
}

function closeServer(server: Server | HttpServer): Promise<void> {
  (server as HttpServer).closeAllConnections?.();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** The successor started while the port is taken: it must exit 1 with one line saying why. */
async function successorCannotBind(server: RestartableServer): Promise<string> {
  const failure = await within(
    server.successor().then(
      () => new Error('the successor started on a taken port'),
      (err: unknown) => err as Error,
    ),
    20_000,
    'a successor on a taken port exits',
  );
  const said = failure.message;
  expect(said).toMatch(/exited \(1\) before printing its URL/);
  const stderr = said.slice(said.indexOf('before printing its URL: ') + 'before printing its URL: '.length);
  const lines = stderr.split('\n').filter((l) => l.startsWith('tether serve:'));
  expect(lines, stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^tether serve: cannot listen: .*EADDRINUSE.*state dir .* released, nothing adopted/);
  // It let go of the state dir: the lock is free for the next server.
  expect(existsSync(join(server.stateDir, 'server.lock'))).toBe(false);
  return lines[0]!;
}

let restartables: RestartableServer[] = [];
const servers: Array<Server | HttpServer> = [];
const children: ChildProcess[] = [];
/** Connections the fake keepers accepted (a successor may hold them open). */
const accepted: Socket[] = [];
afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  for (const socket of accepted.splice(0)) socket.destroy();
  for (const s of servers.splice(0)) await closeServer(s);
  for (const r of restartables.splice(0)) await r.dispose();
});

describe.each(serverUsers())('a successor that cannot bind (server runs as %s)', (user) => {
  it(
    'exits 1 at once in one line, the lock released and the keepers untouched; a third server adopts everything',
    async () => {
      const server = await startRestartableServer(user);
      restartables.push(server);
      const out = execProducer(server, children);
      await out.waitStdout('line 10\n');
      await server.stop('SIGKILL');
      const keepers = keeperPids(server.stateDir);
      expect(keepers).toHaveLength(1);
      const blocker = await takePort(server.port);
      servers.push(blocker);
      await successorCannotBind(server);
      expect(keepers.every(isLive)).toBe(true);
      await closeServer(blocker);
      servers.splice(servers.indexOf(blocker), 1);
      await server.successor();
      const { code } = await out.closedWithin(30_000, () => `server: ${server.current.stderr().slice(-1500)}`);
      expect(code, out.stderr()).toBe(7);
      expect(out.stdout()).toBe(PRODUCER_OUTPUT);
    },
    TEST_TIMEOUT_MS,
  );
});

/** Eight keeper sockets that accept and never answer (named to sort before any real one). */
async function silentKeepers(kDir: string): Promise<string[]> {
  const names = 'abcdefgh'.split('').map((c) => `22222222222${c}.sock`);
  for (const name of names) {
    const held: Socket[] = [];
    const silent = createServer((socket) => {
      socket.on('error', () => {});
    accepted.push(socket);
      held.push(socket);
    });
    await new Promise<void>((resolve) => silent.listen(join(kDir, name), resolve));
    servers.push(silent);
  }
  return names;
}

/**
 * A fake keeper listening as `name` in `kDir`: to each adopter it hands over three
 * descriptors, as a keeper does, then `speak`s on the socket. Resolves to `name`.
 */
async function fakeKeeper(kDir: string, name: string, speak: (socket: Socket) => void): Promise<string> {
  const fake = createServer((socket) => {
    socket.on('error', () => {});
    accepted.push(socket);
    const pairs = [0, 1, 2].map(() => nativeAddon().socketPair(false));
    nativeAddon().sendFds(socketFd(socket)!, pairs.map((p) => p[0]));
    for (const [a, b] of pairs) {
      nativeAddon().closeFd(a);
      nativeAddon().closeFd(b);
    }
    speak(socket);
  });
  await new Promise<void>((resolve) => fake.listen(join(kDir, name), resolve));
  servers.push(fake);
  return name;
}

/**
 * A fake keeper that hands over three descriptors, as a keeper does, then announces a meta of
 * a gigabyte and streams it for as long as the adopter reads (an adopter that holds it all
 * grows without bound).
 */
async function hugeMetaKeeper(kDir: string): Promise<string> {
  return fakeKeeper(kDir, '22222222222m.sock', (socket) => {
    socket.write(`adopted 1\npid 1 1\nmeta ${1024 ** 3}\n`);
    const chunk = Buffer.alloc(64 * 1024, 0x7b);
    let sent = 0;
    const pump = () => {
      while (!socket.destroyed && sent < 256 * 1024 * 1024) {
        sent += chunk.length;
        if (!socket.write(chunk)) return void socket.once('drain', pump);
      }
    };
    pump();
  });
}

/**
 * A fake keeper whose dump claims process `processId` of session `sessionId` (a stray or
 * planted dump, named to sort before the real keeper): with no output, running.
 */
async function claimingKeeper(kDir: string, sessionId: string, processId: string): Promise<string> {
  const meta = JSON.stringify({ v: 1, session: sessionId, process: processId, handle: 0, argv: ['fake'], tty: false, stdin: false });
  return fakeKeeper(kDir, '222222222222.sock', (socket) => {
    socket.write(`adopted 1\npid ${process.pid} ${process.pid}\nmeta ${Buffer.byteLength(meta)}\n${meta}stream 1 0 0\nstream 2 0 0\ndropped 0\ngone 0\nstdin 0 0\nend\n`);
  });
}

describe('a successor reading a poisoned state dir', () => {
  it(
    'listens within a bound, says on /readyz what it waits for, names what it set aside, and serves the healthy session exactly; a taken port first makes it exit 1, and the next one adopts',
    async () => {
      const server = await startRestartableServer('self');
      restartables.push(server);
      const sessionsDir = join(server.stateDir, 'sessions');
      const kDir = join(server.stateDir, 'k');
      // The victim: a session with retained output whose record will say maxChunkBytes 0.
      const victim = execProducer(server, children);
      await victim.waitStdout('line 3\n');
      expect(await eventually(() => readdirSync(sessionsDir).filter((n) => n.endsWith('.json')).length === 1, 5_000)).toBe(true);
      const victimRecord = readdirSync(sessionsDir).find((n) => n.endsWith('.json'))!;
      const healthy = execProducer(server, children);
      await healthy.waitStdout('line 10\n');
      await server.stop('SIGKILL');

      const healthyRecord = readdirSync(sessionsDir).find((n) => n.endsWith('.json') && n !== victimRecord)!;
      const { id: healthyId, processes } = JSON.parse(readFileSync(join(sessionsDir, healthyRecord), 'utf8')) as { id: string; processes: Array<{ processId: string; socket: string }> };

      // The poison.
      mkdirSync(join(kDir, 'zzzzzzzzzzzz.sock'));
      const record = JSON.parse(readFileSync(join(sessionsDir, victimRecord), 'utf8')) as { limits: { output: { maxChunkBytes: number } } };
      record.limits.output.maxChunkBytes = 0;
      writeFileSync(join(sessionsDir, victimRecord), JSON.stringify(record));
      writeFileSync(join(sessionsDir, 'big.json'), Buffer.alloc(MAX_RECORD_BYTES + 1, 0x5b));
      const silent = await silentKeepers(kDir);
      const huge = await hugeMetaKeeper(kDir);
      const claiming = await claimingKeeper(kDir, healthyId, processes[0]!.processId);

      // A taken port: the successor exits 1 before it touched anything.
      const blocker = await takePort(server.port);
      servers.push(blocker);
      await successorCannotBind(server);
      await closeServer(blocker);
      servers.splice(servers.indexOf(blocker), 1);

      // /readyz, asked from before the start until it says 200: 503 with what it waits for.
      const reasons = new Set<string>();
      let polling = true;
      const poll = (async () => {
        while (polling) {
          try {
            const res = await fetch(`http://127.0.0.1:${server.port}/readyz`);
            if (res.status === 503) reasons.add(((await res.json()) as { reason: string }).reason);
            else if (res.status === 200) return;
          } catch {
            // not listening yet
          }
          await new Promise((r) => setTimeout(r, 20));
        }
      })();
      // Every keeper at once, each within 5 s: well inside this bound (one at a time, 10 s
      // each, the eight silent keepers alone took 80 s).
      const successor = await within(server.successor(), 25_000, 'the successor listens');
      await within(poll, 10_000, '/readyz says 200');
      polling = false;
      expect([...reasons].some((r) => /^adopting \d+ of 12 kept process\(es\) from the state dir/.test(r)), [...reasons].join(' | ')).toBe(true);

      const { code } = await healthy.closedWithin(30_000, () => `server: ${successor.stderr().slice(-2500)}`);
      expect(code, healthy.stderr()).toBe(7);
      expect(healthy.stdout()).toBe(PRODUCER_OUTPUT);

      // It names each thing it set aside or skipped.
      const log = successor.stderr();
      expect(log).toMatch(/state dir: k\/zzzzzzzzzzzz\.sock skipped: a directory, not a keeper socket/);
      expect(log).toMatch(new RegExp(`session record ${victimRecord.replace('.', '\\.')} not restored \\(.*limits\\.output\\.maxChunkBytes 0.*\\): set aside as ${server.stateDir}/quarantine/`));
      expect(log).toMatch(new RegExp(`session record big\\.json not restored \\(${MAX_RECORD_BYTES + 1} bytes, over the ${MAX_RECORD_BYTES}`));
      for (const name of silent) expect(log).toMatch(new RegExp(`keeper ${name.replace('.', '\\.')} not adopted: .*\\(left to its own --adopt-within\\)`));
      expect(log).toMatch(new RegExp(`keeper ${huge.replace('.', '\\.')} not adopted: .*a meta of ${1024 ** 3} bytes`));
      expect(log).toMatch(new RegExp(`keeper ${claiming.replace('.', '\\.')} claims process .* which its record puts under keeper ${processes[0]!.socket.replace('.', '\\.')}`));
      const quarantined = readdirSync(join(server.stateDir, 'quarantine'));
      expect(quarantined.some((n) => n.startsWith(`${victimRecord}.`))).toBe(true);
      expect(quarantined.some((n) => n.startsWith('big.json.'))).toBe(true);
      expect(readdirSync(sessionsDir)).not.toContain(victimRecord);
      expect(readdirSync(sessionsDir)).not.toContain('big.json');
    },
    TEST_TIMEOUT_MS,
  );
});
