/**
 * Start-up cost (issue 9, issue 23): a command loads only what it needs. bin/tether.js runs
 * the CLI bundled (scripts/bundle-cli.mjs: dist/bundle/, one chunk per subcommand and the
 * chunks they share): it loads a few files, not node_modules' modules one by one. The client
 * commands (exec, mcp, cp, ps) load the client and `ws`, never the server's modules or zod
 * (~95 modules, the larger part of `tether exec`'s start once). The time itself is measured in
 * `npm run bench` (start module); this guards what the figure depends on, without a wall-clock
 * assertion. The files are seen by a module-resolution hook in the command's own process; the
 * sources in each bundled file, by the bundler's metafile (dist/bundle/meta.json).
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/mcp-peers.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-startup-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const hooks = path.join(dir, 'hooks.mjs');
// Hooks run on a thread of their own: process.stderr there is asynchronous, and a command that
// exits at once (--help) can leave its lines unwritten (Node 24 did). writeSync to fd 2 cannot.
writeFileSync(hooks, `import { writeSync } from 'node:fs';
export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  writeSync(2, 'LOADED ' + result.url + '\\n');
  return result;
}
`);
const register = path.join(dir, 'register.mjs');
writeFileSync(register, `import { register } from 'node:module';\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);

/** Every module URL `tether <args>` (the compiled bin, as installed) resolved. */
function modulesOf(args: string[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', register, path.join(repoRoot, 'bin/tether.js'), ...args], { cwd: repoRoot }, (err, _stdout, stderr) => {
      if (err) return reject(new Error(`tether ${args.join(' ')}: ${err.message}\n${stderr}`));
      resolve([...new Set(stderr.split('\n').filter((l) => l.startsWith('LOADED ')).map((l) => l.slice(7)))]);
    });
  });
}

/** The sources (repo-relative: dist/cli/exec.js, node_modules/ws/lib/sender.js…) in each bundled file (dist/bundle/…). */
function bundledSources(): Map<string, string[]> {
  const meta = JSON.parse(readFileSync(path.join(repoRoot, 'dist/bundle/meta.json'), 'utf8')) as { outputs: Record<string, { inputs: Record<string, unknown> }> };
  return new Map(Object.entries(meta.outputs).map(([file, output]) => [file, Object.keys(output.inputs)]));
}

/** What `tether <args>` loaded: the files of this checkout, and the sources bundled in them. */
async function loadedBy(args: string[]): Promise<{ files: string[]; sources: string[] }> {
  const files = (await modulesOf(args)).filter((url) => url.startsWith('file:')).map((url) => path.relative(repoRoot, fileURLToPath(url)));
  const bundled = bundledSources();
  return { files, sources: files.flatMap((f) => bundled.get(f) ?? []) };
}

describe('start-up loads only what a command needs', () => {
  it.each(['exec', 'mcp', 'cp', 'ps'])('tether %s loads the client and ws, bundled: no server module, no zod', async (command) => {
    const { files, sources } = await loadedBy([command, '--help']);
    // Nothing but the bin and the bundle's files: no module of dist/ or node_modules/ one by one.
    expect(files.filter((f) => f !== 'bin/tether.js' && !/^dist\/bundle\/[^/]+\.js$/.test(f))).toEqual([]);
    expect(sources).toContain(`dist/cli/${command}.js`);
    expect(sources).toContain('dist/client/client.js');
    expect(sources).toContainEqual(expect.stringMatching(/^node_modules\/ws\//));
    expect(sources.filter((m) => m.startsWith('dist/server/') || m.startsWith('dist/gateway/'))).toEqual([]);
    expect(sources.filter((m) => m.includes('node_modules/zod/'))).toEqual([]);
  });

  it('tether --version loads nothing but the command table and the native build locator', async () => {
    const { files, sources } = await loadedBy(['--version']);
    expect(files.filter((f) => f !== 'bin/tether.js' && !/^dist\/bundle\/[^/]+\.js$/.test(f))).toEqual([]);
    expect(sources).toContain('dist/cli/main.js');
    expect(sources.filter((m) => !/^dist\/(cli\/(main|usage)|server\/native\/(index|native))\.js$/.test(m))).toEqual([]);
  });

  it("without dist/ built, the command says to build it", async () => {
    mkdirSync(path.join(dir, 'unbuilt', 'bin'), { recursive: true });
    copyFileSync(path.join(repoRoot, 'bin/tether.js'), path.join(dir, 'unbuilt', 'bin', 'tether.js'));
    const result = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(process.execPath, [path.join(dir, 'unbuilt', 'bin', 'tether.js'), '--version'], (_err, _stdout, stderr) => resolve({ code: child.exitCode, stderr }));
    });
    expect(result).toEqual({ code: 1, stderr: "tether: dist/ is not built: run 'npm run build' (or 'npm install') in this checkout\n" });
  });
});
