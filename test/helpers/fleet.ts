/**
 * What the fleet tests (behind nginx, behind HAProxy) share: their three hosts, their
 * teardown, and the counts they read from the hosts' logs.
 */
import { removeFrontDir, type FrontDoor } from './front-door.js';
import { startRestartableServer, type RestartableServer } from './restart.js';
import type { ServerUser } from './server-process.js';

/** The fleet's hosts, by the names the shipped front-door configs route to. */
export const FLEET_HOSTS = ['box1', 'box2', 'box3'] as const;

/** Starts the hosts (as `user`, each with `argsFor(name)`), pushing each to `hosts` as it starts. */
export async function startFleetHosts(hosts: RestartableServer[], user: ServerUser, argsFor: (name: string) => string[]): Promise<void> {
  for (const name of FLEET_HOSTS) hosts.push(await startRestartableServer(user, argsFor(name)));
}

/** Stops the front door, then the hosts, then removes the front door's dir. */
export async function stopFleet(front: FrontDoor | undefined, hosts: RestartableServer[], dir: string | undefined): Promise<void> {
  await front?.stop();
  for (const h of hosts.splice(0)) await h.dispose();
  if (dir) removeFrontDir(dir);
}

/** How often `pattern` occurs in `text`. */
export const count = (text: string, pattern: RegExp) => (text.match(new RegExp(pattern.source, 'g')) ?? []).length;
/** Sessions a host created, and resumes it served, so far (across its successors). */
export const created = (h: RestartableServer) => h.servers.reduce((n, s) => n + count(s.stderr(), / created for /), 0);
export const resumes = (h: RestartableServer) => h.servers.reduce((n, s) => n + count(s.stderr(), / resumed by /), 0);
