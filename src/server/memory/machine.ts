/**
 * What the machine allows, read once at start (Linux /proc and /sys; elsewhere the fallbacks
 * say "unknown" and nothing is capped by them): the memory limit (RAM, or the cgroup's if it
 * is lower), pseudo-terminals (`kernel.pty.max` less `kernel.pty.reserve`) and process ids.
 * The readers are injected, so the derivations are tested with made-up machines
 * (test/server-machine.test.ts).
 */
import { readFileSync } from 'node:fs';
import { totalmem } from 'node:os';

/** Reads a small file's text, or null when it is not there (not Linux, no cgroup, …). */
export type FileReader = (path: string) => string | null;

export const readSmallFile: FileReader = (path) => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return null;
  }
};

/** A cgroup limit at or above this is "no limit" (v1 writes 2^63 rounded down to a page). */
const UNLIMITED = 2 ** 60;

export interface MemoryLimit {
  bytes: number;
  /** Where the number comes from, for the start log and the refusals. */
  source: 'RAM' | 'cgroup';
}

/**
 * The memory this server may use: the machine's RAM, or its cgroup's limit (v2 `memory.max`,
 * v1 `memory.limit_in_bytes`, the lowest along the path to the root: a parent's limit holds
 * for its children) when that is lower.
 */
export function memoryLimit(read: FileReader = readSmallFile, ram: number = totalmem()): MemoryLimit {
  const cgroup = cgroupMemoryLimit(read);
  return cgroup !== null && cgroup < ram ? { bytes: cgroup, source: 'cgroup' } : { bytes: ram, source: 'RAM' };
}

/** The lowest memory limit of this process's cgroup and its ancestors, or null if none is set. */
export function cgroupMemoryLimit(read: FileReader = readSmallFile): number | null {
  return lowestCgroupValue(read, 'memory', 'memory.limit_in_bytes', 'memory.max');
}

/**
 * The lowest value of a cgroup limit file along the path from this process's cgroup to the
 * root (a parent's limit holds for its children), v1 (`N:controller:/path`, under
 * /sys/fs/cgroup/<controller>) or v2 (`0::/path`, under /sys/fs/cgroup); "max", absent or
 * absurdly large values are no limit.
 */
function lowestCgroupValue(read: FileReader, controller: string, v1File: string, v2File: string): number | null {
  const membership = read('/proc/self/cgroup');
  if (membership === null) return null;
  let lowest: number | null = null;
  for (const line of membership.split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line.trim());
    if (!m) continue;
    const v1 = m[1]!.split(',').includes(controller);
    if (!v1 && m[1] !== '') continue;
    const root = v1 ? `/sys/fs/cgroup/${controller}` : '/sys/fs/cgroup';
    const file = v1 ? v1File : v2File;
    // Inside a container the path named here may not exist under the mount (the mount is the
    // container's own cgroup): then the files at the mount's root are this process's.
    const parts = m[2]!.split('/').filter(Boolean);
    for (let depth = parts.length; depth >= 0; depth--) {
      const n = readNumber(read, `${[root, ...parts.slice(0, depth)].join('/')}/${file}`);
      if (n !== null && n > 0 && n < UNLIMITED && (lowest === null || n < lowest)) lowest = n;
    }
  }
  return lowest;
}

/** The default memory budget: a quarter of the memory limit, at most 1 GiB. */
export function defaultMemoryBudget(limit: MemoryLimit): number {
  return Math.max(1, Math.min(1024 ** 3, Math.floor(limit.bytes / 4)));
}

export interface PtyFacts {
  /** kernel.pty.max: pseudo-terminals on the whole machine. */
  max: number;
  /** kernel.pty.reserve: of those, kept for the initial devpts instance (a container cannot use them). */
  reserve: number;
}

/** Pseudo-terminal limits, or null where they cannot be read. */
export function ptyFacts(read: FileReader = readSmallFile): PtyFacts | null {
  const max = readNumber(read, '/proc/sys/kernel/pty/max');
  if (max === null) return null;
  return { max, reserve: readNumber(read, '/proc/sys/kernel/pty/reserve') ?? 0 };
}

/** Pseudo-terminals in use on the whole machine right now (kernel.pty.nr), or null. */
export function ptysInUse(read: FileReader = readSmallFile): number | null {
  return readNumber(read, '/proc/sys/kernel/pty/nr');
}

/**
 * The pseudo-terminals this server may count on: `kernel.pty.max` less `kernel.pty.reserve`
 * (what a devpts instance other than the initial one — a container's — can get at all; on a
 * host it leaves the reserve to logins).
 */
export function usablePtys(facts: PtyFacts): number {
  return Math.max(0, facts.max - facts.reserve);
}

/**
 * Process ids the machine can hand out: the lowest of `kernel.pid_max`, `kernel.threads-max`
 * and the pids cgroup's `pids.max`; null if none can be read.
 */
export function pidLimit(read: FileReader = readSmallFile): number | null {
  const values = [
    readNumber(read, '/proc/sys/kernel/pid_max'),
    readNumber(read, '/proc/sys/kernel/threads-max'),
    cgroupPidsLimit(read),
  ].filter((n): n is number => n !== null && n > 0);
  return values.length > 0 ? Math.min(...values) : null;
}

function cgroupPidsLimit(read: FileReader): number | null {
  return lowestCgroupValue(read, 'pids', 'pids.max', 'pids.max');
}

function readNumber(read: FileReader, path: string): number | null {
  const text = read(path)?.trim();
  return text !== undefined && /^\d+$/.test(text) ? Number(text) : null;
}
