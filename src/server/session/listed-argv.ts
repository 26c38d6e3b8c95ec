/**
 * A process's argv as the server keeps it after the start, for `session/list` and the audit
 * trail: at most `MAX_LISTED_ARGV_CHARS` characters in all. A client may start processes
 * with megabytes of arguments; the server keeps (and lists) only their beginning, flagged.
 */

/** Characters of one process's argv kept and listed at most (all its arguments together). */
export const MAX_LISTED_ARGV_CHARS = 4096;

/** argv cut to `MAX_LISTED_ARGV_CHARS` characters in all (the argument that crosses it is cut). */
export function listedArgv(argv: readonly string[]): { argv: string[]; truncated: boolean } {
  const out: string[] = [];
  let left = MAX_LISTED_ARGV_CHARS;
  for (const arg of argv) {
    if (arg.length > left) {
      if (left > 0) out.push(arg.slice(0, left));
      return { argv: out, truncated: true };
    }
    out.push(arg);
    left -= arg.length;
  }
  return { argv: out, truncated: false };
}
