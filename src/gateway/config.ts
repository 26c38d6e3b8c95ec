/**
 * `tether.json`: the `mcpServers` shape MCP hosts already use (Claude Desktop, Claude Code,
 * Cursor, Windsurf, the MCP Inspector…), so an existing host config can be pointed at the
 * gateway as is: the keys hosts add (top level or per entry) are ignored, an entry the
 * gateway cannot serve (the legacy SSE transport) is skipped with a warning instead of
 * failing the whole file, `serverUrl` (Windsurf) and `httpUrl` (Gemini CLI) name a
 * Streamable HTTP URL, and a file with `servers` (VS Code's mcp.json) instead of
 * `mcpServers` works too. Plus:
 * - `"tether": {"url": "ws://…", "tokenFile": "…", "caFile": "…"}` on a stdio entry runs that
 *   server on a tether exec-server (kind `exec`);
 * - optional `"supervisor": {…}` at the top level and per entry (every interval and limit).
 * `${VAR}` and `${VAR:-default}` in strings are expanded from the environment, as hosts do.
 * A bad config is reported as one error naming the entry and the field.
 */
import { readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { formatZodIssue } from '../util/zod-issues.js';
import type { ServerSpec, SupervisorOptionsInput } from '../supervisor/index.js';

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const positiveMs = z.number().int().positive();
const nonNegativeMs = z.number().int().nonnegative();

/** Supervisor tunables as JSON keys (flat: backoff fields included). */
const SupervisorConfigSchema = z.strictObject({
  initialBackoffMs: positiveMs.optional(),
  backoffFactor: z.number().min(1).optional(),
  maxBackoffMs: positiveMs.optional(),
  jitter: z.number().min(0).max(1).optional(),
  maxRetries: z.number().int().nonnegative().nullable().optional(),
  crashLimit: z.number().int().positive().optional(),
  crashWindowMs: positiveMs.optional(),
  healthIntervalMs: nonNegativeMs.optional(),
  healthJitter: z.number().min(0).max(1).optional(),
  healthTimeoutMs: positiveMs.optional(),
  healthFailureThreshold: z.number().int().positive().optional(),
  connectTimeoutMs: positiveMs.optional(),
  requestTimeoutMs: positiveMs.optional(),
});
export type SupervisorConfig = z.infer<typeof SupervisorConfigSchema>;

const TetherSchema = z.strictObject({
  url: z.string().regex(/^wss?:\/\/[^\s/]+/, 'must be a ws:// or wss:// URL of a tether server'),
  tokenFile: z.string().min(1).optional(),
  token: z.string().min(1).optional(),
  caFile: z.string().min(1).optional(),
  recoveryDeadlineMs: positiveMs.optional(),
  keepaliveTimeoutMs: positiveMs.optional(),
});

const stringRecord = z.record(z.string(), z.string());

/** One entry; fields hosts add for themselves (alwaysAllow, description…) are ignored. */
const EntrySchema = z
  .object({
    type: z.string().optional(),
    command: z.string().min(1, 'must not be empty').optional(),
    args: z.array(z.string()).optional(),
    env: stringRecord.optional(),
    cwd: z.string().min(1).optional(),
    url: z.string().optional(),
    serverUrl: z.string().optional(),
    httpUrl: z.string().optional(),
    headers: stringRecord.optional(),
    tether: TetherSchema.optional(),
    disabled: z.boolean().optional(),
    supervisor: SupervisorConfigSchema.optional(),
  })
  .superRefine((e, ctx) => {
    const issue = (pathKey: string, message: string) => ctx.addIssue({ code: 'custom', path: [pathKey], message });
    if (e.type !== undefined && !KNOWN_TYPES.has(e.type)) issue('type', `unknown type ${JSON.stringify(e.type)}: use 'stdio' or 'http'`);
    const wantsHttp = e.type === 'http' || e.type === 'streamable-http' || e.type === 'streamableHttp';
    if (e.command !== undefined && e.url !== undefined) issue('url', "give either 'command' (stdio) or 'url' (http), not both");
    else if (e.command === undefined && e.url === undefined) issue('command', "missing: give 'command' (a stdio server) or 'url' (a Streamable HTTP server)");
    else if (wantsHttp && e.url === undefined) issue('url', `missing: type '${e.type}' needs a 'url'`);
    else if (e.type === 'stdio' && e.command === undefined) issue('command', "missing: type 'stdio' needs a 'command'");
    if (e.url !== undefined) {
      let parsed: URL | undefined;
      try {
        parsed = new URL(e.url);
      } catch {
        issue('url', `not a valid URL: ${JSON.stringify(e.url)}`);
      }
      if (parsed && parsed.protocol !== 'http:' && parsed.protocol !== 'https:') issue('url', `must be http:// or https:// (got ${parsed.protocol})`);
      if (e.tether) issue('tether', "only a stdio entry ('command') can run through tether");
      for (const key of ['args', 'env', 'cwd'] as const) if (e[key] !== undefined) issue(key, `'${key}' applies to stdio servers, not to a 'url' entry`);
    }
    if (e.command !== undefined && e.headers !== undefined) issue('headers', "'headers' applies to http servers, not to a 'command' entry");
    if (e.tether && e.tether.token && e.tether.tokenFile) issue('tether', "give either 'token' or 'tokenFile', not both");
  });

const KNOWN_TYPES = new Set(['stdio', 'http', 'streamable-http', 'streamableHttp', 'sse']);

const NAME = /^[A-Za-z0-9_.-]{1,64}$/;

const ConfigSchema = z.object({
  mcpServers: z.record(z.string(), z.unknown(), { error: "must be an object of servers ({\"mcpServers\": {\"name\": {\"command\": …}}})" }),
  supervisor: SupervisorConfigSchema.optional(),
});

export interface GatewayServerConfig {
  spec: ServerSpec;
  supervisor: SupervisorOptionsInput;
}

export interface GatewayConfig {
  servers: GatewayServerConfig[];
  /** Entries skipped because of `"disabled": true`. */
  disabled: string[];
  /** Entries skipped because the gateway cannot serve them (the legacy SSE transport), with why. */
  skipped: string[];
  /** Non-fatal remarks (unknown keys…), for the log. */
  warnings: string[];
}

/**
 * Reads and validates a config file; throws ConfigError naming the entry and field. Unlike
 * parseConfig, it also checks that each `tether.caFile` is readable and holds a certificate.
 */
export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(`config ${file} is not valid JSON: ${(err as Error).message}`);
  }
  const config = parseConfig(json, { source: file, baseDir: path.dirname(path.resolve(file)), env });
  for (const { spec } of config.servers) {
    if (spec.kind === 'exec' && spec.tether.caFile !== undefined) checkCaFile(spec.tether.caFile, `${file}: server '${spec.name}': field 'tether.caFile'`);
  }
  return config;
}

