/**
 * Connecting the client of a remote command (`tether exec`, `mcp`, `cp`, `ps`) from its
 * command line: URL, token, CA, recovery deadline and keepalive come from the connection
 * options (remote-options.ts); the command adds its own client name and whatever else it
 * needs (a signal, a logger, an output high-water mark).
 */
import { ExecClient, type ExecClientOptions } from '../client/index.js';
import type { ConnectionOptions } from './remote-options.js';

/** What --token-file and --ca gave (readToken, readCa). */
export interface Credentials {
  token?: string;
  ca?: string;
}

/** The command's own options; its recoveryDeadlineMs is the default when the user gave none. */
export type CommandClientOptions = Omit<ExecClientOptions, 'token' | 'ca' | 'keepaliveTimeoutMs'> & { clientName: string };

export function connectClient(options: ConnectionOptions, credentials: Credentials, own: CommandClientOptions): Promise<ExecClient> {
  return ExecClient.connect(options.url, {
    ...own,
    token: credentials.token,
    ca: credentials.ca,
    recoveryDeadlineMs: options.recoveryDeadlineMs ?? own.recoveryDeadlineMs,
    keepaliveTimeoutMs: options.keepaliveTimeoutMs,
  });
}
