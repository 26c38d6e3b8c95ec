/**
 * Start-up cost (issue 9): a command loads only what it needs. The client commands (exec,
 * mcp, cp, ps) load the client and `ws`, never the server's modules or zod (~95 modules, the
 * larger part of `tether exec`'s start once). The time itself is measured in `npm run bench`
 * (start module); this guards what the figure depends on, without a wall-clock assertion.
 * The modules are seen by a module-resolution hook in the command's own process.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from './helpers/mcp-peers.js';

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

describe('start-up loads only what a command needs', () => {
  it.each(['exec', 'mcp', 'cp', 'ps'])('tether %s loads the client and ws: no server module, no zod', async (command) => {
    const modules = await modulesOf([command, '--help']);
    expect(modules).toContainEqual(expect.stringContaining(`/dist/cli/${command}.js`));
    expect(modules).toContainEqual(expect.stringContaining('/node_modules/ws/'));
    expect(modules.filter((m) => m.includes('/dist/server/') || m.includes('/dist/gateway/'))).toEqual([]);
    expect(modules.filter((m) => m.includes('/node_modules/zod/'))).toEqual([]);
  });

  it('tether --version loads nothing but the command table', async () => {
    const modules = await modulesOf(['--version']);
    expect(modules.filter((m) => m.includes('/node_modules/'))).toEqual([]);
    expect(modules.filter((m) => m.includes('/dist/') && !/\/dist\/cli\/(main|usage)\.js$/.test(m))).toEqual([]);
  });
});
