/**
 * The README and docs/*.md say what they show can be run: this runs it. Every fenced code
 * block is taken by its info string (the word after the opening fence):
 *
 *   ```sh run      run by bash (errexit, pipefail) in an empty directory of a project that has
 *                  installed tether-exec (below), with `tether` on PATH (this checkout's
 *                  bin/tether.js, as installed) and a fresh `tether serve` on a free port as
 *                  $TETHER_URL; must exit 0
 *   ```js run      written to a .mjs file in such a directory and run with node against such
 *                  a server; must exit 0. The project's node_modules/tether-exec is this
 *                  checkout (its `exports` point at dist/, which test/global-setup.ts builds),
 *                  and its other packages are this checkout's (the MCP SDK, the Inspector…)
 *   ```json run    an MCP host's config: each server in `mcpServers` is started as a host
 *                  starts it (its command, with `tether` on PATH, against such a server) and
 *                  must answer MCP's initialize and tools/list with at least one tool
 *   ```text output right after a run block: lines its stdout must contain, in this order
 *                  (each a whole line; `…` stands for anything)
 *   ```json        parsed; one with `mcpServers` (an MCP host's or the gateway's config) is
 *                  also read by the gateway's config parser, which takes any host's file
 *   ```sh, ```text, ``` (none)   shown, not run (commands that need a clone, a terminal, a
 *                  second machine or minutes; sample output)
 *
 * Any other info string fails, so a typo cannot turn a runnable block into an illustration.
 * In run blocks, `127.0.0.1:8765` (where `tether serve` listens by default, and where every
 * client command connects by default) is the test server's address instead, and
 * `127.0.0.1:8767` (a second port the examples use: a proxy or relay in front of the server; the
 * gateway's default, 8766, is left to the gateway) a free port.
 *
 * It also checks every relative link (file and #anchor) in those files, that src/, test/ and
 * bin/ cite only docs pages that exist, that no page cites a file outside the repository
 * (PROTOCOL.md), and that docs/development.md's apt-get line names every program the suite
 * needs (test/helpers/prerequisites.ts).
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { parseConfig } from '../../src/gateway/index.js';
import { PREREQUISITES } from '../helpers/prerequisites.js';
import { spawnServe, TETHER_BIN, type ServeProcess } from '../helpers/serve-process.js';

const repoRoot = path.join(import.meta.dirname, '..', '..');
const DEFAULT_ADDRESS = '127.0.0.1:8765';
const SECOND_ADDRESS = '127.0.0.1:8767';
const BLOCK_TIMEOUT_MS = 60_000;

export interface Block {
  file: string;
  line: number;
  info: string;
  text: string;
  /** The ```text output block right after it, if any. */
  output?: string;
}

const KNOWN = new Set(['', 'sh', 'text', 'json', 'sh run', 'js run', 'json run', 'text output']);

/** Fenced blocks of a markdown text (``` fences, possibly indented, as in list items). */
export function fencedBlocks(file: string, markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(```+)(.*)$/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, info] = open;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !new RegExp(`^\\s*${fence}\\s*$`).test(lines[j]!); j++) body.push(lines[j]!.startsWith(indent!) ? lines[j]!.slice(indent!.length) : lines[j]!);
    if (j === lines.length) throw new Error(`${file}:${i + 1}: a code fence that is never closed`);
    blocks.push({ file, line: i + 1, info: info!.trim().replace(/\s+/g, ' '), text: body.join('\n') + '\n' });
    i = j;
  }
  // Attach each output block to the run block just before it.
  const result: Block[] = [];
  for (const block of blocks) {
    if (block.info === 'text output') {
      const previous = result.at(-1);
      if (!previous || !previous.info.endsWith(' run')) throw new Error(`${file}:${block.line}: a \`text output\` block must follow a run block`);
      previous.output = block.text;
    } else result.push(block);
  }
  return result;
}

