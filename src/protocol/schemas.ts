/**
 * zod schemas for every request's params. Unknown params are ignored (zod strips them),
 * as Codex does. `parseParams` turns a failure into -32602 naming the field and the reason.
 */
import { z } from 'zod';
import { invalidParams } from './errors.js';
import { invalidSessionName } from './extensions.js';
import { formatZodIssues } from '../util/zod-issues.js';

/** The `tether` member of `initialize` params (protocol/extensions.ts). Unknown extension names are ignored, not refused. */
export const TetherInitializeSchema = z.object({
  version: z.number().int().positive(),
  extensions: z.array(z.string()).max(64, 'at most 64 extensions'),
  /** `acks`, on a resume: per process id, the last seq the client delivered. */
  delivered: z.record(z.string(), z.number().int().nonnegative()).nullish(),
  /** `sessionKeep`: how long the session should outlive a drop (ms); the server clamps it to its limits. */
  keepMs: z.number().int().nonnegative().nullish(),
  /** `attach`: a new session's name: 1..64 of `[A-Za-z0-9._-]`, never UUID-shaped (so it cannot be taken for an id). */
  name: z
    .string()
    .superRefine((s, ctx) => {
      const why = invalidSessionName(s);
      if (why) ctx.addIssue({ code: 'custom', message: why });
    })
    .nullish(),
  /** `attach`: attach to a session by id or name, as its writer or a watcher. */
  attach: z
    .object({
      session: z.string().min(1, 'must name a session (its id or name)').max(1024, 'is too long (at most 1024 characters)'),
      role: z.enum(['writer', 'watcher']),
      take: z.boolean().nullish(),
    })
    .nullish(),
});

/**
 * The longest id a client may name (process ids, writeIds, a session to resume) and the
 * longest client name, in characters. What the server keeps of a process (its id in every
 * event, the session's record in a state dir, up to 8192 remembered writeIds) is then bounded
 * by the limits that count processes, not by the message size: an id of megabytes is refused.
 * Codex's own ids are a few dozen characters.
 */
export const MAX_ID_CHARS = 1024;

/** A string of at most `MAX_ID_CHARS` characters; longer: "<what> is N characters long; at most 1024 are allowed". */
const boundedId = (what: string) =>
  z.string().max(MAX_ID_CHARS, {
    error: (issue) => `${what} is ${typeof issue.input === 'string' ? issue.input.length : 'too many'} characters long; at most ${MAX_ID_CHARS} are allowed`,
  });
const processId = boundedId('processId');

/**
 * Strings that reach execve (argv, environment, paths) cannot hold a NUL byte: the kernel
 * would cut them there. Refused as invalid params rather than left to spawn's raw error.
 */
const execString = z.string().refine((s) => !s.includes('\0'), { message: 'must not contain a NUL byte' });
const execEnv = z.record(z.string(), execString).superRefine((env, ctx) => {
  for (const name of Object.keys(env)) {
    if (name.includes('\0')) ctx.addIssue({ code: 'custom', message: `variable names must not contain a NUL byte (${JSON.stringify(name)})` });
  }
});

export const InitializeParamsSchema = z.object({
  clientName: boundedId('clientName'),
  resumeSessionId: boundedId('resumeSessionId').nullish(),
  /** tether extension negotiation (extensions.ts); absent for Codex clients. */
  tether: TetherInitializeSchema.nullish(),
});

export const EnvPolicySchema = z.object({
  inherit: z.enum(['all', 'core', 'none']).default('all'),
  ignoreDefaultExcludes: z.boolean().default(false),
  exclude: z.array(z.string()).default([]),
  set: execEnv.default({}),
  includeOnly: z.array(z.string()).default([]),
});

/** A terminal dimension: what TIOCSWINSZ can hold (an unsigned short), and at least 1. */
const dimension = z.number().int().min(1, 'must be at least 1').max(65535, 'must be at most 65535');

export const TerminalSizeSchema = z.object({ cols: dimension, rows: dimension });

