/**
 * What a failed server's stderr says, in one bounded line for `lastError`. The last line is
 * rarely the reason: Node ends a crash with "Node.js v20.x", Python with the exception after
 * a traceback, a shell wrapper with its own complaint. So the error lines are picked out
 * (stack frames, source excerpts and version trailers dropped), and only without any error
 * line do the last lines stand in.
 */

/** Bytes of stderr a supervisor keeps per connection to explain its end. */
export const STDERR_KEEP_BYTES = 8192;
/** Longest summary returned. */
const MAX_SUMMARY = 600;

const NOISE = [
  /^\s+at\s/, // JavaScript stack frame
  /^\s*File ".*", line \d+/, // Python stack frame
  /^\s*\^+\s*$/, // Node's caret under the source excerpt
  /^Node\.js v\d/, // Node's version trailer
  /^Traceback \(most recent call last\):/,
  /^\s*\.\.\. \d+ more/,
];

/** A line that states an error: "Error: x", "ModuleNotFoundError: x", "error: x", "fatal: x", "panic: x". */
const ERROR_HEAD = /^\s*(?:Uncaught\s+)?(?:[A-Za-z_][\w.]*(?:Error|Exception)\b|error|fatal|panic|FATAL|ERROR|Error)(?:\s*\[[^\]]*\])?\s*[:!]/;
/** Weaker: a line that mentions a failure. */
const ERROR_WORDS = /\b(error|exception|fatal|failed|failure|cannot|can't|unable|denied|not found|no such|missing|invalid|refused|ENOENT|EACCES|EADDRINUSE)\b/i;

export function summarizeStderr(text: string): string | null {
  const lines = text
    .split(/\r?\n/)
    .map((l) => l.trimEnd())
    .filter((l) => l.trim() !== '' && !NOISE.some((re) => re.test(l)));
  if (lines.length === 0) return null;
  const heads = dedupe(lines.filter((l) => ERROR_HEAD.test(l)));
  let picked: string[];
  if (heads.length > 0) {
    // The first states the cause; a later different one often adds the context (or the
    // wrapper's verdict). Two are enough for a status line.
    picked = heads.length === 1 ? heads : [heads[0]!, heads.at(-1)!];
  } else {
    const worded = dedupe(lines.filter((l) => ERROR_WORDS.test(l)));
    picked = worded.length > 0 ? worded.slice(-2) : lines.slice(-2);
  }
  const joined = picked.map((l) => l.trim()).join(' | ');
  return joined.length > MAX_SUMMARY ? `${joined.slice(0, MAX_SUMMARY - 1)}…` : joined;
}

function dedupe(lines: string[]): string[] {
  return [...new Set(lines)];
}
