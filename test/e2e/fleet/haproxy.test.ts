/**
 * The fleet's front door as HAProxy (docs/fleet.md): the Debian package, in master-worker
 * mode, with the shipped deploy/haproxy/tether.cfg (the file docs/fleet.md shows) in front of
 * three `tether serve` with state dirs, routed by path. `tether exec` streams through each
 * host's path byte-exact; a reload (SIGUSR2 to the master, what `systemctl reload haproxy`
 * does) during a 64 MiB stream cuts the link (the old worker ends at hard-stop-after) and the
 * stream resumes, byte-exact, with its exit code.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deployFile, fleetDocShows, frontDir, makeFrontCertificates, startHaproxy, substitute, type FrontDoor } from '../../helpers/front-door.js';
import { streamThrough } from '../../helpers/fleet-stream.js';
import { count, created, resumes, startFleetHosts, stopFleet } from '../../helpers/fleet.js';
import { requireProgram } from '../../helpers/prerequisites.js';
import type { RestartableServer } from '../../helpers/restart.js';
import { eventually, freePort, serverUsers } from '../../helpers/server-process.js';

const TEST_TIMEOUT_MS = 180_000;
const MiB = 1024 * 1024;
/** The hosts run as nobody when the suite runs as root (as a fleet's would), else as ourselves. */
const USER = serverUsers().at(-1)!;

let dir: string;
let ca: string;
let front: FrontDoor | undefined;
const hosts: RestartableServer[] = [];
let base: string;

beforeAll(async () => {
  requireProgram('haproxy');
  requireProgram('openssl');
  dir = frontDir('tether-fleet-haproxy-');
  const pem = makeFrontCertificates(dir);
  ca = pem.ca;
  await startFleetHosts(hosts, USER, (name) => ['--allow-host', name]);
  const port = await freePort();
  const config = substitute(deployFile('haproxy/tether.cfg'), [
    ['bind :443 ssl crt /etc/ssl/tether/front.pem', `bind 127.0.0.1:${port} ssl crt ${pem.bundle}`],
    // The old workers end their links at once here (10 s in the shipped file).
    ['hard-stop-after 10s', 'hard-stop-after 500ms'],
    ...hosts.map((h, i): [string, string] => [`10.0.0.1${i + 1}:8765`, `127.0.0.1:${h.port}`]),
  ]);
  front = await startHaproxy(dir, port, config);
  base = `wss://127.0.0.1:${port}`;
}, 90_000);

afterAll(async () => {
  await stopFleet(front, hosts, dir);
});

/** Former workers the master saw exit (after a reload: the links they held are cut). */
const exitedWorkers = () => count(front!.log(), /[Ff]ormer worker .*exited/);

describe(`a fleet behind HAProxy (docs/fleet.md; hosts run as ${USER})`, () => {
  it('docs/fleet.md shows deploy/haproxy/tether.cfg whole, as the file this test runs', () => {
    expect(fleetDocShows(deployFile('haproxy/tether.cfg'))).toBe(true);
  });

  it(
    'tether exec streams through each host path, byte-exact, to that host only',
    async () => {
      for (const [i] of hosts.entries()) {
        const before = hosts.map(created);
        const result = await streamThrough(`${base}/h/box${i + 1}/`, { ca }, 4 * MiB, 20 + i);
        expect(result.code, result.stderr).toBe(20 + i);
        expect(result.received).toBe(4 * MiB);
        expect(result.digest).toBe(result.expected);
        expect(hosts.map(created), `box${i + 1} only`).toEqual(before.map((n, j) => (j === i ? n + 1 : n)));
      }
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'a reload during a 64 MiB stream cuts the link; the stream resumes through the new worker, byte-exact, exit code kept',
    async () => {
      const box2 = hosts[1]!;
      const resumesBefore = resumes(box2);
      const result = await streamThrough(`${base}/h/box2/`, { ca }, 64 * MiB, 9, [16 * MiB], async () => {
        const workers = exitedWorkers();
        await front!.reload();
        if (!(await eventually(() => exitedWorkers() > workers, 60_000, 25))) throw new Error(`the old HAProxy worker never exited: ${front!.log().slice(-3000)}`);
      });
      expect(result.code, result.stderr).toBe(9);
      expect(result.marksLeft).toEqual([]);
      expect(result.received).toBe(64 * MiB);
      expect(result.digest).toBe(result.expected);
      expect(resumes(box2) - resumesBefore, `the reload cut the link and the client resumed; ${box2.current.stderr().slice(-2000)}`).toBe(1);
    },
    TEST_TIMEOUT_MS,
  );
});
