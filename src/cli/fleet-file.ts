/**
 * A fleet file (`tether ps --fleet FILE`, docs/fleet.md): the hosts of a fleet, one a line,
 *
 *     NAME URL [TOKEN_FILE]
 *
 * blank lines and `#` comments ignored. Each host may have its own token (tokens are per
 * host); a relative TOKEN_FILE is read from the fleet file's directory. Without one, the
 * command's --token-file (or $TETHER_TOKEN) is used.
 */
import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { isWebSocketUrl } from './remote-options.js';
import { UsageError } from './usage.js';

export interface FleetHost {
  name: string;
  url: string;
  /** Absolute, or undefined: the command's own token. */
  tokenFile?: string;
}

/** The hosts of `text` (the fleet file `file`'s content); a bad line is a UsageError naming it. */
export function parseFleet(text: string, file: string): FleetHost[] {
  const hosts: FleetHost[] = [];
  const names = new Set<string>();
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') continue;
    const where = `--fleet ${file} line ${i + 1}`;
    const fields = line.split(/\s+/);
    if (fields.length < 2 || fields.length > 3) throw new UsageError(`${where}: expected NAME URL [TOKEN_FILE], got '${line}'`);
    const [name, url, tokenFile] = fields as [string, string, string | undefined];
    if (!isWebSocketUrl(url)) throw new UsageError(`${where}: '${url}' is not a ws:// or wss:// URL`);
    if (names.has(name)) throw new UsageError(`${where}: host '${name}' is listed twice`);
    names.add(name);
    hosts.push({ name, url, ...(tokenFile !== undefined ? { tokenFile: resolve(dirname(file), tokenFile) } : {}) });
  }
  if (hosts.length === 0) throw new UsageError(`--fleet ${file} lists no host (one a line: NAME URL [TOKEN_FILE])`);
  return hosts;
}

export async function readFleet(file: string): Promise<FleetHost[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read --fleet ${file}: ${(err as Error).message}`);
  }
  return parseFleet(text, file);
}
