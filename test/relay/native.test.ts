/**
 * The relay runs on laptops (macOS, Windows): it loads nothing native and prepares no keeper.
 * A fresh node process imports dist/relay/relay.js, starts a relay in front of a tether server
 * (this process's), runs a command and reads a file through it, with `process.dlopen` (what
 * require() of a .node file calls) and child_process's spawners recording every use.
 */
import { execFile } from 'node:child_process';
import { join, sep } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type TetherServer } from '../../src/server/index.js';

const DIST = join(import.meta.dirname, '..', '..', 'dist');
let upstream: TetherServer;

beforeAll(async () => {
  upstream = await startServer({ port: 0 });
});

afterAll(async () => {
  await upstream?.close();
});

describe('tether relay and native code', () => {
  it('starts, runs a command and reads a file without loading native code or spawning anything locally', async () => {
    const script = `
      import { pathToFileURL } from 'node:url';
      import childProcess from 'node:child_process';
      import { syncBuiltinESMExports } from 'node:module';
      const loaded = [];
      const spawned = [];
      const dlopen = process.dlopen;
      process.dlopen = function (module, filename, ...rest) {
        loaded.push(filename);
        return dlopen.call(this, module, filename, ...rest);
      };
      for (const name of ['spawn', 'fork', 'execFile', 'exec', 'spawnSync', 'execFileSync']) {
        const real = childProcess[name];
        childProcess[name] = function (...args) {
          spawned.push(String(args[0]));
          return real.apply(this, args);
        };
      }
      syncBuiltinESMExports();
      const [dist, to] = JSON.parse(process.argv[1]);
      const { startRelay } = await import(pathToFileURL(dist + '/relay/relay.js').href);
      const { ExecClient } = await import(pathToFileURL(dist + '/client/index.js').href);
      const relay = await startRelay({ to });
      const client = await ExecClient.connect(relay.url, { clientName: 'relay-native', extensions: [] });
      const proc = client.spawn(['sh', '-c', 'echo relayed']);
      let out = '';
      proc.stdout.on('data', (d) => (out += d));
      const code = await proc.exited;
      await proc.closed;
      const hostname = await client.fs.readFile('/etc/hostname', 'utf8');
      await client.close();
      await relay.close();
      process.stdout.write(JSON.stringify({ out, code, hostname, loaded, spawned }), () => process.exit(0));
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script, JSON.stringify([DIST, upstream.url])], {
      timeout: 20_000,
    });
    const result = JSON.parse(stdout) as { out: string; code: number; hostname: string; loaded: string[]; spawned: string[] };
    expect(result.out).toBe('relayed\n');
    expect(result.code).toBe(0);
    expect(result.hostname.length).toBeGreaterThan(0);
    // A dependency's optional addon (ws's bufferutil) is its own business; ours must never load.
    expect(result.loaded.filter((file) => !file.includes(`${sep}node_modules${sep}`))).toEqual([]);
    expect(result.spawned).toEqual([]);
  });
});
