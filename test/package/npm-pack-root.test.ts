/**
 * `npm pack` and `npm publish` at the repository root, the commands every npm user and release
 * pipeline runs, must not make a package that cannot be installed (the clone's package.json,
 * with its install script and without prebuilds): they refuse, in one line of ours naming
 * `npm run pack`, which makes the package users install (test/install/pack.install.test.ts installs
 * it). Run in a copy of the root's package.json and scripts/, so a pack that went ahead would
 * not touch this checkout.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const repoRoot = path.join(import.meta.dirname, '..', '..');
const dir = mkdtempSync(path.join(tmpdir(), 'tether-root-pack-'));
const root = path.join(dir, 'root');
const out = path.join(dir, 'out');
mkdirSync(out);
for (const file of ['package.json', 'README.md', 'LICENSE', 'bin', 'scripts']) cpSync(path.join(repoRoot, file), path.join(root, file), { recursive: true });
/** npm's variables from an enclosing `npm test` would steer the nested npm. */
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== 'INIT_CWD'));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function npm(args: string[]): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile('npm', args, { cwd: root, env, timeout: 120_000 }, (err, _stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stderr });
    });
  });
}

/** The lines the refusal printed: stderr without npm's own (`npm error …`) and its script banner. */
function ours(stderr: string): string[] {
  return stderr.split('\n').filter((l) => l.trim() !== '' && !/^npm (error|ERR|warn|WARN|notice)/.test(l) && !/^> /.test(l));
}

describe('npm pack and npm publish at the repository root', () => {
  it.each([
    ['npm pack', ['pack', '--pack-destination', out]],
    ['npm publish --dry-run', ['publish', '--dry-run']],
  ])('%s refuses in one line naming npm run pack, and writes nothing', async (verb, args) => {
    const { code, stderr } = await npm(args);
    expect(code).not.toBe(0);
    const lines = ours(stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`tether-exec: ${verb.split(' ').slice(0, 2).join(' ')} from the repository root would ship a package that cannot be installed: run 'npm run pack'`);
    expect([...readdirSync(root), ...readdirSync(out)].filter((f) => f.endsWith('.tgz'))).toEqual([]);
  });
});
