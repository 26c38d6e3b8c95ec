/**
 * The `tether mcp` bridge: a local stdio MCP server whose other end is a remote stdio MCP
 * server process, so any MCP host can run a remote server with a plain command line.
 *
 * Bytes are relayed as they are, both ways: JSON-RPC over stdio is newline-delimited text,
 * and the remote process's stdin/stdout are streams with the same semantics (the ExecClient
 * replays missed output by sequence number and re-sends unacknowledged writes under the
 * same write id), so reframing would add latency and nothing else. Diagnostics go to the
 * diagnostics stream (stderr): the output stream carries protocol messages only.
 *
 * Exit status, so the host's restart logic can act:
 * - the remote process exits on its own: its exit code;
 * - local stdin ends (the host is done): the remote process's stdin ends too; if it has not
 *   exited within EOF_GRACE_MS it is killed, then 0;
 * - a signal (SIGTERM from the host): the remote process is asked to terminate and killed at
 *   once, so the caller closes the session before a host's SIGKILL could leave it behind (an
 *   SDK v2 host reaps its version-probe sibling with SIGTERM and SIGKILL 1 s later);
 * - the session is really lost (expired, deadline, auth, output lost): EXIT_SESSION_LOST;
 * - another attachment took the session's writer (`tether attach --take`): the host's MCP
 *   stream is no longer ours to relay (the taker's requests would be answered into it), so
 *   nothing more is relayed either way, and EXIT_SESSION_LOST; the remote server runs on,
 *   the taker's (this client, now a watcher, only leaves).
 */
import { constants as osConstants } from 'node:os';
import type { Readable, Writable } from 'node:stream';
import type { EnvPolicy } from '../protocol/index.js';
import { ServerStoppedError, type ExecClient, type ExecProcess, type RecoveredEvent, type RestartingEvent, type StateChange } from '../client/index.js';
import { restartingLine, SERVER_STOPPED_LINE } from '../util/stop-notices.js';
import { settleWithin, withTimeout } from '../util/timeouts.js';
import { isEnded } from '../client/engine.js';

/** As ssh and `tether exec`: 255 means tether itself failed (unreachable, session lost), not the server. */
export const EXIT_SESSION_LOST = 255;
/** As a shell and `tether exec`: the remote command could not be started. */
export const EXIT_START_FAILED = 127;

/** How long a remote server whose stdin ended may take to exit on its own. */
const EOF_GRACE_MS = 1000;
/** Bound on each step of stopping the remote process. */
const STOP_STEP_MS = 500;

export interface BridgeOptions {
  client: ExecClient;
  argv: string[];
  cwd?: string;
  env?: Record<string, string>;
  envPolicy?: EnvPolicy;
  /** The host's side: protocol in (local stdin) and out (local stdout). */
  input: Readable;
  output: Writable;
  /** Diagnostics and the remote process's stderr (local stderr). */
  diagnostics: Writable;
  /** Aborting it (e.g. on SIGTERM) stops the remote process at once and ends the bridge; a signal name as the reason sets the exit code (128 + its number). */
  signal?: AbortSignal;
}

export interface BridgeResult {
  exitCode: number;
  reason: 'exited' | 'input-ended' | 'session-lost' | 'start-failed' | 'aborted' | 'taken';
}

