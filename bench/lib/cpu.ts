/** CPU time of another process, from /proc (Linux). */
import { readFileSync } from 'node:fs';

/** User + system CPU of a process so far, in ms (clock ticks of 10 ms); NaN once it is gone. */
export function cpuMs(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return Number.NaN;
  }
}
