/**
 * Extension `attach` on the client's side, once attached: the handles of a session this
 * client did not create (`ExecClient.attach`), and what becomes of them when the session is
 * taken (`session/writer`) or, for a watcher, ends (`session/ended`). A watcher also polls
 * `session/watch` (session-poll.ts) and adopts each process started after it attached.
 * `attachRequest` checks what `ExecClient.attach` was given and says what `initialize` asks for.
 */
import { ErrorCode } from '../../protocol/codes.js';
import { RpcError } from '../../protocol/errors.js';
import { Method } from '../../protocol/types.js';
import { OutputLostError, SessionLostError } from '../errors.js';
import type { ProcessTable } from '../inbound.js';
import type { AttachOptions, ExecClientOptions } from '../options.js';
import { adoptProcess, ExecProcess, failProcess, isLive, sequencerOf, type ProcessHost } from '../process/process.js';
import type { AttachedProcess, AttachRequest, AttachRole, SessionEndedNotification } from './attach-wire.js';
import type { SessionWatchResult } from '../../protocol/extensions.js';
import { newProcesses, SessionPoller } from './session-poll.js';
import { followByReads, readOnlyReason, ReadOnlyHost } from './watch.js';

/** What `ExecClient.attach` asks the server, and the options its connection is made with. */
export function attachRequest(target: string, options: AttachOptions): { request: AttachRequest; connectOptions: ExecClientOptions } {
  if (typeof target !== 'string' || target === '') throw new TypeError('ExecClient.attach: target must be a session id or name');
  const role: AttachRole = options.role ?? 'writer';
  if (role !== 'writer' && role !== 'watcher') throw new TypeError(`ExecClient.attach: role must be 'writer' or 'watcher' (got ${String(role)})`);
  const request: AttachRequest = { session: target, role, ...(options.take ? { take: true } : {}) };
  if (options.followNew !== undefined && typeof options.followNew !== 'boolean') throw new TypeError(`ExecClient.attach: followNew must be a boolean (got ${String(options.followNew)})`);
  const { role: _role, take: _take, fromStart: _fromStart, sinks: _sinks, followNew: _followNew, ...connectOptions } = options;
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
  /** Tells the client's user of a process a watcher found after it attached (the 'process' event). */
  processFound(proc: ExecProcess): void;
}

export class Attachment {
  /** The handles of the attached session's processes (in the server's order, then as found). */
  #handles: ExecProcess[] = [];
  /** Handles followed by `process/read` (a watcher's, or a writer's after its session was taken). */
  readonly #following = new Set<ExecProcess>();
  /** A watcher's: the ids of the processes the server listed last (`newProcesses`). */
  #known = new Set<string>();
  /** A watcher's `session/watch` schedule, from `adoptAll` until the client or the session ends. */
  #poller: SessionPoller | null = null;
  #options: AttachOptions = {};
  /** The session's processes as this client attached: `sinks`' `all`, for those found later too. */
  #attached: readonly AttachedProcess[] = [];

  constructor(private readonly host: AttachmentHost) {}

  /** The handles of the attached session's processes: those it had when this client attached, and for a watcher those found since. */
  get handles(): ExecProcess[] {
    return [...this.#handles];
  }

  /** Handles for the attached session's processes, fed what arrived for them meanwhile; a watcher then polls for new ones. */
  adoptAll(processes: AttachedProcess[], options: AttachOptions): void {
    const { table, ops } = this.host;
    const watcher = this.host.role === 'watcher';
    this.#options = options;
    this.#attached = processes;
    for (const p of processes) {
      if (typeof p?.processId !== 'string' || table.has(p.processId)) continue;
      const proc = this.#adopt(p, watcher);
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
    if (watcher && options.followNew !== false) this.#watchForNew(processes);
  }

  /** Stops a watcher's polling (the client closed, detached or failed). */
  stop(): void {
    this.#poller?.stop();
  }

  /** A handle for process `p` of the session, in the table (not yet adopted at a seq). */
  #adopt(p: AttachedProcess, watcher: boolean): ExecProcess {
    const { table, ops } = this.host;
    const sessionLabel = () => this.host.sessionLabel();
    // `all` stays the list it attached to, so that a callback choosing among them chooses the same.
    const sinks = this.#options.sinks?.(p, this.#attached);
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
      watcher ? new ReadOnlyHost(sessionLabel) : ops,
    );
    table.adopt(proc, watcher ? undefined : p.handle);
    proc.once('close', () => table.forget(proc));
    proc.closed.catch(() => table.forget(proc));
    return proc;
  }

  /**
   * A watcher polls `session/watch` and follows each process it had not seen, from its first
   * event (it started after this client attached: all its output is news; what the server no
   * longer holds is a 'gap').
   */
  #watchForNew(attached: readonly AttachedProcess[]): void {
    if (this.#poller) return;
    this.#known = newProcesses(new Set(), attached).known;
    this.#poller = new SessionPoller({
      poll: async () => (await this.host.ops.call<SessionWatchResult>(Method.sessionWatch, {})).processes,
      answered: (processes) => this.#found(processes),
      // The session is gone (the client failed, closed, detached), or the server has no such method: no use asking again.
      failed: (err) => !(err instanceof SessionLostError || (err instanceof RpcError && err.code === ErrorCode.MethodNotFound)),
    });
    this.#poller.start();
  }

  /** A `session/watch` answer: a handle, followed, for each process not seen before. */
  #found(processes: AttachedProcess[]): void {
    const { added, known } = newProcesses(this.#known, processes);
    const { table } = this.host;
    for (const p of added) {
      // An id a handle of this client still follows (a writer used it again while this
      // watcher read the old one's end): looked at again once that handle is done.
      if (table.has(p.processId)) known.delete(p.processId);
    }
    this.#known = known;
    // Handles of closed processes the server has forgotten leave `processes()`: it stays as
    // bounded as what the server holds, however many short commands the writer runs.
    this.#handles = this.#handles.filter((h) => isLive(h) || known.has(h.id));
    for (const p of added) {
      if (table.has(p.processId) || this.host.role !== 'watcher') continue;
      const proc = this.#adopt(p, true);
      adoptProcess(proc, 0);
      this.#handles.push(proc);
      this.#follow(proc);
      this.host.processFound(proc);
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
    this.stop();
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
