/**
 * Nothing under server/ loads tether's native code when it is imported (the library's root export
 * imports the server; a client that never starts one must not need, or dlopen, the addon):
 * the addon loads when a server starts or a process is spawned. Checked in a fresh node
 * process that imports every module of dist/server/ with `process.dlopen` (what require()
 * of a .node file calls) recording each load.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join, sep } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const DIST_SERVER = join(import.meta.dirname, '..', '..', '..', 'dist', 'server');

function modulesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.js'))
    .map((name) => join(dir, name))
    .sort();
}

/** Imports `files` in a fresh node, then runs `after` (an expression, may await); answers every path dlopened. */
async function dlopenedBy(files: string[], after = ''): Promise<{ imported: number; loaded: string[] }> {
  const script = `
    import { pathToFileURL } from 'node:url';
    const loaded = [];
    const dlopen = process.dlopen;
    process.dlopen = function (module, filename, ...rest) {
      loaded.push(filename);
      return dlopen.call(this, module, filename, ...rest);
    };
    const files = JSON.parse(process.argv[1]);
    for (const file of files) await import(pathToFileURL(file).href);
    ${after}
    process.stdout.write(JSON.stringify({ imported: files.length, loaded }), () => process.exit(0));
  `;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script, JSON.stringify(files)], { timeout: 20_000 });
  return JSON.parse(stdout) as { imported: number; loaded: string[] };
}

describe('server modules and native code', () => {
  it("importing every module of dist/server/ loads none of tether's native code", async () => {
    const files = modulesUnder(DIST_SERVER);
    expect(files.length).toBeGreaterThan(20);
    const { imported, loaded } = await dlopenedBy(files);
    expect(imported).toBe(files.length);
    // A dependency's optional addon (ws's bufferutil) is its own business; ours must wait.
    expect(loaded.filter((file) => !file.includes(`${sep}node_modules${sep}`))).toEqual([]);
  });

  it('the check sees the addon once something asks for it (nativeAddon)', async () => {
    const native = join(DIST_SERVER, 'native', 'native.js');
    const { loaded } = await dlopenedBy([native], `(await import(pathToFileURL(${JSON.stringify(native)}).href)).nativeAddon();`);
    expect(loaded).toHaveLength(1);
    expect(loaded[0]).toMatch(/tether_native[^/]*\.node$/);
  });
});