export interface ParseConfigOptions {
  /** Named in errors. */
  source?: string;
  /** Relative local `cwd`, `tokenFile` and `caFile` are resolved against it (the config's directory). */
  baseDir?: string;
  env?: NodeJS.ProcessEnv;
}

export function parseConfig(json: unknown, opts: ParseConfigOptions = {}): GatewayConfig {
  const source = opts.source ?? 'config';
  const baseDir = opts.baseDir ?? process.cwd();
  const env = opts.env ?? process.env;
  // VS Code's mcp.json names the object `servers`.
  if (json && typeof json === 'object' && !Array.isArray(json) && !('mcpServers' in json) && 'servers' in json) {
    json = { ...(json as Record<string, unknown>), mcpServers: (json as Record<string, unknown>).servers };
  }
  const top = ConfigSchema.safeParse(json);
  if (!top.success) throw new ConfigError(`${source}: ${formatIssue(top.error.issues[0]!)}`);
  const globalSupervisor = toSupervisorOptions(top.data.supervisor);
  const warnings: string[] = [];
  const servers: GatewayServerConfig[] = [];
  const disabled: string[] = [];
  const skipped: string[] = [];
  // A host's own settings beside mcpServers (Claude Code keeps dozens) are none of ours.

  for (const [name, given] of Object.entries(top.data.mcpServers)) {
    let raw = given;
    const where = `${source}: server '${name}'`;
    if (!NAME.test(name)) throw new ConfigError(`${where}: the name must be 1-64 characters of A-Z a-z 0-9 _ . - (it prefixes tool names as <server>__<tool>)`);
    if (name.includes('__')) throw new ConfigError(`${where}: the name must not contain '__' (the separator in <server>__<tool>)`);
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ConfigError(`${where}: must be an object`);
    if ((raw as { type?: unknown }).type === 'sse' || (raw as { transport?: unknown }).transport === 'sse') {
      skipped.push(name);
      warnings.push(`${where}: skipped: the legacy SSE transport is not supported (give its Streamable HTTP endpoint as 'url')`);
      continue;
    }
    // Windsurf's serverUrl and Gemini CLI's httpUrl are Streamable HTTP URLs.
    const alias = (raw as { serverUrl?: unknown; httpUrl?: unknown; url?: unknown });
    if (alias.url === undefined && (typeof alias.serverUrl === 'string' || typeof alias.httpUrl === 'string')) {
      raw = { ...raw, url: alias.httpUrl ?? alias.serverUrl };
      delete (raw as Record<string, unknown>).serverUrl;
      delete (raw as Record<string, unknown>).httpUrl;
    }
    const parsed = EntrySchema.safeParse(raw);
    if (!parsed.success) throw new ConfigError(`${where}: ${formatIssue(parsed.error.issues[0]!)}`);
    const known = new Set(Object.keys(EntrySchema.shape));
    const unknown = Object.keys(raw as object).filter((k) => !known.has(k));
    if (unknown.length) warnings.push(`${where}: ignoring keys ${unknown.join(', ')}`);
    const e = parsed.data;
    if (e.disabled) {
      disabled.push(name);
      continue;
    }
    const x = (value: string, field: string) => expand(value, env, `${where}: field '${field}'`);
    const xRecord = (rec: Record<string, string> | undefined, field: string) =>
      rec && Object.fromEntries(Object.entries(rec).map(([k, v]) => [k, x(v, `${field}.${k}`)]));
    let spec: ServerSpec;
    if (e.url !== undefined) {
      spec = { name, kind: 'http', url: x(e.url, 'url'), headers: xRecord(e.headers, 'headers') };
    } else if (e.tether) {
      spec = {
        name,
        kind: 'exec',
        command: x(e.command!, 'command'),
        args: e.args?.map((a, i) => x(a, `args[${i}]`)),
        env: xRecord(e.env, 'env'),
        // The working directory is on the remote host: not resolved locally.
        cwd: e.cwd === undefined ? undefined : x(e.cwd, 'cwd'),
        tether: {
          url: x(e.tether.url, 'tether.url'),
          token: e.tether.token === undefined ? undefined : x(e.tether.token, 'tether.token'),
          tokenFile: e.tether.tokenFile === undefined ? undefined : localPath(baseDir, x(e.tether.tokenFile, 'tether.tokenFile')),
          caFile: e.tether.caFile === undefined ? undefined : localPath(baseDir, x(e.tether.caFile, 'tether.caFile')),
          recoveryDeadlineMs: e.tether.recoveryDeadlineMs,
          keepaliveTimeoutMs: e.tether.keepaliveTimeoutMs,
        },
      };
    } else {
      spec = {
        name,
        kind: 'stdio',
        command: x(e.command!, 'command'),
        args: e.args?.map((a, i) => x(a, `args[${i}]`)),
        env: xRecord(e.env, 'env'),
        cwd: e.cwd === undefined ? undefined : localPath(baseDir, x(e.cwd, 'cwd')),
      };
    }
    servers.push({ spec, supervisor: { ...globalSupervisor, ...toSupervisorOptions(e.supervisor), backoff: { ...globalSupervisor.backoff, ...toSupervisorOptions(e.supervisor).backoff } } });
  }
  return { servers, disabled, skipped, warnings };
}

