/**
 * How many processes and pseudo-terminals this server runs at once, derived from the machine
 * (not round numbers), and the admission of each `process/start` against them and against
 * the memory budget. Past a cap the start is refused with -32603 and a reason that names the
 * cap and where it comes from — never EMFILE, ENOSPC or EAGAIN from deep inside a spawn.
 *
 * What a process costs, counted in /proc/<server>/fd: its keeper's stdout, stderr and control
 * socket, plus stdin when piped (a tty process: stdin, stdout, control) — 4 at most. So the
 * descriptors left after the connections' share (descriptors.ts), the server's own and what
 * the fs methods may hold (their open-file cap and operations in flight), divided by 4, is
 * the process cap. Each process is two
 * tasks (keeper and command), and the machine's process ids are shared with everyone else:
 * at most three quarters of them, halved. A tty process also needs one of the pseudo-terminals
 * a container can get (`kernel.pty.max` less `kernel.pty.reserve`), shared machine-wide.
 */
import { formatBytes } from '../../util/format.js';
import { DESCRIPTORS_RESERVED } from './descriptors.js';
import { MemoryBudget } from './memory-budget.js';
import { defaultMemoryBudget, memoryLimit, pidLimit, ptyFacts, ptysInUse, readSmallFile, usablePtys, type FileReader, type PtyFacts } from './machine.js';

/** Descriptors one running process holds in the server (measured: pipes for stdin, stdout, stderr; the control socket). */
export const DESCRIPTORS_PER_PROCESS = 4;

export interface DerivedCap {
  value: number;
  /** Where the number comes from, for the start log and the refusal. */
  origin: string;
}

export interface MachineFacts {
  descriptorLimit: number;
  maxConnections: number;
  /** Descriptors the fs methods may hold at once (file handles across sessions, operations in flight). */
  filesDescriptors: number;
  /** Outgoing http/request sockets the server may hold at once (0 if not counted). */
  httpSockets?: number;
  pidLimit: number | null;
  ptys: PtyFacts | null;
}

/** The server-wide process cap. */
export function deriveMaxProcesses(m: MachineFacts): DerivedCap {
  const files = m.filesDescriptors;
  const http = m.httpSockets ?? 0;
  const room = m.descriptorLimit - m.maxConnections - DESCRIPTORS_RESERVED - files - http;
  const byDescriptors = Math.max(1, Math.floor(room / DESCRIPTORS_PER_PROCESS));
  const origin =
    `its descriptor limit of ${m.descriptorLimit} (RLIMIT_NOFILE) less ${m.maxConnections} for connections, ` +
    `${DESCRIPTORS_RESERVED} for itself${http ? `, ${files} for files and ${http} for outgoing http/request sockets` : ` and ${files} for files`}, at ${DESCRIPTORS_PER_PROCESS} per process`;
  if (m.pidLimit !== null) {
    const byPids = Math.max(1, Math.floor((m.pidLimit * 3) / 4 / 2));
    if (byPids < byDescriptors) {
      return { value: byPids, origin: `the machine's ${m.pidLimit} process ids (pid_max, threads-max, pids.max): three quarters of them, two per process` };
    }
  }
  return { value: byDescriptors, origin };
}

/** The server-wide cap on tty processes (each holds a pseudo-terminal for its life). */
export function deriveMaxPtys(m: MachineFacts, maxProcesses: number): DerivedCap {
  if (m.ptys === null) return { value: maxProcesses, origin: 'the process cap (pseudo-terminal limits unknown)' };
  const usable = usablePtys(m.ptys);
  if (usable >= maxProcesses) return { value: maxProcesses, origin: 'the process cap' };
  return { value: usable, origin: `kernel.pty.max ${m.ptys.max} less kernel.pty.reserve ${m.ptys.reserve}` };
}

export interface CapacityOptions {
  maxProcesses: DerivedCap;
  maxPtys: DerivedCap;
  memory: MemoryBudget;
  /** Pseudo-terminals in use on the whole machine now (kernel.pty.nr), and how many it allows us; null if unknown. */
  machinePtys?: () => { inUse: number; usable: number } | null;
}

/** One admitted process: give its room back when its keeper is gone. */
export type ProcessTicket = () => void;

export class ProcessCapacity {
  private liveCount = 0;
  private liveTtyCount = 0;

  constructor(private readonly options: CapacityOptions) {}

  get maxProcesses(): number {
    return this.options.maxProcesses.value;
  }

  get maxPtys(): number {
    return this.options.maxPtys.value;
  }

  /** Processes admitted and not gone (starting, running, or an exited command whose descendants live on). */
  get live(): number {
    return this.liveCount;
  }

  get liveTty(): number {
    return this.liveTtyCount;
  }

