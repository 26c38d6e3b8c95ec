/**
 * Extension `attach` on the client's side, once attached: the handles of a session this
 * client did not create (`ExecClient.attach`), and what becomes of them when the session is
 * taken (`session/writer`) or, for a watcher, ends (`session/ended`). `attachRequest` checks
 * what `ExecClient.attach` was given and says what `initialize` asks for.
 */
import { OutputLostError } from '../errors.js';
import type { ProcessTable } from '../inbound.js';
import type { AttachOptions, ExecClientOptions } from '../options.js';
import { adoptProcess, ExecProcess, failProcess, isLive, sequencerOf, type ProcessHost } from '../process/process.js';
import type { AttachedProcess, AttachRequest, AttachRole, SessionEndedNotification } from './attach-wire.js';
import { followByReads, readOnlyReason, ReadOnlyHost } from './watch.js';

/** What `ExecClient.attach` asks the server, and the options its connection is made with. */
export function attachRequest(target: string, options: AttachOptions): { request: AttachRequest; connectOptions: ExecClientOptions } {
  if (typeof target !== 'string' || target === '') throw new TypeError('ExecClient.attach: target must be a session id or name');
  const role: AttachRole = options.role ?? 'writer';
  if (role !== 'writer' && role !== 'watcher') throw new TypeError(`ExecClient.attach: role must be 'writer' or 'watcher' (got ${String(role)})`);
  const request: AttachRequest = { session: target, role, ...(options.take ? { take: true } : {}) };
  const { role: _role, take: _take, fromStart: _fromStart, sinks: _sinks, ...connectOptions } = options;
  return { request, connectOptions };
}

/** What an `Attachment` needs of its client. */
export interface AttachmentHost {
  /** The session link's role: `writer`, `watcher` (a writer whose session was taken becomes one), null in the client's own session. */
  role: AttachRole | null;
  /** The processes this client follows. */
  readonly table: ProcessTable;
  /** A writer's handles' host (stdin, signals, resize), whose `call` re-sends through drops. */
  readonly ops: ProcessHost & { call<T>(method: string, params: object): Promise<T> };
  /** The session as an error text names it (its name, else its id's start). */
  sessionLabel(): string;
  /** Tells the client's user that another attachment took the session (the 'writer-lost' event). */
  writerLost(reason: string): void;
}

export class Attachment {
  /** The handles of the attached session's processes (in the server's order). */
  readonly #handles: ExecProcess[] = [];
  /** Handles followed by `process/read` (a watcher's, or a writer's after its session was taken). */
  readonly #following = new Set<ExecProcess>();

  constructor(private readonly host: AttachmentHost) {}

  /** The handles of the attached session's processes (those it had when this client attached). */
  get handles(): ExecProcess[] {
    return [...this.#handles];
  }

  /** Handles for the attached session's processes, fed what arrived for them meanwhile. */
  adoptAll(processes: AttachedProcess[], options: AttachOptions): void {
    const { table, ops } = this.host;
    const watcher = this.host.role === 'watcher';
    const sessionLabel = () => this.host.sessionLabel();
    const readOnly = new ReadOnlyHost(sessionLabel);
    for (const p of processes) {
      if (typeof p?.processId !== 'string' || table.has(p.processId)) continue;
      const sinks = options.sinks?.(p, processes);
      const proc = new ExecProcess(
        p.processId,
        Array.isArray(p.argv) ? p.argv : [],
        {
          tty: p.tty === true,
          pipeStdin: !watcher,
          stdoutSink: sinks?.stdout,
          stderrSink: sinks?.stderr,
          ...(watcher ? { readOnly: readOnlyReason(p.processId, sessionLabel(), 'write to its stdin') } : {}),
        },
        watcher ? readOnly : ops,
      );
      table.adopt(proc, watcher ? undefined : p.handle);
      proc.once('close', () => table.forget(proc));
      proc.closed.catch(() => table.forget(proc));
      const acked = Math.max(0, Math.floor(p.ackedSeq ?? 0));
      if (!options.fromStart && p.state === 'exited' && typeof p.exitCode === 'number' && acked >= p.nextSeq - 1) {
        // Its writer took everything, the close included: nothing more will come for it, so
        // the handle ends here, with its exit status.
        adoptProcess(proc, Math.max(0, p.nextSeq - 3));
        proc.accept({ type: 'exit', seq: Math.max(1, p.nextSeq - 2), exitCode: p.exitCode });
        proc.accept({ type: 'close', seq: Math.max(2, p.nextSeq - 1) });
      } else {
        adoptProcess(proc, options.fromStart ? 0 : acked);
      }
      this.#handles.push(proc);
    }
    table.release();
    for (const proc of this.#handles) {
      // A watcher pulls everything; a writer is pushed what its session holds unacknowledged
      // (from `ackedSeq` on) and, from the start, reads what came before that.
      if (watcher) this.#follow(proc);
      else if (options.fromStart) ops.fillHole(proc);
    }
  }

  /** `session/writer {writer: false}`: another attachment took the session; this client watches on. */
  writerLost(reason: string): void {
    if (this.host.role === 'watcher') return;
    this.host.role = 'watcher';
    for (const proc of this.host.table.live()) this.#follow(proc);
    this.host.writerLost(reason);
  }

  /**
   * `session/ended` (a watcher): the session is gone, and with it what this client did not
   * read. Each handle still live says exactly what it missed, as a 'gap', then ends with its
   * exit status; one whose process the end killed (still running) fails saying so.
   */
  sessionEnded(ended: SessionEndedNotification): void {
    if (this.host.role !== 'watcher') return;
    for (const proc of this.host.table.live()) {
      const end = ended.processes.find((p) => p.processId === proc.id);
      const delivered = sequencerOf(proc).lastDelivered;
      if (end && end.closed && end.exitCode !== null && end.nextSeq >= 3) {
        // Output seqs it never read: after what it delivered, before the exit (nextSeq - 2).
        if (delivered < end.nextSeq - 3) proc.acceptGap(delivered + 1, end.nextSeq - 3);
        proc.accept({ type: 'exit', seq: end.nextSeq - 2, exitCode: end.exitCode });
        proc.accept({ type: 'close', seq: end.nextSeq - 1 });
        continue;
      }
      const what = end && end.exitCode !== null ? `after it exited ${end.exitCode}, before its output was all read` : 'while it ran (the end killed it)';
      failProcess(proc, new OutputLostError(proc.id, delivered + 1, Infinity, `could not be watched further: the session ended (${ended.reason}) ${what}`));
    }
  }

  /** Follows `proc` by reads (once), until it closes or fails. */
  #follow(proc: ExecProcess): void {
    if (this.#following.has(proc) || !isLive(proc)) return;
    this.#following.add(proc);
    void followByReads(proc, (method, params) => this.host.ops.call(method, params)).finally(() => this.#following.delete(proc));
  }
}
