import { readFile } from 'node:fs/promises';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CredentialsUnavailableError } from '../errors.js';
import { LocalStdioClientTransport } from './stdio-transport.js';
import type { Era } from './connection.js';
import type { ExecServerSpec, HttpServerSpec, ServerSpec } from '../types.js';

export { LocalStdioClientTransport, describeExit, type ExitInfo } from './stdio-transport.js';

/**
 * Makes a fresh, unstarted transport for one connection attempt. The supervisor never reuses a
 * transport: every attempt spawns / dials anew. Injectable so tests can supply in-memory peers.
 */
export type TransportFactory = (spec: ServerSpec, era?: Era) => Transport | Promise<Transport>;

export const createTransport: TransportFactory = async (spec, era = 'legacy') => {
  switch (spec.kind) {
    case 'stdio':
      // stderr is piped (not inherited) so the gateway's stdout/stderr stay its own and what
      // the server said can explain a crash in `lastError`.
      return new LocalStdioClientTransport({ command: spec.command, args: spec.args ?? [], env: spec.env, cwd: spec.cwd });
    case 'http':
      if (era === 'modern') return createModernHttpTransport(spec);
      return new StreamableHTTPClientTransport(new URL(spec.url), {
        requestInit: spec.headers ? { headers: spec.headers } : undefined,
        // The supervisor owns reconnection; the transport's own SSE-stream retry stays short.
        reconnectionOptions: { initialReconnectionDelay: 250, maxReconnectionDelay: 2000, reconnectionDelayGrowFactor: 2, maxRetries: 2 },
      });
    case 'exec':
      return createExecTransport(spec);
  }
};

/** The keepalive timeout of the gateway's exec links (a ping every third of it). */
export const EXEC_KEEPALIVE_TIMEOUT_MS = 2000;

/** 2026-07-28 over HTTP: the SDK v2 transport (per-request protocol version header, no session). */
async function createModernHttpTransport(spec: HttpServerSpec): Promise<Transport> {
  const { StreamableHTTPClientTransport: ModernHttp } = await import('@modelcontextprotocol/client');
  return new ModernHttp(new URL(spec.url), { requestInit: spec.headers ? { headers: spec.headers } : undefined }) as unknown as Transport;
}

// Loaded on first use: a gateway without exec servers does not pay for the tether client.
async function createExecTransport(spec: ExecServerSpec): Promise<Transport> {
  const { ExecStdioClientTransport } = await import('../../mcp/index.js');
  const token = await resolveToken(spec);
  const ca = await resolveCa(spec);
  return new ExecStdioClientTransport({
    command: spec.command,
    args: spec.args,
    env: spec.env,
    cwd: spec.cwd,
    stderr: 'pipe',
    url: spec.tether.url,
    token,
    ca,
    clientName: `tether-gateway/${spec.name}`,
    recoveryDeadlineMs: spec.tether.recoveryDeadlineMs,
    // A black hole (a dead peer behind a proxy or tunnel that keeps the socket open) is seen
    // in seconds, not after the client's default 10 s: the status must not say connected.
    keepaliveTimeoutMs: spec.tether.keepaliveTimeoutMs ?? EXEC_KEEPALIVE_TIMEOUT_MS,
  });
}

/** The token for an exec server: tokenFile is read on every attempt (rotation), else the literal. */
export async function resolveToken(spec: ExecServerSpec): Promise<string | undefined> {
  if (spec.tether.tokenFile) {
    const text = await readFile(spec.tether.tokenFile, 'utf8').catch((err: NodeJS.ErrnoException) => {
      throw new CredentialsUnavailableError(`cannot read tether.tokenFile ${spec.tether.tokenFile}: ${err.code ?? err.message}`);
    });
    return text.trim();
  }
  return spec.tether.token;
}


/** The CA to trust for a wss:// exec server: caFile read on every attempt (a renewed CA is picked up). */
export async function resolveCa(spec: ExecServerSpec): Promise<string | undefined> {
  if (spec.tether.caFile === undefined) return undefined;
  return readFile(spec.tether.caFile, 'utf8').catch((err: NodeJS.ErrnoException) => {
    throw new CredentialsUnavailableError(`cannot read tether.caFile ${spec.tether.caFile}: ${err.code ?? err.message}`);
  });
}