export async function runBridge(options: BridgeOptions): Promise<BridgeResult> {
  const { client, input, output, diagnostics } = options;
  const say = (line: string) => diagnostics.write(`tether mcp: ${line}\n`);
  const program = options.argv[0] ?? '';

  // One line per drop and one per recovery: enough for a human reading the host's logs.
  // A restart the server announced is told as such, instead of as a lost link.
  let restarting = false;
  const onRestarting = ({ keptMs }: RestartingEvent) => {
    restarting = true;
    say(restartingLine(keptMs));
  };
  const onState = ({ state, previous, reason }: StateChange) => {
    if (state === 'recovering' && previous !== 'recovering' && !restarting) say(`link lost${reason ? ` (${reason})` : ''}; reconnecting…`);
    restarting = false;
  };
  const onRecovered = ({ attempts, downtimeMs }: RecoveredEvent) => {
    say(`reconnected, session resumed (${Math.round(downtimeMs)} ms, ${attempts} attempt${attempts === 1 ? '' : 's'})`);
  };
  client.on('restarting', onRestarting);
  client.on('state', onState);
  client.on('recovered', onRecovered);
  const unlisten = () => {
    client.off('restarting', onRestarting);
    client.off('state', onState);
    client.off('recovered', onRecovered);
  };

  let proc: ExecProcess;
  try {
    proc = client.spawn(options.argv, {
      cwd: options.cwd,
      env: options.env ?? {},
      envPolicy: options.envPolicy,
      pipeStdin: true,
    });
    await new Promise<void>((resolve, reject) => {
      proc.once('spawn', resolve);
      proc.once('error', reject);
    });
  } catch (error) {
    unlisten();
    // A tether server's message names the program (or the cwd) itself: not twice.
    const text = message(error);
    say(text.startsWith('cannot start ') ? `the remote host ${text}` : `could not start '${program}' on the remote host: ${text}`);
    return { exitCode: EXIT_START_FAILED, reason: 'start-failed' };
  }

  return new Promise<BridgeResult>((resolve) => {
    let settled = false;
    let exitCode: number | undefined;
    let closingFor: 'input-ended' | 'aborted' | undefined;
    let abortCode = 130;

    const settle = (result: BridgeResult) => {
      if (settled) return;
      settled = true;
      unlisten();
      client.off('writer-lost', onWriterLost);
      input.unpipe(proc.stdin ?? undefined);
      input.pause();
      options.signal?.removeEventListener('abort', onAbort);
      resolve(result);
    };

    const ended = new Promise<void>((resolveEnded) => {
      proc.once('close', () => resolveEnded());
      proc.once('error', () => resolveEnded());
    });
    const endedWithin = (ms: number) => settleWithin(ended, ms);

    // Both streams fully relayed (stderr too: the host logs it) before we report anything.
    const outputDone = Promise.all(
      [proc.stdout, proc.stderr].map(
        (stream) =>
          new Promise<void>((resolveDone) => {
            stream.once('end', resolveDone);
            stream.once('close', resolveDone);
          }),
      ),
    ).then(() => {});
    proc.stdout.pipe(output, { end: false });
    proc.stderr.pipe(diagnostics, { end: false });
    if (proc.stdin) {
      input.pipe(proc.stdin, { end: false });
      proc.stdin.on('error', (error: Error) => {
        // The handle's own failure (session lost) is reported once, below.
        if (!settled && !closingFor && error !== proc.error) say(`writing to the remote process failed: ${error.message}`);
      });
    }

    proc.on('exit', (code: number) => {
      exitCode = code;
    });

    // The writer was taken: from here on the output this client would read is the taker's
    // exchange, not the host's. Cut both directions now, in the event itself (before any
    // read this client makes as a watcher can deliver a byte), and end.
    function onWriterLost() {
      if (settled) return;
      proc.stdout.unpipe(output);
      proc.stderr.unpipe(diagnostics);
      for (const stream of [proc.stdout, proc.stderr]) stream.resume(); // read and drop: nothing held in memory
      say("the session was taken by another attachment (tether attach --take): this host's MCP stream ends here; the remote server runs on, the taker's");
      settle({ exitCode: EXIT_SESSION_LOST, reason: 'taken' });
    }
    client.on('writer-lost', onWriterLost);
    // Both ends wait for the remote stdout to be fully relayed: the last protocol messages
    // must reach the host before we report anything or exit.
    proc.once('close', () => {
      void outputDone.then(() => {
        if (closingFor) settle({ exitCode: closingFor === 'aborted' ? abortCode : 0, reason: closingFor });
        else settle({ exitCode: exitCode ?? 0, reason: 'exited' });
      });
    });
    proc.once('error', (error: Error) => {
      // Output lost with the session alive: the stream has a hole, so stop the server.
      // (proc.terminate() is a no-op on a failed handle: ask the server directly.)
      if (!isEnded(client.state)) void client.request('process/terminate', { processId: proc.id }).catch(() => {});
      void outputDone.then(() => {
        say(error instanceof ServerStoppedError ? SERVER_STOPPED_LINE : `giving up on the remote MCP server: ${message(error)}`);
        settle({ exitCode: EXIT_SESSION_LOST, reason: 'session-lost' });
      });
    });

    // The host is done with us: the remote server gets EOF as it would locally, and a short
    // while to exit on its own before it is killed (the caller then closes the session).
    input.once('end', () => {
      if (settled || closingFor) return;
      closingFor = 'input-ended';
      void (async () => {
        proc.stdin?.end();
        if (await endedWithin(EOF_GRACE_MS)) return;
        await stopNow();
        settle({ exitCode: 0, reason: 'input-ended' });
      })();
    });

    // Asks the remote server to terminate (a chance to clean up) and kills it without
    // waiting: the session is closed next, which ends whatever is left on the server.
    async function stopNow(): Promise<void> {
      void proc.signal('terminate').catch(() => {}); // Codex accepts only "interrupt"
      await withTimeout(proc.terminate(), STOP_STEP_MS).catch(() => false);
      await endedWithin(STOP_STEP_MS);
    }

    // Signalled by the host or Ctrl-C: stop at once. A host may SIGKILL us soon after its
    // SIGTERM (an SDK v2 host 1 s after, when it reaps its version-probe sibling), and
    // whatever we have not closed by then stays on the server until the session expires.
    function onAbort() {
      if (settled) return;
      closingFor = 'aborted';
      abortCode = signalExitCode(options.signal?.reason);
      void stopNow().then(() => {
        // A host that has stopped reading will not get what the remote server still sends
        // before we exit: drop it, so that its flow control no longer holds the session's
        // answers back and closing the session is not left to time out.
        if (output.writableNeedDrain) {
          for (const stream of [proc.stdout, proc.stderr]) {
            stream.unpipe();
            stream.resume();
          }
        }
        settle({ exitCode: abortCode, reason: 'aborted' });
      });
    }
    if (options.signal?.aborted) onAbort();
    else options.signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** 128 + the signal number when the abort reason names a signal (SIGTERM → 143), else 130. */
function signalExitCode(reason: unknown): number {
  const signo = typeof reason === 'string' ? osConstants.signals[reason as NodeJS.Signals] : undefined;
  return signo ? 128 + signo : 130;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
