/**
 * A fleet behind one front door (docs/fleet.md): nginx from the Debian package, with the
 * shipped deploy/nginx/tether.conf (the file docs/fleet.md shows), terminating TLS in front
 * of three `tether serve` with state dirs, routed by path (/h/box1/ …). Through it:
 * `tether exec` reaches each host byte-exact; two `nginx -s reload` (which cut every
 * WebSocket the old workers hold) during a 64 MiB stream and during 60 MCP calls through
 * `tether mcp` lose nothing and repeat nothing; a host killed -9 and its successor during a
 * stream, or its `tether serve --replace`: the stream completes exactly, with its exit code;
 * `tether ps --fleet` over the front door lists every host's sessions; `tether gateway` with
 * exec entries on two hosts behind it lists and calls the tools of both; `tether relay` with
 * a host path as its upstream serves a client byte-exact across a reload; an idle command
 * outlives a shortened proxy_read_timeout because the client's pings keep the link open.
 *
 * Every cut is made to land mid-stream by events, not timing: the test stops reading the
 * client's stdout (so the stream cannot finish), reloads, waits for nginx to say the old
 * worker exited (the link is cut), reads on, and waits for the host to log the resume.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { get as httpsGet } from 'node:https';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ExecClient } from '../../../src/client/index.js';
import { spawnTether } from '../../helpers/cli.js';
import { deployFile, fleetDocShows, frontDir, makeFrontCertificates, startNginx, substitute, type FrontDoor } from '../../helpers/front-door.js';
import { streamThrough } from '../../helpers/fleet-stream.js';
import { count, created, resumes, startFleetHosts, stopFleet } from '../../helpers/fleet.js';
import { node, repoRoot } from '../../helpers/mcp-peers.js';
import { requireProgram } from '../../helpers/prerequisites.js';
import { ADOPT_WITHIN, watchOutput, type RestartableServer } from '../../helpers/restart.js';
import { TETHER_BIN } from '../../helpers/serve-process.js';
import { eventually, freePort, serverUsers, startServerProcess } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 180_000;
const MiB = 1024 * 1024;
/**
 * A stream the host's restart must land in: with a state dir the producer does not wait for
 * its reader (output past the window is written to disk), so the whole stream and its exit
 * could sit in loopback's socket buffers (some 20 MiB over the two hops) before the kill and
 * the client finish without a resume. 64 MiB cannot.
 */
const SURVIVES_KERNEL_BUFFERS = 64 * MiB;
const SLOW_MCP = join(repoRoot, 'test/fixtures/slow-mcp-server.mjs');
/** The hosts run as nobody when the suite runs as root (as a fleet's would), else as ourselves. */
const USER = serverUsers().at(-1)!;

