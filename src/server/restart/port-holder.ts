/**
 * Whether a process listens on a TCP port (Linux, from /proc): what a server refused its state
 * dir's lock asks of the lock's holder, to name the real conflict. A second `tether serve` on
 * the same port finds the port's state dir locked before it ever tries to bind: the fix it
 * needs is about the port (`--replace`, or another port), not only about the state dir.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * True when `pid` holds a listening TCP socket on `port` (any address); false when it does
 * not, or when that cannot be known (no /proc, or another user's process and no socket on
 * the port at all). A process whose descriptors we may not read counts as listening when
 * some socket listens on the port: the likeliest holder is the one the lock names.
 */
export function listensOnPort(pid: number, port: number): boolean {
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return false;
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return true;
  }
  for (const fd of fds) {
    let target: string;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue;
    }
    const m = /^socket:\[(\d+)\]$/.exec(target);
    if (m && inodes.has(m[1]!)) return true;
  }
  return false;
}

/** Inodes of the TCP sockets (v4 and v6) listening on `port`. */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'latin1');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10 || cols[3] !== '0A') continue; // 0A: LISTEN
      if (cols[1]!.slice(cols[1]!.lastIndexOf(':') + 1) === hexPort) inodes.add(cols[9]!);
    }
  }
  return inodes;
}
