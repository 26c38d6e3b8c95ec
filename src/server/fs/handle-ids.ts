/**
 * The client's file-handle ids in one scope, as every back-end keeps them (the local one's
 * open files, local/fs/handles.ts; the relay's upstream ids): client-chosen ids, at most
 * `capacity` open or opening at once, and Codex's refusals with its texts, written once here.
 * What an id stands for (`T`) is the back-end's.
 */
import { FsLimits, invalidRequest } from '../../protocol/index.js';
import { notFound } from './errors.js';

export function checkHandleId(handleId: string): void {
  if (Buffer.byteLength(handleId) > FsLimits.maxHandleIdBytes) {
    throw invalidRequest(`file handle ID must not exceed ${FsLimits.maxHandleIdBytes} bytes`);
  }
}

export function checkBlockLength(len: number, what: 'read' | 'write'): void {
  if (len < 1 || len > FsLimits.maxBlockBytes) {
    throw invalidRequest(`file ${what} block length must be between 1 and ${FsLimits.maxBlockBytes}`);
  }
}

/** The use of an id that is not open (-32004; clients map it to EBADF). */
export const unknownHandle = (handleId: string) => notFound(`unknown file handle \`${handleId}\``);
/** Still "unknown file handle", saying why. */
const lostHandle = (handleId: string) =>
  notFound(`unknown file handle \`${handleId}\`: it was open when the server restarted, and file handles do not survive a server restart (open the file again)`);

export class HandleIds<T> {
  private readonly open = new Map<string, T>();
  /** Ids whose open is in flight (reserved so a duplicate or the cap is refused at once). */
  private readonly opening = new Set<string>();
  /** Ids open when a predecessor server stopped (restart adoption): their use is answered with `lostHandle`, until closed or opened anew. */
  private readonly lost = new Set<string>();

  constructor(
    private readonly capacity: number,
    /** The set of ids (`ids()`) changed: a handle opened or closed. */
    private readonly onChange: () => void = () => {},
  ) {}

  /** The ids open, and those lost in a restart not yet closed (what a session record keeps). */
  ids(): string[] {
    return [...this.open.keys(), ...this.lost];
  }

  /** A successor server: `ids` were open on its predecessor (bounded by the predecessor's cap). */
  markLost(ids: string[]): void {
    for (const id of ids.slice(0, this.capacity)) this.lost.add(id);
  }

  get size(): number {
    return this.open.size + this.opening.size;
  }

  /**
   * Opens `handleId` with `opening()`. The id and the cap are checked before it runs, so a
   * refused open never touches anything; the id stays reserved while it runs.
   */
  async add(handleId: string, opening: () => Promise<T>): Promise<void> {
    checkHandleId(handleId);
    if (this.open.has(handleId) || this.opening.has(handleId)) throw invalidRequest(`file handle \`${handleId}\` already exists`);
    if (this.size >= this.capacity) {
      throw invalidRequest(`at most ${this.capacity} file handles may be open per connection`);
    }
    this.opening.add(handleId);
    try {
      const opened = await opening();
      this.open.set(handleId, opened);
      this.lost.delete(handleId);
      this.onChange();
    } finally {
      this.opening.delete(handleId);
    }
  }

  /** What an open id stands for; "unknown file handle" otherwise (saying so when a restart lost it). */
  get(handleId: string): T {
    checkHandleId(handleId);
    const entry = this.open.get(handleId);
    if (entry === undefined) throw this.lost.has(handleId) ? lostHandle(handleId) : unknownHandle(handleId);
    return entry;
  }

  /** What an open id stands for, or undefined (closing an unknown handle succeeds, as in Codex). */
  find(handleId: string): T | undefined {
    checkHandleId(handleId);
    return this.open.get(handleId);
  }

  /** Forgets `handleId` (closed); a lost one is forgotten too. */
  delete(handleId: string): void {
    if (this.open.delete(handleId) || this.lost.delete(handleId)) this.onChange();
  }

  /** Forgets every open id (their owner is gone) and gives back what they stood for. */
  clear(): T[] {
    const entries = [...this.open.values()];
    this.open.clear();
    return entries;
  }
}
