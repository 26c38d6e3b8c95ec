/** Process liveness for orphan checks: a zombie (dead, not yet reaped by init) counts as gone. */
import { readdirSync, readFileSync } from 'node:fs';

export function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
}

/** Waits (bounded) until none of `pids` runs; returns the ones still running. */
export async function waitGone(pids: number[], timeoutMs = 2000): Promise<number[]> {
  const until = Date.now() + timeoutMs;
  while (pids.some(running) && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  return pids.filter(running);
}

/** Children of `pid` whose command line contains `text` (from /proc: no export of keeper.ts needed). */
export function childrenOf(pid: number, text: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid && readFileSync(`/proc/${entry}/cmdline`, 'latin1').includes(text)) found.push(Number(entry));
    } catch {
      /* gone meanwhile */
    }
  }
  return found;
}

/** write(2)'s syscall number, as /proc/PID/syscall shows it (x86_64 and the generic table of arm64). */
const WRITE_SYSCALL = process.arch === 'x64' ? 1 : 64;

/**
 * Whether `pid` is asleep inside write(2) on descriptor `fd`: a writer blocked on a full pipe
 * or socket. Read from /proc/PID/syscall (an event to wait for, instead of a fixed wait that
 * "sees nothing happen"); false when the process is running, in another call, or gone.
 */
export function blockedWriting(pid: number, fd: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (!stat.slice(stat.lastIndexOf(')') + 2).startsWith('S')) return false;
    const [nr, arg0] = readFileSync(`/proc/${pid}/syscall`, 'utf8').trim().split(' ');
    return Number(nr) === WRITE_SYSCALL && Number(arg0) === fd;
  } catch {
    return false;
  }
}
