/**
 * The top N functions by self time of a V8 CPU profile (`node --cpu-prof`), with their share
 * of the samples: `node --import tsx bench/profile-top.ts FILE.cpuprofile [N]` (N = 5).
 * Functions of the same name at the same place are added together; "(garbage collector)",
 * "(program)" and "(idle)" are V8's own.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface TopEntry {
  name: string;
  selfMs: number;
  share: number;
}

export function topSelf(profile: Profile, n: number): { entries: TopEntry[]; totalMs: number; idleMs: number } {
  const where = new Map<number, string>();
  for (const node of profile.nodes) {
    const { functionName, url, lineNumber } = node.callFrame;
    const file = url === '' ? '' : ` ${url.replace(/^file:\/\//, '').split('/').slice(-2).join('/')}:${lineNumber + 1}`;
    where.set(node.id, `${functionName || '(anonymous)'}${file}`);
  }
  const self = new Map<string, number>();
  let totalMs = 0;
  profile.samples.forEach((id, i) => {
    const ms = (profile.timeDeltas[i] ?? 0) / 1000;
    const name = where.get(id) ?? '?';
    self.set(name, (self.get(name) ?? 0) + ms);
    totalMs += ms;
  });
  const idleMs = self.get('(idle)') ?? 0;
  const busy = totalMs - idleMs;
  const entries = [...self]
    .filter(([name]) => name !== '(idle)')
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([name, selfMs]) => ({ name, selfMs, share: busy > 0 ? selfMs / busy : 0 }));
  return { entries, totalMs, idleMs };
}

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  const file = process.argv[2];
  if (file === undefined) {
    process.stderr.write('usage: bench/profile-top.ts FILE.cpuprofile [N]\n');
    process.exit(2);
  }
  const { entries, totalMs, idleMs } = topSelf(JSON.parse(readFileSync(file, 'utf8')) as Profile, Number(process.argv[3] ?? 5));
  process.stdout.write(`${path.basename(file)}: ${(totalMs - idleMs).toFixed(0)} ms busy of ${totalMs.toFixed(0)} ms\n`);
  for (const e of entries) process.stdout.write(`  ${e.selfMs.toFixed(0).padStart(6)} ms  ${(e.share * 100).toFixed(1).padStart(5)} %  ${e.name}\n`);
}
