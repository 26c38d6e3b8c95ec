/**
 * `environment/info`: the host description with Codex's field names and types
 * (docs/protocol.md, "Handshake, sessions and extensions"). Capabilities Codex advertises and tether lacks are reported false,
 * so a Codex agent does not reach for them.
 */
import { createHash } from 'node:crypto';
import { homedir, hostname, tmpdir } from 'node:os';
import { basename } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { EnvironmentInfo } from '../../protocol/index.js';

export const TETHER_VERSION = '0.1.0';

/** Codex 0.171's, in its order (0.171 added networkProxyTransparentTcp to 0.169's). */
const CODEX_CAPABILITIES = [
  'networkProxyLaunch',
  'networkProxyReviewDomains',
  'networkProxyTransparentTcp',
  'credentialMasking',
  'credentialMaskingCustomProviders',
  'capabilityDiscoverySandbox',
  'fsWatchMissing',
  'capabilityDiscoveryV2',
  'environmentConfigRead',
  'httpHeaderEnvVars',
  'sandboxedFileStreaming',
  'fileWriteStreaming',
  'shellSnapshotV2',
  'windowsMxc',
  'linuxRootWritePreservesDevices',
  'linuxApprovedRootWritePreservesRestrictions',
];

/** What tether has of them: the missing-watch, environment config and block writes (fs/open replace + fs/writeBlock). */
const SUPPORTED_CAPABILITIES = new Set(['fsWatchMissing', 'environmentConfigRead', 'fileWriteStreaming']);

const fileUri = (path: string): string => pathToFileURL(path).href;

export function environmentInfo(): EnvironmentInfo {
  const shellPath = process.env.SHELL || '/bin/sh';
  return {
    shell: { name: basename(shellPath), path: shellPath },
    executorVersion: TETHER_VERSION,
    // Stable per host, like Codex's "sha256:<hex>".
    providerId: `sha256:${createHash('sha256').update(`tether:${hostname()}`).digest('hex')}`,
    cwd: fileUri(process.cwd()),
    userHomeDir: fileUri(homedir()),
    platformOs: ({ darwin: 'macos', win32: 'windows' } as Record<string, string>)[process.platform] ?? process.platform,
    prependPathDirs: [],
    temporaryDirectories: [],
    tempDir: fileUri(tmpdir()),
    capabilities: Object.fromEntries(CODEX_CAPABILITIES.map((name) => [name, SUPPORTED_CAPABILITIES.has(name)])),
  };
}
