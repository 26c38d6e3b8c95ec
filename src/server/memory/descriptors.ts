/**
 * The descriptor budget (Linux): sockets and children's pipes come out of one RLIMIT_NOFILE.
 * Connections are capped (a quarter of the limit by default) and answered 503 past it; a
 * process start is refused while the descriptors in use, plus the room still promised to
 * connections, leave too little for it. So neither runs into EMFILE, where accept() would
 * drop a client without a word and a spawn would fail with Node's raw error.
 */
import { readdirSync, readFileSync } from 'node:fs';

/**
 * RLIMIT_NOFILE's soft limit, from /proc (Node has no getrlimit; it raises the soft limit to
 * the hard one at start). 1024 where /proc is not there.
 */
export function descriptorLimit(): number {
  try {
    const line = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    if (line) return line[1] === 'unlimited' ? Number.MAX_SAFE_INTEGER : Number(line[1]);
  } catch {
    /* not Linux */
  }
  return 1024;
}

/** A quarter of the descriptors for sockets: the rest is for children's pipes and the server itself. */
export function defaultMaxConnections(limit = descriptorLimit()): number {
  return Math.max(1, Math.min(10_000, Math.floor(limit / 4)));
}

/**
 * Outgoing `http/request` sockets across the server (http-sockets.ts): a sixteenth of the
 * limit, at least 4 and at most 1024. Set aside like the connections' share.
 */
export function defaultMaxHttpSockets(limit = descriptorLimit()): number {
  return Math.max(4, Math.min(1024, Math.floor(limit / 16)));
}

/** What one session may hold of them: a quarter, at least 1 and at most 32. */
export function defaultMaxHttpSocketsPerSession(max: number): number {
  return Math.max(1, Math.min(32, Math.floor(max / 4)));
}

/** Descriptors open in this process now (null where /proc is not there). */
export function openDescriptorCount(): number | null {
  try {
    return readdirSync('/proc/self/fd').length - 1; // minus the one reading the directory
  } catch {
    return null;
  }
}

/**
 * What one process start may take: its keeper's stdin, stdout, stderr and control socket,
 * both ends of each while spawning, and the exec-status pipe.
 */
export const DESCRIPTORS_PER_START = 12;
/** Kept for the server itself (files it reads, DNS, logs, the listening socket). */
export const DESCRIPTORS_RESERVED = 32;

export class DescriptorBudget {
  constructor(
    readonly limit: number,
    /** Connections the cap still admits: their descriptors are promised. */
    private readonly socketRoom: () => number,
    private readonly countOpen: () => number | null = openDescriptorCount,
  ) {}

  /** Starts admitted and not finished: their descriptors are not all open yet. */
  private starting = 0;

  /**
   * Admits one process start (then call `startDone`), or says why not. Counting the starts
   * under way keeps a burst of them from all passing before any descriptor is open.
   */
  admitStart(): string | null {
    const open = this.countOpen();
    if (open === null) return null;
    const room = this.socketRoom();
    if (open + room + (this.starting + 1) * DESCRIPTORS_PER_START + DESCRIPTORS_RESERVED <= this.limit) {
      this.starting++;
      return null;
    }
    return (
      `too many open descriptors: ${open} of the server's limit of ${this.limit} are in use and ${room} are kept for ` +
      `connections; end some processes, or raise the limit (ulimit -n) or lower --max-connections`
    );
  }

  startDone(): void {
    if (this.starting > 0) this.starting--;
  }
}
