/**
 * The public API as shipped: for each entry point of package.json "exports", the report of
 * scripts/api-report.mjs (every export and every declaration of this package its types refer
 * to, from dist/**\/*.d.ts, without @internal or private members) must equal the committed
 * test/api/<entry>.api.txt. An accidental API change fails here; an intended one is
 * `npm run api:update` and a diff a reviewer reads.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const repoRoot = path.join(import.meta.dirname, '..', '..');
const committed = path.join(repoRoot, 'test', 'api');
const fresh = mkdtempSync(path.join(tmpdir(), 'tether-api-'));
// dist/ is current: the global setup rebuilds it when a source changed.
execFileSync(process.execPath, [path.join(repoRoot, 'scripts', 'api-report.mjs'), '--write', fresh], { stdio: ['ignore', 'ignore', 'pipe'] });

afterAll(() => rmSync(fresh, { recursive: true, force: true }));

describe('the shipped declarations', () => {
  it('have one report per entry point, and a committed report for each', () => {
    expect(readdirSync(fresh).sort()).toEqual(readdirSync(committed).sort());
  });

  it.each(readdirSync(fresh).sort())('%s is unchanged (after an intended change: npm run api:update)', (file) => {
    expect(readFileSync(path.join(fresh, file), 'utf8')).toBe(readFileSync(path.join(committed, file), 'utf8'));
  });
});
