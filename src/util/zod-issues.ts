/**
 * Zod issues as a person reads them, for both places that report them: the protocol's
 * invalid params (every issue, `argv.0: …; cwd: …`, '(params)' for the params themselves)
 * and the gateway config (the first issue, `field 'servers[0].command': …`, its message
 * alone for the file itself).
 */
import type { z } from 'zod';

export interface IssueStyle {
  /** How a path reads: 'dots' argv.0, 'indexed' servers[0].command. */
  path: 'dots' | 'indexed';
  /** Say the path as field '<path>' rather than bare. */
  field?: boolean;
  /** What names the value itself (an empty path); without it, the message stands alone. */
  root?: string;
}

/** `<path>: <message>`, the issues joined with '; '. */
export function formatZodIssues(issues: readonly z.core.$ZodIssue[], style: IssueStyle): string {
  return issues.map((issue) => formatZodIssue(issue, style)).join('; ');
}

export function formatZodIssue(issue: z.core.$ZodIssue, style: IssueStyle): string {
  if (issue.path.length === 0) return style.root === undefined ? issue.message : `${style.root}: ${issue.message}`;
  const path =
    style.path === 'dots'
      ? issue.path.join('.')
      : issue.path.reduce<string>((acc, p) => (typeof p === 'number' ? `${acc}[${p}]` : acc ? `${acc}.${String(p)}` : String(p)), '');
  return `${style.field ? `field '${path}'` : path}: ${issue.message}`;
}