/** Each expected line must equal a later stdout line (trailing spaces ignored; `…` matches anything). */
export function missingOutput(expected: string, stdout: string): string | undefined {
  const actual = stdout.split('\n').map((l) => l.trimEnd());
  let at = 0;
  for (const want of expected.split('\n').map((l) => l.trimEnd()).filter((l) => l !== '')) {
    const pattern = new RegExp(`^${want.split('…').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);
    while (at < actual.length && !pattern.test(actual[at]!)) at++;
    if (at === actual.length) return want;
    at++;
  }
  return undefined;
}

const docFiles = ['README.md', ...readdirSync(path.join(repoRoot, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
const blocks = docFiles.flatMap((file) => fencedBlocks(file, readFileSync(path.join(repoRoot, file), 'utf8')));
const where = (b: Block) => `${b.file}:${b.line}`;

const scratch = mkdtempSync(path.join(tmpdir(), 'tether-docs-'));
// `tether` as installed: a command on PATH that runs this checkout's bin/tether.js.
const binDir = path.join(scratch, 'bin');
mkdirSync(binDir);
writeFileSync(path.join(binDir, 'tether'), `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(TETHER_BIN)} "$@"\n`, { mode: 0o755 });
// A project that has installed tether-exec, and this checkout's other packages (the MCP SDK
// and servers, the Inspector: what the MCP examples run with npx, found here offline).
const project = path.join(scratch, 'project');
mkdirSync(path.join(project, 'node_modules'), { recursive: true });
for (const entry of readdirSync(path.join(repoRoot, 'node_modules'))) symlinkSync(path.join(repoRoot, 'node_modules', entry), path.join(project, 'node_modules', entry));
symlinkSync(repoRoot, path.join(project, 'node_modules', 'tether-exec'));
writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'docs-example', private: true, type: 'module' }));
// The examples' environment: no token (the test server wants none), TETHER_URL set per block.
const { TETHER_TOKEN: _unused, ...baseEnv } = process.env;

/** A port nobody listens on now (for the examples' second address, e.g. a chaos proxy). */
async function freeAddress(): Promise<string> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return `127.0.0.1:${port}`;
}
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

async function runBlock(block: Block): Promise<Run & { serverLog: string }> {
  let server: ServeProcess | undefined;
  const dir = mkdtempSync(path.join(project, 'block-'));
  try {
    server = await spawnServe(['--listen', 'ws://127.0.0.1:0']);
    const text = block.text.replaceAll(DEFAULT_ADDRESS, new URL(server.url).host).replaceAll(SECOND_ADDRESS, await freeAddress());
    const env = { ...baseEnv, PATH: `${binDir}:${process.env.PATH}`, TETHER_URL: server.url };
    if (block.info === 'json run') return { code: await runHostConfig(text, dir, env), signal: null, stdout: '', stderr: '', serverLog: server.stderr() };
    let argv: string[];
    if (block.info === 'sh run') argv = ['bash', '-e', '-o', 'pipefail', '-c', text];
    else {
      writeFileSync(path.join(dir, 'example.mjs'), text);
      argv = [process.execPath, 'example.mjs'];
    }
    const child = spawn(argv[0]!, argv.slice(1), { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), BLOCK_TIMEOUT_MS - 5_000);
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (c, s) => resolve([c, s]));
    });
    clearTimeout(timer);
    return { code, signal, stdout, stderr, serverLog: server.stderr() };
  } finally {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Starts every server of an MCP host's config as the host would, and lists its tools. */
async function runHostConfig(text: string, cwd: string, env: NodeJS.ProcessEnv): Promise<number> {
  const config = JSON.parse(text) as { mcpServers: Record<string, { command: string; args?: string[]; env?: Record<string, string> }> };
  for (const [name, entry] of Object.entries(config.mcpServers)) {
    const client = new Client({ name: 'docs-blocks', version: '1' });
    const transport = new StdioClientTransport({ command: entry.command, args: entry.args, cwd, env: { ...(env as Record<string, string>), ...entry.env }, stderr: 'pipe' });
    let stderr = '';
    transport.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    try {
      await client.connect(transport);
      const { tools } = await client.listTools();
      if (tools.length === 0) throw new Error('no tools listed');
    } catch (err) {
      throw new Error(`server '${name}' (${entry.command} ${(entry.args ?? []).join(' ')}): ${(err as Error).message}\n--- its stderr:\n${stderr}`);
    } finally {
      await client.close();
    }
  }
  return 0;
}

describe('code blocks in README.md and docs/', () => {
  it('every fence says what it is (a known info string)', () => {
    const unknown = blocks.filter((b) => !KNOWN.has(b.info)).map((b) => `${where(b)}: \`\`\`${b.info}`);
    expect(unknown, `known: ${[...KNOWN].map((k) => `\`\`\`${k}`).join(', ')}`).toEqual([]);
  });

  it('the README has runnable blocks of each kind (the test cannot pass by finding none)', () => {
    const readme = blocks.filter((b) => b.file === 'README.md');
    expect(readme.filter((b) => b.info === 'sh run').length).toBeGreaterThan(0);
    expect(readme.filter((b) => b.info === 'js run').length).toBeGreaterThan(0);
    expect(readme.filter((b) => b.info === 'json').length).toBeGreaterThan(0);
  });

  it('library examples are plain JavaScript with no relative remote cwd (they run pasted into a .mjs file)', () => {
    // A TypeScript non-null assertion or type annotation is a syntax error in a .mjs file; the
    // run below catches it too, this says so more plainly.
    for (const b of blocks.filter((b) => b.info === 'js run')) {
      expect(b.text, where(b)).not.toMatch(/\w!\.|\w!\)|: (string|number|boolean)\b|\bas (string|number|const)\b/);
      expect(b.text, where(b)).not.toMatch(/cwd: '(?!\/)/);
    }
  });

  for (const block of blocks.filter((b) => b.info === 'json' || b.info === 'json run')) {
    it(`${where(block)} json parses${block.text.includes('mcpServers') ? ', and the gateway reads it as a config' : ''}`, () => {
      const json = JSON.parse(block.text) as unknown;
      // The gateway reads any MCP host's file; an entry it cannot read would fail the host too.
      if (block.text.includes('mcpServers')) parseConfig(json, { source: where(block), env: { ...process.env, ISSUES_TOKEN: 'x' } });
    });
  }

  for (const block of blocks.filter((b) => b.info.endsWith(' run'))) {
    it(
      `${where(block)} ${block.info}: ${block.text.split('\n').find((l) => l.trim() && !l.trim().startsWith('//') && !l.trim().startsWith('#'))?.trim().slice(0, 70)}`,
      async () => {
        const run = await runBlock(block);
        const said = `\n--- block (${where(block)}):\n${block.text}--- stdout:\n${run.stdout}--- stderr:\n${run.stderr}--- server:\n${run.serverLog}`;
        expect(run.code, `exit status${said}`).toBe(0);
        if (block.output !== undefined) expect(missingOutput(block.output, run.stdout), `expected output line not found${said}`).toBeUndefined();
        // An example that ends normally says nothing alarming (a client's close is not a failure).
        if (block.info === 'js run') expect(run.stderr, `stderr of an example that ended normally${said}`).not.toMatch(/\b(failed|lost|error)\b/i);
      },
      BLOCK_TIMEOUT_MS,
    );
  }
});

/** GitHub's anchor for a heading. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchors(file: string): Set<string> {
  const text = readFileSync(file, 'utf8').replace(/^\s*```[\s\S]*?^\s*```/gm, '');
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of text.matchAll(/^#{1,6}\s+(.+)$/gm)) {
    const base = slug(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/**
 * Pages another engineer is writing in parallel (issue #23: docs/install.md comes with
 * `npm run pack`). Links to them are allowed while they are missing; remove each from this
 * list when it lands, so the link check covers it again.
 */
const PENDING_PAGES = new Set<string>();

describe('links', () => {
  it('every relative link in README.md and docs/ reaches a file, and its #anchor a heading there', () => {
    const broken: string[] = [];
    for (const file of docFiles) {
      const text = readFileSync(path.join(repoRoot, file), 'utf8').replace(/^\s*```[\s\S]*?^\s*```/gm, '');
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/i.test(target)) continue;
        const [filePart, anchor] = target.split('#') as [string, string | undefined];
        const resolved = filePart === '' ? path.join(repoRoot, file) : path.resolve(path.dirname(path.join(repoRoot, file)), filePart);
        if (!existsSync(resolved)) {
          if (!PENDING_PAGES.has(path.relative(repoRoot, resolved))) broken.push(`${file}: ${target} (no such file)`);
        }
        else if (anchor !== undefined && statSync(resolved).isFile() && !anchors(resolved).has(anchor)) broken.push(`${file}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('src/, test/ and bin/ cite only docs pages that exist', () => {
    const cited: string[] = [];
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]));
    for (const file of ['src', 'test', 'bin'].flatMap((d) => walk(path.join(repoRoot, d)))) {
      for (const m of readFileSync(file, 'utf8').matchAll(/\bdocs\/([\w.-]+\.(?:md|png))/g)) {
        if (!existsSync(path.join(repoRoot, 'docs', m[1]!)) && !PENDING_PAGES.has(`docs/${m[1]}`)) cited.push(`${path.relative(repoRoot, file)}: docs/${m[1]}`);
      }
    }
    expect(cited).toEqual([]);
  });

  it('no page cites a file that is not in the repository (PROTOCOL.md lives outside it)', () => {
    for (const file of docFiles) expect(readFileSync(path.join(repoRoot, file), 'utf8'), file).not.toMatch(/PROTOCOL\.md/);
  });

  it("docs/development.md's apt-get line names every program the suite needs", () => {
    const text = readFileSync(path.join(repoRoot, 'docs/development.md'), 'utf8');
    const line = text.split('\n').find((l) => /apt-get install/.test(l)) ?? '';
    for (const p of Object.values(PREREQUISITES)) expect(line.split(/\s+/), `apt-get line: ${line}`).toContain(p.package);
  });
});
