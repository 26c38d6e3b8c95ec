/**
 * What a kept keeper is given at spawn and returns at adoption (its `meta`, kept-server.ts):
 * the session and process it runs for, its handle, argv as listed, tty, stdin; and the output
 * it may retain. Read back the meta is untrusted input like the rest of the state dir: what
 * is not ours gives null.
 */
import type { OutputLimits } from '../output/index.js';
import { listedArgv } from '../session/index.js';

/** Output a keeper may retain beyond what the server's log can hold (bytes in flight between them). */
const CAP_SLACK_BYTES = 1024 * 1024;

/** The output a keeper of a process with these limits may retain (its `capBytes`). */
export function keeperCapBytes(limits: OutputLimits): number {
  return limits.windowBytes + limits.retentionBytes + limits.readAheadBytes + CAP_SLACK_BYTES;
}

/** What a kept keeper is given at spawn and returns at adoption (its `meta`). */
export interface KeptMeta {
  v: 1;
  session: string;
  process: string;
  handle: number;
  argv: string[];
  tty: boolean;
  stdin: boolean;
}

/** The meta of a new kept process; the argv as it is listed (what an adopted process is listed with): a meta stays small. */
export function keptMeta(session: string, p: { processId: string; handle: number; argv: string[]; tty: boolean; pipeStdin: boolean }): KeptMeta {
  return { v: 1, session, process: p.processId, handle: p.handle, argv: listedArgv(p.argv).argv, tty: p.tty, stdin: p.pipeStdin };
}

/**
 * A keeper's meta, or null when it is not one of ours (its keeper is then dismissed). The
 * handle must be a u32 (binary output frames carry it as one); argv is cut as it is listed.
 * @internal
 */
export function parseMeta(bytes: Buffer): KeptMeta | null {
  try {
    const meta = JSON.parse(bytes.toString()) as Partial<KeptMeta>;
    if (typeof meta !== 'object' || meta === null) return null;
    if (meta.v !== 1 || typeof meta.session !== 'string' || typeof meta.process !== 'string') return null;
    const handle = meta.handle ?? 0;
    if (!Number.isInteger(handle) || handle < 0 || handle > 0xffff_ffff) return null;
    return {
      v: 1,
      session: meta.session,
      process: meta.process,
      handle,
      argv: Array.isArray(meta.argv) ? listedArgv(meta.argv.map(String)).argv : [],
      tty: meta.tty === true,
      stdin: meta.stdin === true,
    };
  } catch {
    return null;
  }
}
