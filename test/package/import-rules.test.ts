/**
 * The shape of src/ (docs/architecture.md): dependency-cruiser, through its API, checks src/
 * against the rules of .dependency-cruiser.cjs (no import circle anywhere, type-only imports
 * included; the server's folders import one way, through their doors; the relay stays
 * narrow) and expects no violation, printing each one it finds as a line a person reads.
 *
 * So that a pass means something, the same rules must fire on test/fixtures/import-rules/, a
 * small src/ that breaks them on purpose: exactly the violations planted there are found.
 */
import path from 'node:path';
import { cruise, type ICruiseOptions, type ICruiseResult, type IViolation } from 'dependency-cruiser';
import extractDepcruiseOptions from 'dependency-cruiser/config-utl/extract-depcruise-options';
import extractTSConfig from 'dependency-cruiser/config-utl/extract-ts-config';
import { describe, expect, it } from 'vitest';

const repoRoot = path.join(import.meta.dirname, '..', '..');
const fixtureRoot = path.join(repoRoot, 'test', 'fixtures', 'import-rules');

// The API's way to load a config file: the rules become `ruleSet`, its options the cruise's.
const options = await extractDepcruiseOptions(path.join(repoRoot, '.dependency-cruiser.cjs'));
const tsConfig = extractTSConfig(path.join(repoRoot, 'tsconfig.json'));

/** Cruises `src` under `baseDir` with the project's rules; the violations found. */
async function violationsUnder(baseDir: string): Promise<IViolation[]> {
  const cruiseOptions: ICruiseOptions = { ...options, baseDir };
  const result = await cruise(['src'], cruiseOptions, {}, { tsConfig });
  return (result.output as ICruiseResult).summary.violations;
}

/** One violation as a line: the rule, then the import (or the whole circle) that breaks it. */
function describeViolation(violation: IViolation): string {
  const where = violation.cycle ? [violation.from, ...violation.cycle.map((step) => step.name)].join(' → ') : `${violation.from} → ${violation.to}`;
  return `${violation.rule.name}: ${where}`;
}

describe('import rules (.dependency-cruiser.cjs)', () => {
  it('fire on a fixture that breaks them: a type-only circle, a server folder importing a higher one past its door', async () => {
    const found = (await violationsUnder(fixtureRoot)).map(describeViolation).sort();
    expect(found).toEqual([
      'layers-output: src/server/output/x.ts → src/server/local/y.ts',
      'no-circular: src/a.ts → src/b.ts → src/a.ts',
      'server-folder-doors: src/server/output/x.ts → src/server/local/y.ts',
    ]);
  });

  it('find no violation in src/', async () => {
    const found = (await violationsUnder(repoRoot)).map(describeViolation);
    expect(found, `${found.length} import rule violations in src/:\n${found.join('\n')}`).toEqual([]);
  });
});
