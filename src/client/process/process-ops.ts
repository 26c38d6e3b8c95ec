/**
 * The per-process operations of a client (`ProcessHost`): start, write, close stdin,
 * signal, terminate, resize, fill a hole, acknowledge. Each request is exactly-once through
 * drops by way of one helper, `retryOnLoss`: a write re-sent with its `writeId`, a start
 * whose answer was lost settled by asking about its id, a signal or terminate re-sent only
 * while the process runs.
 */
import { randomUUID } from 'node:crypto';
import type { Readable, Writable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import { encodeAckFrame } from '../../protocol/binary-frames.js';
import type { ExtensionName } from '../../protocol/extensions.js';
import {
  Method,
  type EnvironmentInfo,
  type EnvPolicy,
  type ProcessReadResult,
  type ProcessStartParams,
  type ProcessStartResult,
  type ProcessTerminateResult,
  type ProcessWriteResult,
  type SignalName,
} from '../../protocol/types.js';
import type { Logger } from '../../util/logger.js';
import { sleep } from '../../util/timeouts.js';
import type { Acknowledger } from '../acks.js';
import type { Connection } from '../connection.js';
import { isDuplicateProcess, isStarting, isUnknownProcess } from '../error-text.js';
import { OutputLostError } from '../errors.js';
import type { CodexFlow } from '../flow.js';
import type { ProcessTable } from '../inbound.js';
import { failProcess, isLive, isStarted, mergeRead, sequencerOf, whenStarted, type ExecProcess, type ProcessHost } from './process.js';
import { retryOnLoss } from '../retry.js';
import { startingWriteDelayMs } from '../../util/backoff.js';
import type { SpawnOptions } from '../options.js';

/** Bytes per process/write (base64 makes the message a third larger). */
const MAX_WRITE_BYTES = 1024 * 1024;
/** How long a start the server says is still in progress is waited for. */
export const STILL_STARTING_MS = 10_000;

/** What the operations need from the session. */
export interface OpsSession {
  /** The current connection, waiting while recovering; rejects once failed. */
  ready(): Promise<Connection>;
  /** The current connection when connected and open (acks are not queued). */
  openConnection(): Connection | undefined;
  readonly extensions: ReadonlySet<ExtensionName>;
  environmentInfo(): Promise<EnvironmentInfo>;
  readonly logger: Logger | undefined;
}

export class ProcessOps implements ProcessHost {
  /** Processes whose hole is being filled (single flight). */
  private readonly filling = new Set<string>();
  /** Terminal sizes on their way, per process (see `resize`). */
  private readonly resizes = new Map<ExecProcess, { pending: { cols: number; rows: number } | null; running: Promise<void> | null }>();

  constructor(
    private readonly session: OpsSession,
    private readonly table: ProcessTable,
    private readonly flow: CodexFlow,
    private readonly acknowledger: Acknowledger,
  ) {}

  private get acks(): boolean {
    return this.session.extensions.has('acks');
  }

  /** A request that is re-sent, unchanged, on the next connection if its socket dies. */
  call<T>(method: string, params: object): Promise<T> {
    return retryOnLoss(() => this.session.ready(), { attempt: (connection) => connection.request<T>(method, params) });
  }

  /** Extension `acks`: one acknowledgement, binary when the process has a frame handle. False when not connected. */
  sendAck(processId: string, seq: number): boolean {
    const connection = this.session.openConnection();
    if (!connection) return false;
    const handle = this.table.handleOfId(processId);
    // A forgotten process (its close re-acknowledged) has no handle any more: JSON then.
    if (handle !== 0) connection.sendBinary(encodeAckFrame(handle, seq));
    else connection.notify(Method.processAck, { processId, seq });
    return true;
  }

  async writeStdin(proc: ExecProcess, data: Buffer): Promise<void> {
    // Servers cap message sizes (tether: 16 MiB): send big writes as ordered pieces, each
    // its own logical write with its own writeId.
    let offset = 0;
    do {
      const piece = data.subarray(offset, offset + MAX_WRITE_BYTES);
      await this.write(proc, { processId: proc.id, chunk: piece.toString('base64'), writeId: randomUUID() });
      offset += MAX_WRITE_BYTES;
    } while (offset < data.length);
  }

  /**
   * The protocol has no way to close a child's stdin; tether servers accept `closeStdin:
   * true` on `process/write` as an extension (Codex ignores the member and writes nothing,
   * so this is harmless there).
   */
  async closeStdin(proc: ExecProcess): Promise<void> {
    // A pty has no separate stdin to close (closing its master hangs the session up); on a
    // terminal, end of input is the program's business (^D), so ending a tty's stdin is a no-op.
    if (!isLive(proc) || proc.tty) return;
    await this.write(proc, { processId: proc.id, chunk: '', writeId: randomUUID(), closeStdin: true }).catch(() => {});
  }

  /** Signals are re-sent after a lost answer only while the process is still running. */
  async signal(proc: ExecProcess, signal: SignalName): Promise<void> {
    await whenStarted(proc);
    await retryOnLoss<void>(() => this.session.ready(), {
      before: () => (sequencerOf(proc).exitSeen || !isLive(proc) ? { value: undefined } : undefined),
      attempt: async (connection) => {
        await connection.request(Method.processSignal, { processId: proc.id, signal });
      },
    });
  }

  /**
   * `ExecProcess.kill`'s request, not awaited. A server that accepted no tether extension
   * (Codex) knows only `interrupt`: `terminate` and `kill` become `process/terminate` there.
   */
  kill(proc: ExecProcess, signal: SignalName): void {
    const codex = this.session.extensions.size === 0;
    const sent = codex && (signal === 'terminate' || signal === 'kill') ? this.terminate(proc).then(() => {}) : this.signal(proc, signal);
    sent.catch((err: unknown) => {
      // As Node's ChildProcess: a signal that could not be delivered is an 'error' (when
      // someone listens; a lost session is reported by `exited` and `closed` anyway).
      if (isLive(proc) && proc.listenerCount('error') > 0) proc.emit('error', err as Error);
    });
  }

  /** A terminate whose answer was lost is not re-sent if the process exited meanwhile (137 = ours). */
  async terminate(proc: ExecProcess): Promise<boolean> {
    await whenStarted(proc).catch(() => {});
    if (!isStarted(proc)) return false;
    return retryOnLoss(() => this.session.ready(), {
      before: (lost) => (sequencerOf(proc).exitSeen || !isLive(proc) ? { value: lost > 0 && proc.exitCode === 137 } : undefined),
      attempt: async (connection, lost) => {
        const result = await connection.request<ProcessTerminateResult>(Method.processTerminate, { processId: proc.id });
        return result.running || (lost > 0 && proc.exitCode === 137);
      },
    });
  }

  /**
   * One resize in flight per process; a newer size waits and replaces any older waiting one,
   * so sizes arrive in order and a burst of SIGWINCH costs two requests.
   */
  async resize(proc: ExecProcess, cols: number, rows: number): Promise<boolean> {
    if (!this.session.extensions.has('processResize')) return false;
    const state = this.resizes.get(proc) ?? { pending: null, running: null };
    this.resizes.set(proc, state);
    state.pending = { cols, rows };
    state.running ??= (async () => {
      try {
        await whenStarted(proc);
        while (state.pending) {
          const size = state.pending;
          state.pending = null;
          if (!isLive(proc) || sequencerOf(proc).exitSeen) break;
          await this.call(Method.processResize, { processId: proc.id, ...size });
        }
      } finally {
        state.running = null;
        this.resizes.delete(proc);
      }
    })();
    await state.running;
    return true;
  }

  /** Nobody can follow this process any more: terminate it (best effort) rather than leak it. */
  abandon(proc: ExecProcess): void {
    if (!isStarted(proc) || sequencerOf(proc).exitSeen) return;
    this.call(Method.processTerminate, { processId: proc.id }).catch(() => {});
  }

  /** `acks`: tell the server how far the consumer got. */
  consumed(proc: ExecProcess, seq: number, bytes: number, final: boolean): void {
    if (this.acks) this.acknowledger.consumed(proc.id, seq, bytes, final);
  }

  outputBuffered(stream: Readable | Writable): void {
    this.flow.outputBuffered(stream);
  }

  outputWanted(): void {
    this.flow.outputWanted();
  }

  /** Single flight per process: read what the notifications skipped. */
  fillHole(proc: ExecProcess): void {
    if (this.filling.has(proc.id) || !isStarted(proc)) return;
    this.filling.add(proc.id);
    const afterSeq = sequencerOf(proc).lastDelivered;
    this.call<ProcessReadResult>(Method.processRead, { processId: proc.id, afterSeq })
      .then((result) => mergeRead(proc, afterSeq, result))
      .catch((err) => {
        if (isUnknownProcess(err)) failProcess(proc, new OutputLostError(proc.id, afterSeq + 1, Infinity, 'could not be read: the server no longer knows the process'));
      })
      .finally(() => {
        this.filling.delete(proc.id);
        if (isLive(proc) && sequencerOf(proc).hasHole) this.fillHole(proc);
      });
  }

  /** Starts `proc` on the server (`spawn`'s request); a failure fails the handle. */
  async spawn(proc: ExecProcess, argv: string[], options: SpawnOptions): Promise<void> {
    try {
      const cwd = await this.resolveCwd(options.cwd);
      const useDefaultEnv = options.env === undefined && options.envPolicy === undefined;
      const params: ProcessStartParams = {
        processId: proc.id,
        argv,
        cwd,
        env: options.env ?? {},
        tty: options.tty ?? false,
        pipeStdin: options.pipeStdin ?? false,
      };
      if (useDefaultEnv) params.envPolicy = fullEnvPolicy({ inherit: 'core' });
      else if (options.envPolicy) params.envPolicy = fullEnvPolicy(options.envPolicy);
      if (options.arg0 !== undefined) params.arg0 = options.arg0;
      if (options.tty && options.terminalSize && this.session.extensions.has('processResize')) params.terminalSize = options.terminalSize;
      if (options.keepLast !== undefined && this.session.extensions.has('keepLast')) params.keepLastBytes = options.keepLast;
      const handle = this.table.handleOf(proc);
      if (handle !== 0) params.handle = handle;
      await this.start(
        params,
        (read) => {
          proc.markStarted();
          mergeRead(proc, 0, read);
        },
        () => sequencerOf(proc).lastDelivered > 0 || !isLive(proc),
      );
      proc.markStarted();
    } catch (err) {
      failProcess(proc, err as Error);
    }
  }

  /**
   * `process/start`, exactly once. If the socket dies before the answer, the start may or may
   * not have happened: ask the server about the (client-chosen) id. Known → adopt it (and
   * hand its output so far to `adopt`); unknown → start it. A duplicate-id answer after a lost
   * attempt means our own earlier start landed: adopt too. Never started twice, never leaked.
   * `seen`: events of the process already arrived (with acks the server replays them on the
   * resume, and may have forgotten the process once its close was acknowledged): it exists.
   */
  start(params: ProcessStartParams, adopt: (read: ProcessReadResult) => void, seen: () => boolean = () => false): Promise<void> {
    let startingSince: number | undefined;
    return retryOnLoss(() => this.session.ready(), {
      attempt: async (connection, lost) => {
        const uncertain = lost > 0;
        for (;;) {
          if (uncertain && seen()) {
            this.log(`process ${params.processId}: start answer lost, the server has the process: adopted (its events arrived)`);
            return;
          }
          if (uncertain) {
            try {
              const read = await connection.request<ProcessReadResult>(Method.processRead, { processId: params.processId, afterSeq: 0 });
              this.log(`process ${params.processId}: start answer lost, the server has the process: adopted`);
              adopt(read);
              return;
            } catch (err) {
              // Codex answers "process id … is starting" while that start is still in progress:
              // ask again (for a while: a start that never ends is the server's failure to report).
              if (isStarting(err) && (startingSince ??= Date.now()) > Date.now() - STILL_STARTING_MS) {
                await sleep(20);
                continue;
              }
              if (!isUnknownProcess(err)) throw err;
              this.log(`process ${params.processId}: start answer lost, the server does not have the process: starting it`);
            }
          }
          try {
            await connection.request<ProcessStartResult>(Method.processStart, params);
            return;
          } catch (err) {
            if (uncertain && isDuplicateProcess(err)) continue; // ours landed earlier: the read adopts it
            throw err;
          }
        }
      },
    });
  }

  private async write(proc: ExecProcess, params: { processId: string; chunk: string; writeId: string; closeStdin?: boolean }): Promise<void> {
    await whenStarted(proc);
    for (let starting = 0; ; starting++) {
      if (!isLive(proc)) throw new Error(`process ${proc.id} has closed; its stdin cannot be written`);
      // Same params (same writeId) on every try: the server writes a repeated id only once.
      const { status } = await this.call<ProcessWriteResult>(Method.processWrite, params);
      switch (status) {
        case 'accepted':
          return;
        case 'starting':
          await sleep(startingWriteDelayMs(starting));
          continue;
        case 'stdinClosed':
          throw Object.assign(new Error(`stdin of process ${proc.id} is closed`), { code: 'EPIPE' });
        case 'unknownProcess':
          throw Object.assign(new Error(`process ${proc.id} is unknown to the server`), { code: 'EPIPE' });
        default:
          throw new Error(`process/write answered an unknown status ${JSON.stringify(status)}`);
      }
    }
  }

  private async resolveCwd(cwd: string | undefined): Promise<string> {
    if (cwd !== undefined && cwd.startsWith('file://')) return cwd;
    if (cwd !== undefined && cwd.startsWith('/')) return pathToFileURL(cwd).href;
    const info = await this.session.environmentInfo();
    if (cwd === undefined || cwd === '' || cwd === '.') return info.cwd;
    const base = info.cwd.endsWith('/') ? info.cwd : `${info.cwd}/`;
    return new URL(cwd.split('/').map(encodeURIComponent).join('/'), base).href;
  }

  private log(message: string): void {
    this.session.logger?.('info', message);
  }
}

/** Codex requires every member of `envPolicy`; fill in the protocol's defaults. */
export function fullEnvPolicy(policy: EnvPolicy): Required<EnvPolicy> {
  return {
    inherit: policy.inherit ?? 'all',
    ignoreDefaultExcludes: policy.ignoreDefaultExcludes ?? false,
    exclude: policy.exclude ?? [],
    set: policy.set ?? {},
    includeOnly: policy.includeOnly ?? [],
  };
}
