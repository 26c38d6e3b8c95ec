/**
 * Programs the suite needs beyond Node and the native build toolchain. A test whose program
 * is missing fails, saying how to install it: it never skips silently (a skipped test proves
 * nothing, and nobody reads the skip count). docs/development.md lists the same programs, and
 * test/docs/docs-blocks.test.ts checks that its apt-get line names every package here.
 */
import { execFileSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';

export interface Prerequisite {
  /** The Debian package that provides it. */
  package: string;
  /** Which tests need it. */
  usedBy: string;
  /** True when it is there. */
  present(): boolean;
}

const runs = (program: string, ...args: string[]) => () => {
  try {
    execFileSync(program, args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
};

/** The OS's Chromium, which playwright-core drives (no browser download); TETHER_TEST_CHROMIUM names another. */
export const CHROMIUM = process.env.TETHER_TEST_CHROMIUM || '/usr/bin/chromium';

export const PREREQUISITES = {
  tmux: { package: 'tmux', usedBy: 'exec-resize (tether exec --tty in a real terminal, resized)', present: runs('tmux', '-V') },
  chromium: {
    package: 'chromium',
    usedBy: 'gateway-status-page (the status page in headless Chromium)',
    present: () => {
      try {
        accessSync(CHROMIUM, constants.X_OK);
        return true;
      } catch {
        return false;
      }
    },
  },
  openssl: { package: 'openssl', usedBy: 'tls (a test CA and certificates)', present: runs('openssl', 'version') },
  nginx: { package: 'nginx', usedBy: 'fleet-nginx (the front door of docs/fleet.md)', present: runs('nginx', '-v') },
  haproxy: { package: 'haproxy', usedBy: 'fleet-haproxy (the front door of docs/fleet.md)', present: runs('haproxy', '-v') },
  'systemd-analyze': { package: 'systemd', usedBy: 'fleet-systemd (verifies the unit docs/fleet.md ships)', present: runs('systemd-analyze', '--version') },
  pgrep: { package: 'procps', usedBy: 'server-stop-stuck (finding the children left running)', present: runs('pgrep', '-V') },
} satisfies Record<string, Prerequisite>;

/** Throws, naming the package to install, unless `program` is there. Call it in beforeAll (or the test). */
export function requireProgram(program: keyof typeof PREREQUISITES): void {
  const p: Prerequisite = PREREQUISITES[program];
  if (p.present()) return;
  throw new Error(
    `this test needs ${program === 'chromium' ? CHROMIUM : program}, which is not installed: apt-get install -y ${p.package} ` +
      `(used by ${p.usedBy}; docs/development.md lists everything npm test needs; .ci/run installs it)`,
  );
}
