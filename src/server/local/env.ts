/**
 * The child environment (docs/protocol.md, "process/start"): exactly `env` without an
 * `envPolicy`; with one, built from the server's own environment in the documented order,
 * then `env` laid over it.
 */
import type { z } from 'zod';
import type { EnvPolicySchema } from '../../protocol/index.js';

type EnvPolicy = z.infer<typeof EnvPolicySchema>;

// LANG: Codex 0.169 keeps it too (observed), beyond the core list Codex's reference names.
const CORE_NAMES = ['HOME', 'LANG', 'LOGNAME', 'PATH', 'SHELL', 'USER', 'USERNAME', 'TMPDIR', 'TEMP', 'TMP'];
const DEFAULT_EXCLUDES = ['*KEY*', '*SECRET*', '*TOKEN*'];

/** A case-insensitive glob (`*` only) as a RegExp. */
function globToRegExp(pattern: string): RegExp {
  const body = pattern.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*');
  return new RegExp(`^${body}$`, 'i');
}

const matchesAny = (name: string, patterns: RegExp[]): boolean => patterns.some((re) => re.test(name));

export function buildChildEnv(
  env: Record<string, string>,
  policy: EnvPolicy | null | undefined,
  serverEnv: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  if (!policy) return { ...env };
  const result: Record<string, string> = {};
  // (1) the starting set
  if (policy.inherit === 'all') {
    for (const [k, v] of Object.entries(serverEnv)) if (v !== undefined) result[k] = v;
  } else if (policy.inherit === 'core') {
    for (const k of CORE_NAMES) {
      const v = serverEnv[k];
      if (v !== undefined) result[k] = v;
    }
  }
  // (2) default excludes, (3) the caller's excludes
  const excludes = [...(policy.ignoreDefaultExcludes ? [] : DEFAULT_EXCLUDES), ...policy.exclude].map(globToRegExp);
  for (const k of Object.keys(result)) if (matchesAny(k, excludes)) delete result[k];
  // (4) set
  Object.assign(result, policy.set);
  // (5) includeOnly
  if (policy.includeOnly.length > 0) {
    const keep = policy.includeOnly.map(globToRegExp);
    for (const k of Object.keys(result)) if (!matchesAny(k, keep)) delete result[k];
  }
  // then the explicit env on top
  return Object.assign(result, env);
}
