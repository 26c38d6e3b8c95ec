/**
 * Which stop of `tether serve` keeps the sessions (issue #27, src/cli/serve/serve.ts `keepsOn`):
 * with a state dir, SIGTERM and SIGHUP always keep; Ctrl-C (SIGINT) and Ctrl-\ (SIGQUIT)
 * keep unless typed on an interactive terminal, where they mean "stop for good, kill";
 * without a state dir nothing is kept. Pure.
 */
import { describe, expect, it } from 'vitest';
import { keepsOn } from '../../../../src/cli/serve/serve.js';

describe('keepsOn', () => {
  it.each([
    ['SIGTERM', true, false, true],
    ['SIGTERM', true, true, true],
    ['SIGHUP', true, true, true],
    ['SIGINT', true, false, true],
    ['SIGINT', true, true, false],
    ['SIGQUIT', true, true, false],
    ['SIGQUIT', true, false, true],
    ['SIGTERM', false, false, false],
    ['SIGINT', false, false, false],
  ] as const)('%s with a state dir %s, interactive %s: keeps %s', (signal, stateDir, interactive, kept) => {
    expect(keepsOn(signal, stateDir, interactive)).toBe(kept);
  });
});