const fileUri = execString.refine((s) => s.startsWith('file://'), { message: 'must be a file:// URI (e.g. file:///home/me)' });

export const ProcessStartParamsSchema = z.object({
  processId: processId.min(1, 'processId must not be empty'),
  argv: z.array(execString).min(1, 'argv must name a program (it is empty)'),
  cwd: fileUri,
  env: execEnv,
  tty: z.boolean(),
  pipeStdin: z.boolean().nullish(),
  arg0: execString.nullish(),
  envPolicy: EnvPolicySchema.nullish(),
  metadata: z.unknown().optional(),
  sandbox: z.unknown().optional(),
  enforceManagedNetwork: z.boolean().nullish(),
  managedNetwork: z.unknown().optional(),
  /**
   * tether extension `processResize`: the terminal's initial size (tty only; honoured when
   * the session negotiated the extension, 80x24 otherwise). Codex ignores the member.
   */
  terminalSize: TerminalSizeSchema.nullish(),
  /**
   * tether extension `binaryOutput`: the handle the client wants for this process's binary
   * frames (1..2^32-1, unused in the session); the server picks one when absent. Ignored
   * without the extension (Codex ignores the member too).
   */
  handle: z.number().int().min(1).max(0xffff_ffff).nullish(),
  /**
   * tether extension `keepLast`: keep only the newest this many unacknowledged bytes (at least
   * 1), dropping the oldest, reported as `process/gap`, instead of pausing the process. Ignored
   * without the extension.
   */
  keepLastBytes: z.number().int().min(1, 'keepLastBytes must be at least 1').max(Number.MAX_SAFE_INTEGER).nullish(),
});

const nonNegativeInt = z.number().int().nonnegative();

export const ProcessReadParamsSchema = z.object({
  processId,
  afterSeq: nonNegativeInt.nullish(),
  maxBytes: nonNegativeInt.nullish(),
  waitMs: nonNegativeInt.nullish(),
});

const base64 = z
  .string()
  .refine((s) => /^[A-Za-z0-9+/]*={0,2}$/.test(s) && s.length % 4 === 0, { message: 'must be valid base64' });

export const ProcessWriteParamsSchema = z.object({
  processId,
  chunk: base64,
  writeId: boundedId('writeId').min(1, 'writeId must not be empty'),
  /**
   * tether extension: after writing `chunk`, close the child's stdin (EOF), so `echo x |
   * tether exec -- cat` ends. The protocol has no other way to send EOF; Codex ignores the
   * member (it writes the chunk and keeps stdin open). Sent by the tether client on
   * `stdin.end()`, always with an empty chunk and its own writeId.
   */
  closeStdin: z.boolean().nullish(),
});

/** "interrupt" is Codex's only name; the rest are tether extensions. */
export const SignalNameSchema = z.enum(['interrupt', 'terminate', 'kill', 'hangup', 'quit', 'user1', 'user2']);

export const ProcessSignalParamsSchema = z.object({
  processId,
  signal: SignalNameSchema,
});

export const ProcessResizeParamsSchema = z.object({
  processId,
  cols: dimension,
  rows: dimension,
});

export const ProcessTerminateParamsSchema = z.object({
  processId,
});

export const EmptyParamsSchema = z.object({}).passthrough();

/** "field `argv`: argv must name a program" — a message a person can act on. */
export function formatZodError(error: z.ZodError): string {
  return formatZodIssues(error.issues, { path: 'dots', root: '(params)' });
}

/** Validates params for `method`; throws -32602 `invalid params for <method>: <field>: <reason>`. */
export function parseParams<S extends z.ZodType>(method: string, schema: S, params: unknown): z.infer<S> {
  const result = schema.safeParse(params ?? {});
  if (!result.success) {
    throw invalidParams(`invalid params for ${method}: ${formatZodError(result.error)}`, {
      issues: result.error.issues.map((i) => ({ path: i.path.map(String), message: i.message })),
    });
  }
  return result.data;
}
