/**
 * The one-line notices of `tether exec --keep` / `--keep-last` when the server cannot do what
 * was asked (keep-notice.ts): said once on stderr, never silently ignored.
 */
import { describe, expect, it } from 'vitest';
import { keepLastShortfall, keepShortfall } from '../../../src/cli/keep-notice.js';

describe('keep notices', () => {
  it('--keep-last against a server without keepLast says the process pauses instead', () => {
    expect(keepLastShortfall({ extensions: new Set(['acks']) }, 256 * 1024 * 1024)).toMatch(/--keep-last: this server cannot drop the oldest output \(no keepLast extension\)/);
  });
  it('--keep-last against a server with keepLast, or no --keep-last: nothing to say', () => {
    expect(keepLastShortfall({ extensions: new Set(['keepLast']) }, 1024)).toBeNull();
    expect(keepLastShortfall({ extensions: new Set() }, undefined)).toBeNull();
  });
  it('--keep without the sessionKeep extension, and cut by --max-session-ttl', () => {
    expect(keepShortfall({ sessionKeep: null }, 8 * 3_600_000)).toMatch(/^--keep 8h: this server does not take a keep time/);
    expect(keepShortfall({ sessionKeep: { grantedMs: 3_600_000, maxMs: 3_600_000 } as never }, 8 * 3_600_000)).toMatch(/keeps this session 1h after a drop/);
    expect(keepShortfall({ sessionKeep: { grantedMs: 8 * 3_600_000, maxMs: 24 * 3_600_000 } as never }, 8 * 3_600_000)).toBeNull();
  });
});
