/**
 * The token a relay's TCP listener requires of its clients (`tether relay`): without one, any
 * local user could run commands on the upstream host with the relay's credentials. Given
 * with `--listen-token-file F`: read from F if it exists, else generated and written there;
 * by default the per-user file `~/.tether/relay.token` (kept across restarts, so a
 * configured client keeps working). Written with mode 0600, in a directory only its owner
 * can enter; an existing file readable by others is refused rather than trusted.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { UsageError } from './usage.js';

export function defaultRelayTokenFile(home = homedir()): string {
  return join(home, '.tether', 'relay.token');
}

/** The token in `file`, creating it (mode 0600) with a fresh random one when it does not exist. */
export function relayToken(file: string): { token: string; created: boolean } {
  if (existsSync(file)) {
    const mode = statSync(file).mode;
    if (process.platform !== 'win32' && (mode & 0o077) !== 0) {
      throw new UsageError(`--listen-token-file: '${file}' can be read by other users (mode ${(mode & 0o777).toString(8)}); chmod 600 it`);
    }
    const token = readFileSync(file, 'utf8').trim();
    if (!token || /\s/.test(token)) throw new UsageError(`--listen-token-file: '${file}' must hold one token (no spaces)`);
    return { token, created: false };
  }
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const token = randomBytes(32).toString('base64url');
  writeFileSync(file, `${token}\n`, { mode: 0o600, flag: 'wx' });
  chmodSync(file, 0o600); // whatever the umask
  return { token, created: true };
}