  /**
   * Admits a start (call the ticket once everything of it is gone), or says why not.
   * `withinShare`: the starting session holds less than its slice of the memory budget
   * (fair-share.ts): a spent budget does not refuse it (what its children then make the
   * server hold is bounded by how they are read); the hoarders are the ones refused.
   */
  admit(tty: boolean, withinShare = false): { ticket: ProcessTicket } | { refusal: string } {
    const { maxProcesses, maxPtys, memory, machinePtys } = this.options;
    if (this.liveCount >= maxProcesses.value) {
      return {
        refusal:
          `too many processes on this server: it runs at most ${maxProcesses.value} at once (--max-server-processes; ` +
          `derived from ${maxProcesses.origin}); wait for some to end`,
      };
    }
    if (tty) {
      if (this.liveTtyCount >= maxPtys.value) {
        return {
          refusal:
            `no pseudo-terminal for a tty process: this server runs at most ${maxPtys.value} at once (--max-ptys; ` +
            `derived from ${maxPtys.origin}); wait for some to end, or start it without tty`,
        };
      }
      const machine = machinePtys?.();
      if (machine && machine.inUse >= machine.usable) {
        return {
          refusal:
            `no pseudo-terminal for a tty process: the machine has ${machine.inUse} in use of the ${machine.usable} it allows ` +
            `(kernel.pty.nr of kernel.pty.max less kernel.pty.reserve); start it without tty, or end other terminals`,
        };
      }
    }
    const full = memory.refusal('process', withinShare);
    if (full) return { refusal: full };
    this.liveCount++;
    if (tty) this.liveTtyCount++;
    let released = false;
    return {
      ticket: () => {
        if (released) return;
        released = true;
        this.liveCount--;
        if (tty) this.liveTtyCount--;
      },
    };
  }
}

export interface ServerCapacityOptions {
  descriptorLimit: number;
  maxConnections: number;
  /** Descriptors the fs methods may hold at once (their --max-open-files and operations in flight). */
  filesDescriptors: number;
  /** Outgoing http/request sockets (their server-wide cap). */
  httpSockets?: number;
  /** --memory-budget; default: a quarter of the memory limit (RAM or the cgroup's), at most 1 GiB. */
  memoryBudgetBytes?: number;
  /** --max-server-processes; default derived (`deriveMaxProcesses`). */
  maxServerProcesses?: number;
  /** --max-ptys; default derived (`deriveMaxPtys`). */
  maxPtys?: number;
  read?: FileReader;
  ram?: number;
}

export interface ServerCapacity {
  memory: MemoryBudget;
  processes: ProcessCapacity;
  /** One line for the start log: each limit and where it comes from. */
  summary: string;
}

/** Reads the machine and builds the server's memory budget and process caps. */
export function serverCapacity(o: ServerCapacityOptions): ServerCapacity {
  const read = o.read ?? readSmallFile;
  const limit = memoryLimit(read, o.ram);
  const memoryBytes = o.memoryBudgetBytes ?? defaultMemoryBudget(limit);
  const memoryOrigin =
    o.memoryBudgetBytes !== undefined
      ? '--memory-budget'
      : `a quarter of ${limit.source === 'cgroup' ? `the cgroup's memory limit of ${formatBytes(limit.bytes)}` : `the ${formatBytes(limit.bytes)} of RAM`}, at most 1GiB`;
  const ptys = ptyFacts(read);
  const facts: MachineFacts = {
    descriptorLimit: o.descriptorLimit,
    maxConnections: o.maxConnections,
    filesDescriptors: o.filesDescriptors,
    httpSockets: o.httpSockets,
    pidLimit: pidLimit(read),
    ptys,
  };
  const maxProcesses = o.maxServerProcesses !== undefined ? { value: o.maxServerProcesses, origin: 'its configuration' } : deriveMaxProcesses(facts);
  const maxPtys = o.maxPtys !== undefined ? { value: o.maxPtys, origin: 'its configuration' } : deriveMaxPtys(facts, maxProcesses.value);
  const memory = new MemoryBudget(memoryBytes);
  const processes = new ProcessCapacity({
    maxProcesses,
    maxPtys,
    memory,
    machinePtys: ptys
      ? () => {
          const inUse = ptysInUse(read);
          return inUse === null ? null : { inUse, usable: usablePtys(ptys) };
        }
      : undefined,
  });
  const summary =
    `limits: memory budget ${formatBytes(memoryBytes)} (${memoryOrigin}); ${maxProcesses.value} processes (${maxProcesses.origin}); ` +
    `${maxPtys.value} tty processes (${maxPtys.origin}); ${o.maxConnections} connections`;
  return { memory, processes, summary };
}
