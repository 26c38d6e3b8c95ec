/**
 * Global setup of `npm run test:install`: the package packed once, as `npm run pack` packs
 * it (dist/ rebuilt, the four prebuilds, the staged package.json), into a temporary
 * directory; the suites get its path through inject('tarball'). Needs the cross toolchains:
 * scripts/prebuild.mjs names what is missing and how to install it, and the run fails.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';

const root = path.join(import.meta.dirname, '..');

export default function setup(project: TestProject): () => void {
  const dir = mkdtempSync(path.join(tmpdir(), 'tether-tarball-'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'INIT_CWD'));
  let tarball: string;
  try {
    tarball = execFileSync(process.execPath, [path.join(root, 'scripts', 'pack.mjs'), '--out', dir], { cwd: root, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`npm run pack failed:\n${(err as { stderr?: string }).stderr ?? (err as Error).message}`);
  }
  project.provide('tarball', tarball);
  return () => rmSync(dir, { recursive: true, force: true });
}