/** A local path from the config: `~/` is the home directory, relative is against the config's directory. */
function localPath(baseDir: string, p: string): string {
  if (p === '~' || p.startsWith('~/')) return path.join(homedir(), p.slice(1));
  return path.resolve(baseDir, p);
}

/** A CA file must be readable and hold a PEM certificate when the config loads: a typo is a config error, not a TLS failure later. */
function checkCaFile(file: string, where: string): void {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`${where}: cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  if (!text.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError(`${where}: ${file} holds no PEM certificate`);
}

function toSupervisorOptions(c: SupervisorConfig | undefined): SupervisorOptionsInput & { backoff: NonNullable<SupervisorOptionsInput['backoff']> } {
  if (!c) return { backoff: {} };
  const { initialBackoffMs, backoffFactor, maxBackoffMs, jitter, maxRetries, ...rest } = c;
  const out: SupervisorOptionsInput & { backoff: NonNullable<SupervisorOptionsInput['backoff']> } = { ...stripUndefined(rest), backoff: {} };
  if (initialBackoffMs !== undefined) out.backoff.initialMs = initialBackoffMs;
  if (backoffFactor !== undefined) out.backoff.factor = backoffFactor;
  if (maxBackoffMs !== undefined) out.backoff.maxMs = maxBackoffMs;
  if (jitter !== undefined) out.backoff.jitter = jitter;
  // null = explicitly unlimited (overrides a global limit); absent = inherit.
  if (maxRetries !== undefined) out.maxRetries = maxRetries ?? undefined;
  return out;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** `${VAR}` / `${VAR:-default}` from the environment; a missing variable without default is an error. */
export function expand(value: string, env: NodeJS.ProcessEnv, where: string): string {
  return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_m, name: string, fallback: string | undefined) => {
    const v = env[name];
    if (v !== undefined && v !== '') return v;
    if (fallback !== undefined) return fallback;
    throw new ConfigError(`${where}: environment variable ${name} is not set (write \${${name}:-default} for a fallback)`);
  });
}

/** The first issue: `field 'args[0]': …`, or its message alone for the value itself. */
function formatIssue(issue: z.core.$ZodIssue): string {
  return formatZodIssue(issue, { path: 'indexed', field: true });
}
