/** Memory of another process, from /proc (Linux): resident set now and its high-water mark. */
import { readFileSync } from 'node:fs';

export interface Memory {
  /** VmRSS in bytes. */
  rss: number;
  /** VmHWM (peak resident set) in bytes. */
  hwm: number;
}

export function readMemory(pid: number): Memory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string): number => {
    const match = new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status);
    return match ? Number(match[1]) * 1024 : Number.NaN;
  };
  return { rss: field('VmRSS'), hwm: field('VmHWM') };
}

/** Pids of a process's direct children (for launchers that exec a native binary as a child). */
export function childPids(pid: number): number[] {
  try {
    const tasks = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
    return tasks.length > 0 ? tasks.split(/\s+/).map(Number) : [];
  } catch {
    return [];
  }
}

/** Samples a process's RSS every `intervalMs` until stopped. */
export class RssSampler {
  readonly samples: number[] = [];
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly pid: number,
    intervalMs: number,
  ) {
    this.sample();
    this.timer = setInterval(() => this.sample(), intervalMs);
  }

  stop(): { samples: number[]; min: number; max: number; hwm: number } {
    clearInterval(this.timer);
    this.sample();
    return { samples: this.samples, min: Math.min(...this.samples), max: Math.max(...this.samples), hwm: readMemory(this.pid).hwm };
  }

  private sample(): void {
    try {
      this.samples.push(readMemory(this.pid).rss);
    } catch {
      // The process is gone; the caller notices elsewhere.
    }
  }
}