let dir: string;
let ca: string;
let certs: { cert: string; key: string };
let front: FrontDoor | undefined;
const hosts: RestartableServer[] = [];
let base: string;
/** box1's, box2's and box3's token files. */
const tokenFiles: string[] = [];
/** The --token-file argument for the host a path names (/h/box2/ → box2's). */
const tokenFor = (path: string) => tokenFiles[Number(/\/h\/box(\d)\//.exec(path)![1]) - 1]!;

beforeAll(async () => {
  requireProgram('nginx');
  requireProgram('openssl');
  dir = frontDir('tether-fleet-nginx-');
  const pem = makeFrontCertificates(dir);
  ca = pem.ca;
  // Each host on loopback here accepts the Host nginx sends it (the upstream's name); a host
  // listening on its network address with a token checks no Host at all.
  // Each host its own token (tokens are per host): the front door holds none and passes
  // Authorization on.
  await startFleetHosts(hosts, USER, (name) => {
    const file = join(dir, `${name}.token`);
    writeFileSync(file, `${name}-${randomUUID()}\n`, { mode: 0o644 });
    tokenFiles.push(file);
    return ['--allow-host', name, '--token-file', file];
  });
  certs = pem;
  const port = await freePort();
  front = await startNginx(dir, port, fleetSite(port));
  base = `wss://127.0.0.1:${port}`;
}, 90_000);

/** The shipped deploy/nginx/tether.conf for this test's hosts on `port`, with `more` substitutions. */
function fleetSite(port: number, more: [string, string][] = []): string {
  return substitute(deployFile('nginx/tether.conf'), [
    ['listen 443 ssl;', `listen 127.0.0.1:${port} ssl;`],
    ['/etc/ssl/tether/front.pem', certs.cert],
    ['/etc/ssl/tether/front.key', certs.key],
    ...hosts.map((h, i): [string, string] => [`server 10.0.0.1${i + 1}:8765;`, `server 127.0.0.1:${h.port};`]),
    ...more,
  ]);
}

afterAll(async () => {
  await stopFleet(front, hosts, dir);
});

/** Old workers nginx saw exit (after a reload: the links they held are cut). */
const exitedWorkers = () => count(front!.log(), /worker process \d+ exited/);

async function waitFor(what: string, cond: () => boolean, context: () => string = () => ''): Promise<void> {
  if (!(await eventually(cond, 60_000, 25))) throw new Error(`timed out waiting for ${what}; ${context()}`);
}

/** The HTTP status nginx answers for `path` (over TLS, trusting the test CA). */
function statusOf(path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpsGet(`${base.replace(/^wss/, 'https')}${path}`, { ca: readFileSync(ca) }, (res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    req.on('error', reject);
  });
}

const stream = (path: string, bytes: number, exit: number, marks: number[], at: (mark: number) => Promise<void>) =>
  streamThrough(`${base}${path}`, { ca, tokenFile: tokenFor(path) }, bytes, exit, marks, at);

describe(`a fleet behind nginx (docs/fleet.md; hosts run as ${USER})`, () => {
  it('docs/fleet.md shows deploy/nginx/tether.conf whole, as the file this test runs', () => {
    expect(fleetDocShows(deployFile('nginx/tether.conf'))).toBe(true);
  });

  it(
    'tether exec streams through each host path, byte-exact, to that host only',
    async () => {
      for (const [i, h] of hosts.entries()) {
        const before = hosts.map(created);
        const result = await stream(`/h/box${i + 1}/`, 4 * MiB, 10 + i, [], async () => {});
        expect(result.code, result.stderr).toBe(10 + i);
        expect(result.received).toBe(4 * MiB);
        expect(result.digest).toBe(result.expected);
        expect(hosts.map(created), `box${i + 1} only`).toEqual(before.map((n, j) => (j === i ? n + 1 : n)));
        expect(h.current.stderr()).not.toMatch(/refused upgrade/);
        // The host's health, through its path with the prefix stripped, without a token.
        for (const probe of ['livez', 'readyz']) expect(await statusOf(`/h/box${i + 1}/${probe}`), probe).toBe(200);
      }
      expect(await statusOf('/h/nobox/readyz'), 'no route, no host').toBe(404);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'Authorization reaches each host through the front door: no token, or another host\'s, is refused by the host (401)',
    async () => {
      const exec = (token: string[]) =>
        new Promise<{ code: number | null; stderr: string }>((resolve) => {
          const child = spawnTether(['exec', '--url', `${base}/h/box1/`, '--ca', ca, ...token, '--recovery-deadline', '2s', 'true'], {
            stdio: ['ignore', 'ignore', 'pipe'],
            env: { ...process.env, TETHER_TOKEN: '' },
          });
          let stderr = '';
          child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
          child.once('close', (code) => resolve({ code, stderr }));
        });
      const refusals = () => count(hosts[0]!.current.stderr(), /refused upgrade .*: 401/);
      const before = refusals();
      for (const token of [[], ['--token-file', tokenFiles[1]!]]) {
        const { code, stderr } = await exec(token);
        expect(code, stderr).toBe(255);
        expect(stderr).toMatch(/401/);
      }
      expect(refusals() - before, 'refused by box1 itself, not by the proxy').toBe(2);
      expect((await exec(['--token-file', tokenFiles[0]!])).code).toBe(0);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'tether cp through a host path, both ways',
    async () => {
      const box3 = hosts[2]!;
      const local = join(dir, 'payload');
      writeFileSync(local, randomBytes(3 * MiB));
      const remote = join(box3.current.home, `payload-${randomUUID()}`);
      const cp = (...args: string[]) =>
        new Promise<{ code: number | null; stdout: Buffer; stderr: string }>((resolve) => {
          const child = spawnTether(['cp', '--url', `${base}/h/box3/`, '--ca', ca, '--token-file', tokenFiles[2]!, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
          const chunks: Buffer[] = [];
          let stderr = '';
          child.stdout!.on('data', (d: Buffer) => chunks.push(d));
          child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
          child.once('close', (code) => resolve({ code, stdout: Buffer.concat(chunks), stderr }));
        });
      const up = await cp(local, `:${remote}`);
      expect(up.code, up.stderr).toBe(0);
      const down = await cp(`:${remote}`, '-');
      expect(down.code, down.stderr).toBe(0);
      expect(down.stdout.equals(readFileSync(local)), 'the copy back is the file sent').toBe(true);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'nginx -s reload twice during a 64 MiB stream: both cut the link, the stream resumes, byte-exact, exit code kept',
    async () => {
      const box2 = hosts[1]!;
      const resumesBefore = resumes(box2);
      let reloads = 0;
      const result = await stream('/h/box2/', 64 * MiB, 7, [16 * MiB, 40 * MiB], async () => {
        // The previous reload's resume is done (the bytes since then came through it).
        await waitFor('the previous resume', () => resumes(box2) >= resumesBefore + reloads, () => box2.current.stderr().slice(-2000));
        const workers = exitedWorkers();
        await front!.reload();
        reloads++;
        // The old worker is gone, so is the link it held; reading on, the client resumes.
        await waitFor('the old nginx worker to exit', () => exitedWorkers() > workers, () => front!.log().slice(-3000));
      });
      expect(result.code, result.stderr).toBe(7);
      expect(result.marksLeft).toEqual([]);
      expect(result.received).toBe(64 * MiB);
      expect(result.digest).toBe(result.expected);
      expect(resumes(box2) - resumesBefore, `each reload cut the link and the client resumed; ${box2.current.stderr().slice(-2000)}`).toBe(2);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'nginx -s reload twice during 60 MCP calls through tether mcp: every call answered once, run once',
    async () => {
      const box3 = hosts[2]!;
      const resumesBefore = resumes(box3);
      const bridge = spawnTether(['mcp', '--url', `${base}/h/box3/`, '--ca', ca, '--token-file', tokenFiles[2]!, '--recovery-deadline', '120s', '--', node, SLOW_MCP], { stdio: ['pipe', 'pipe', 'pipe'] });
      const out = watchOutput(bridge);
      try {
        const send = (m: object) => bridge.stdin!.write(`${JSON.stringify({ jsonrpc: '2.0', ...m })}\n`);
        const answered = (id: number) => out.waitStdout(new RegExp(`"id":${id}[,}]`), 60_000);
        const tag = randomUUID().slice(0, 8);
        send({ id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'host', version: '0' } } });
        await answered(1);
        send({ method: 'notifications/initialized' });
        const call = (i: number, ms: number) => send({ id: 100 + i, method: 'tools/call', params: { name: 'slow', arguments: { ms, tag: `${tag}-${i}` } } });
        for (let i = 1; i <= 60; i++) {
          if (i === 20 || i === 40) {
            // A call in flight when the link is cut, and the next one written while it is down.
            const had = resumes(box3);
            const workers = exitedWorkers();
            call(i, 1500);
            await out.waitStderr(`slow-start ${tag}-${i} `, 60_000);
            await front!.reload();
            await waitFor('the old nginx worker to exit', () => exitedWorkers() > workers, () => front!.log().slice(-3000));
            call(i + 1, 10);
            await waitFor('the resume through the new worker', () => resumes(box3) > had, () => box3.current.stderr().slice(-2000) + out.stderr());
            await answered(100 + i);
            await answered(100 + i + 1);
            i++;
            continue;
          }
          call(i, 10);
          await answered(100 + i);
        }
        send({ id: 2, method: 'tools/call', params: { name: 'calls', arguments: {} } });
        await answered(2);
        const replies = out
          .stdout()
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { id?: number; result?: { content: { text: string }[] } })
          .filter((m) => m.id !== undefined);
        const ids = replies.map((r) => r.id!).sort((a, b) => a - b);
        expect(ids, 'every request answered exactly once').toEqual([1, 2, ...Array.from({ length: 60 }, (_, i) => 101 + i)]);
        const texts = replies.filter((r) => r.id! > 100).map((r) => r.result!.content[0]!.text);
        const runs = texts.map((t) => /^slow \S+ done: call (\d+) of pid (\d+)$/.exec(t)!);
        expect(runs.every(Boolean), texts.join('\n')).toBe(true);
        expect(new Set(runs.map((m) => m[2])).size, 'one MCP server process throughout').toBe(1);
        expect(runs.map((m) => Number(m[1])).sort((a, b) => a - b), 'each call ran once').toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
        const total = replies.find((r) => r.id === 2)!.result!.content[0]!.text;
        expect(total).toBe(`slow calls 60 pid ${runs[0]![2]}`);
        expect(resumes(box3) - resumesBefore, 'each reload cut the link').toBe(2);
        bridge.stdin!.end();
        const { code } = await out.closedWithin(30_000);
        expect(code, out.stderr()).toBe(0);
      } finally {
        if (bridge.exitCode === null) bridge.kill('SIGKILL');
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'tether ps --fleet over the front door lists every host\'s sessions, with a HOST column',
    async () => {
      const fleet = join(dir, 'fleet');
      // Each host with its own token file, named relative to the fleet file.
      writeFileSync(fleet, hosts.map((_, i) => `box${i + 1} ${base}/h/box${i + 1}/ box${i + 1}.token\n`).join(''));
      const clients = await Promise.all(
        hosts.map((_, i) => ExecClient.connect(`${base}/h/box${i + 1}/`, { ca: readFileSync(ca, 'utf8'), token: readFileSync(tokenFiles[i]!, 'utf8').trim(), clientName: `agent-${i + 1}` })),
      );
      try {
        await Promise.all(clients.map((c, i) => once(c.spawn(['sleep', String(51 + i)]), 'spawn')));
        const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
          const child = spawnTether(['ps', '--fleet', fleet, '--ca', ca], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TETHER_TOKEN: '' } });
          const o = watchOutput(child);
          void o.closed.then(({ code }) => resolve({ code, stdout: o.stdout(), stderr: o.stderr() }));
        });
        expect(code, stderr).toBe(0);
        expect(stdout.split('\n')[0]).toMatch(/^HOST\s+SESSION\s+CLIENT/);
        for (const [i, c] of clients.entries()) {
          expect(stdout).toMatch(new RegExp(`^box${i + 1}\\s+${c.sessionId.slice(0, 8)}\\s+agent-${i + 1}\\s+attached\\s.*sleep ${51 + i}$`, 'm'));
        }
      } finally {
        await Promise.all(clients.map((c) => c.close()));
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'tether gateway with exec entries on two hosts behind the front door: one MCP endpoint lists and calls the tools of both',
    async () => {
      const config = join(dir, 'gateway.json');
      // Each entry trusts the front door's CA through its own caFile (relative: the config's directory).
      const entry = (box: string) => ({ command: node, args: [SLOW_MCP], tether: { url: `${base}/h/${box}/`, tokenFile: tokenFor(`/h/${box}/`), caFile: 'ca.pem' } });
      writeFileSync(config, JSON.stringify({ mcpServers: { box1: entry('box1'), box2: entry('box2') } }));
      const before = hosts.map(created);
      const env: Record<string, string> = { ...(process.env as Record<string, string>), TETHER_TOKEN: '' };
      delete env.NODE_EXTRA_CA_CERTS;
      const transport = new StdioClientTransport({ command: node, args: [TETHER_BIN, 'gateway', config, '--stdio'], env, stderr: 'pipe' });
      let gatewayStderr = '';
      transport.stderr?.on('data', (d: Buffer) => (gatewayStderr += d.toString()));
      const client = new Client({ name: 'fleet-test', version: '0' });
      try {
        await client.connect(transport);
        const names = (await client.listTools()).tools.map((t) => t.name);
        expect(names, gatewayStderr).toEqual(expect.arrayContaining(['box1__slow', 'box1__calls', 'box2__slow', 'box2__calls']));
        const text = async (name: string, args: Record<string, unknown>) => {
          const result = (await client.callTool({ name, arguments: args })) as { content: { text: string }[] };
          return result.content[0]!.text;
        };
        const one = await text('box1__slow', { ms: 10, tag: 'one' });
        const two = await text('box2__slow', { ms: 10, tag: 'two' });
        expect(one).toMatch(/^slow one done: call 1 of pid \d+$/);
        expect(two).toMatch(/^slow two done: call 1 of pid \d+$/);
        expect(await text('box1__calls', {})).toBe(`slow calls 1 pid ${/pid (\d+)$/.exec(one)![1]}`);
        // Each entry's server runs on its own host, through its own path.
        expect(hosts.map(created).map((n, i) => n - before[i]!)).toEqual([1, 1, 0]);
      } finally {
        await client.close();
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'tether serve --replace on a host during a stream through nginx: the old server exits 0, the stream completes exactly, with its exit code',
    async () => {
      const box3 = hosts[2]!;
      const old = box3.current;
      const result = await stream('/h/box3/', SURVIVES_KERNEL_BUFFERS, 6, [4 * MiB], async () => {
        const args = ['--adopt-within', ADOPT_WITHIN, '--allow-host', 'box3', '--token-file', tokenFiles[2]!, '--replace'];
        const next = await startServerProcess({ user: USER, port: box3.port, stateDir: box3.stateDir, args });
        box3.servers.push(next); // disposed with the host
        expect(await old.exited, old.stderr().slice(-2000)).toEqual({ code: 0, signal: null });
      });
      expect(result.code, result.stderr).toBe(6);
      expect(result.marksLeft).toEqual([]);
      expect(result.received).toBe(SURVIVES_KERNEL_BUFFERS);
      expect(result.digest).toBe(result.expected);
      expect(box3.current).not.toBe(old);
      expect(box3.current.stderr(), 'the new server adopted the session').toMatch(/ resumed by /);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'a host killed -9 and its successor started during a stream through nginx: the stream completes exactly, with its exit code',
    async () => {
      const box1 = hosts[0]!;
      const result = await stream('/h/box1/', SURVIVES_KERNEL_BUFFERS, 5, [4 * MiB], async () => {
        await box1.stop('SIGKILL');
        await box1.successor();
      });
      expect(result.code, result.stderr).toBe(5);
      expect(result.marksLeft).toEqual([]);
      expect(result.received).toBe(SURVIVES_KERNEL_BUFFERS);
      expect(result.digest).toBe(result.expected);
      expect(box1.servers.length).toBe(2);
      expect(box1.current.stderr(), 'the successor adopted the session').toMatch(/ resumed by /);
    },
    TEST_TIMEOUT_MS,
  );
  it(
    'tether relay with its upstream a host path through nginx (wss, --ca): a client through the relay streams byte-exact across an nginx -s reload',
    async () => {
      const box2 = hosts[1]!;
      const resumesBefore = resumes(box2);
      const relayToken = join(dir, `relay-${randomUUID()}.token`);
      const relay = spawnTether(['relay', '--to', `${base}/h/box2/`, '--ca', ca, '--token-file', tokenFiles[1]!, '--listen-token-file', relayToken], {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, TETHER_TOKEN: '' },
      });
      const out = watchOutput(relay);
      try {
        await out.waitStdout('\n', 60_000);
        const relayUrl = out.stdout().split('\n')[0]!;
        expect(relayUrl).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
        // The relay's upstream link is the one through nginx: the reload cuts it, the relay's
        // client resumes its session on box2, and the client downstream sees nothing of it.
        const result = await streamThrough(relayUrl, { ca, tokenFile: relayToken }, 32 * MiB, 9, [8 * MiB], async () => {
          const workers = exitedWorkers();
          await front!.reload();
          await waitFor('the old nginx worker to exit', () => exitedWorkers() > workers, () => front!.log().slice(-3000));
        });
        expect(result.code, result.stderr).toBe(9);
        expect(result.marksLeft).toEqual([]);
        expect(result.received).toBe(32 * MiB);
        expect(result.digest).toBe(result.expected);
        expect(result.stderr, 'the downstream link was never cut').not.toMatch(/reconnect|resum/i);
        // The relay's session on box2 was cut by the reload and resumed through the new worker.
        await waitFor('the relay to resume on box2', () => resumes(box2) > resumesBefore, () => box2.current.stderr().slice(-2000) + out.stderr());
        expect(resumes(box2) - resumesBefore, `${box2.current.stderr().slice(-2000)}\n${out.stderr()}`).toBe(1);
        relay.kill('SIGTERM');
        const { code } = await out.closedWithin(30_000);
        expect(code, out.stderr()).toBe(0);
      } finally {
        if (relay.exitCode === null && relay.signalCode === null) relay.kill('SIGKILL');
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'an idle link through a front door with proxy_read_timeout 5s outlives it: the client\'s pings (every 2 s with --keepalive-timeout 6s) keep it open, no resume',
    async () => {
      // The shipped config with only its idle timeout shortened, on a front door of its own.
      const idleDir = join(dir, `idle-${randomUUID().slice(0, 8)}`);
      mkdirSync(idleDir, { mode: 0o755 });
      const port = await freePort();
      const idleFront = await startNginx(idleDir, port, fleetSite(port, [['proxy_read_timeout 75s;', 'proxy_read_timeout 5s;']]));
      try {
        const box1 = hosts[0]!;
        const resumesBefore = resumes(box1);
        const createdBefore = created(box1);
        const child = spawnTether(
          ['exec', '--url', `wss://127.0.0.1:${port}/h/box1/`, '--ca', ca, '--token-file', tokenFiles[0]!, '--keepalive-timeout', '6s', '--recovery-deadline', '60s', '--', 'sh', '-c', 'sleep 12; echo idle done'],
          { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TETHER_TOKEN: '' } },
        );
        const out = watchOutput(child);
        const { code } = await out.closedWithin(90_000);
        expect(code, out.stderr()).toBe(0);
        expect(out.stdout()).toBe('idle done\n');
        expect(created(box1) - createdBefore).toBe(1);
        // The exit came through the link: any cut nginx made before it was resumed (and logged) by then.
        expect(resumes(box1) - resumesBefore, `nginx cut the idle link; ${idleFront.log().slice(-3000)}\n${out.stderr()}`).toBe(0);
      } finally {
        await idleFront.stop();
      }
    },
    TEST_TIMEOUT_MS,
  );
});
