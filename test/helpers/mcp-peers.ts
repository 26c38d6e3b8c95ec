/**
 * The real MCP servers used as test peers (devDependencies), run by absolute path with
 * the current node binary: no npx, no network at test time.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const node = process.execPath;
export const tetherBin = path.join(repoRoot, 'bin/tether.js');

/** server-everything; its launcher takes the transport name ('stdio' is also the default). */
export const everything = {
  command: node,
  args: [path.join(repoRoot, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js'), 'stdio'],
};

/** server-memory writes its knowledge graph to MEMORY_FILE_PATH: one temp file per use. */
export function memoryServer(): { command: string; args: string[]; env: Record<string, string>; cleanup(): void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'tether-mcp-memory-'));
  return {
    command: node,
    args: [path.join(repoRoot, 'node_modules/@modelcontextprotocol/server-memory/dist/index.js')],
    env: { MEMORY_FILE_PATH: path.join(dir, 'memory.jsonl') },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** The text of the first content block of a tools/call result. */
export function text(result: unknown): string {
  const content = (result as { content?: { type: string; text?: string }[] }).content;
  const first = content?.[0];
  if (!first || first.type !== 'text' || typeof first.text !== 'string') {
    throw new Error(`expected a text result, got ${JSON.stringify(result).slice(0, 300)}`);
  }
  return first.text;
}

/** server-everything over Streamable HTTP, as a child process on a free loopback port. */
export async function everythingHttp(): Promise<{ url: string; pid: number; close(): Promise<void> }> {
  const { createServer } = await import('node:net');
  const { spawn } = await import('node:child_process');
  const port = await new Promise<number>((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const p = (probe.address() as { port: number }).port;
      probe.close(() => resolve(p));
    });
  });
  const child = spawn(node, [everything.args[0]!, 'streamableHttp'], { env: { ...process.env, PORT: String(port) }, stdio: ['ignore', 'ignore', 'pipe'] });
  let said = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr!.on('data', (d: Buffer) => {
      said += d.toString();
      if (/listening on port/.test(said)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`server-everything (HTTP) exited with ${code}: ${said}`)));
  });
  child.stderr!.resume();
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    pid: child.pid!,
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
  };
}

const inspectorBin = path.join(repoRoot, 'node_modules/.bin/mcp-inspector');

/** Runs the MCP Inspector's CLI (0.15, a devDependency: a real host); its stdout is the JSON result. */
export function inspect(args: string[]): Promise<any> {
  return new Promise((resolve, reject) => {
    execFile(inspectorBin, args, { timeout: 60_000, maxBuffer: 10 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`mcp-inspector ${args.join(' ')} failed: ${err.message}\n${stderr}\n${stdout}`));
      try {
        resolve(JSON.parse(stdout));
      } catch {
        reject(new Error(`mcp-inspector printed no JSON: ${stdout}\n${stderr}`));
      }
    });
  });
}
