/**
 * The fleet host's systemd unit (deploy/systemd/tether.service, shown whole in
 * docs/fleet.md): `systemd-analyze verify` finds nothing to say about it (run offline on a
 * copy whose /usr/bin/tether is this checkout's bin/tether.js, the one thing it checks that
 * differs here), and it keeps sessions across a restart (KillMode=process) and upgrades with
 * --replace on the same state dir as ExecStart.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { deployFile, fleetDocShows, REPO } from '../../helpers/front-door.js';
import { requireProgram } from '../../helpers/prerequisites.js';

const unit = deployFile('systemd/tether.service');
const directive = (name: string) => unit.split('\n').filter((l) => l.startsWith(`${name}=`)).map((l) => l.slice(name.length + 1));

describe('deploy/systemd/tether.service', () => {
  it('docs/fleet.md shows the file whole', () => {
    expect(fleetDocShows(unit)).toBe(true);
  });

  it('systemd-analyze verify has nothing to say about it', async () => {
    requireProgram('systemd-analyze');
    const dir = mkdtempSync(join(tmpdir(), 'tether-unit-'));
    try {
      const file = join(dir, 'tether.service');
      writeFileSync(file, unit.replaceAll('/usr/bin/tether ', `${join(REPO, 'bin', 'tether.js')} `));
      const { code, stderr } = await new Promise<{ code: number; stderr: string }>((resolve) =>
        execFile('systemd-analyze', ['verify', file], (err, _stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stderr })),
      );
      expect(stderr).toBe('');
      expect(code).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('keeps the sessions on a restart (KillMode=process) and upgrades with --replace on the same state dir', () => {
    expect(directive('KillMode')).toEqual(['process']);
    const [start] = directive('ExecStart');
    const [reload] = directive('ExecReload');
    expect(start).toMatch(/ --state-dir \/var\/lib\/tether$/);
    const serve = start!.slice(start!.indexOf('/usr/bin/tether serve'));
    expect(reload).toContain('--property=KillMode=process');
    expect(reload!.endsWith(`${serve} --replace`), 'the same server, with --replace').toBe(true);
  });
});
