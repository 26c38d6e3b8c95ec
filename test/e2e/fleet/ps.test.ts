/**
 * `tether ps` over a fleet (docs/fleet.md): several --url, or a fleet file (NAME URL
 * [TOKEN_FILE], each host its own token), asked at once and listed in one table led by a
 * HOST column. A host that cannot be reached is said on stderr, the others still listed,
 * exit 255. (test/e2e/fleet/nginx.test.ts runs it through the front door.)
 */
import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../../src/client/index.js';
import { parseFleet } from '../../../src/cli/fleet-file.js';
import { startServer, type TetherServer } from '../../../src/server/index.js';
import { TETHER_BIN } from '../../helpers/serve-process.js';
import { freePort } from '../../helpers/server-process.js';

function ps(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [TETHER_BIN, 'ps', ...args], { env: { ...process.env, TETHER_TOKEN: '' } }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr }),
    );
  });
}

describe('tether ps over several hosts', () => {
  let dir: string;
  let servers: TetherServer[] = [];
  let clients: ExecClient[] = [];
  let down: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'tether-fleet-ps-'));
    for (const [i, name] of ['alpha', 'beta'].entries()) {
      writeFileSync(join(dir, `${name}.token`), `${name}-token\n`);
      const server = await startServer({ port: 0, token: `${name}-token` });
      servers.push(server);
      const client = await ExecClient.connect(server.url, { token: `${name}-token`, clientName: `${name}-agent` });
      clients.push(client);
      const proc = client.spawn(['sleep', String(41 + i)]);
      await once(proc, 'spawn');
    }
    down = `ws://127.0.0.1:${await freePort()}/`;
  });

  afterAll(async () => {
    for (const c of clients) await c.close();
    for (const s of servers) await s.close();
    servers = [];
    clients = [];
    rmSync(dir, { recursive: true, force: true });
  });

  it('a fleet file, each host with its own token: one table led by HOST, every host\'s sessions', async () => {
    const fleet = join(dir, 'fleet');
    writeFileSync(fleet, `# the fleet\nalpha ${servers[0]!.url} alpha.token\n\nbeta  ${servers[1]!.url}   beta.token  # second\n`);
    const { code, stdout, stderr } = await ps(['--fleet', fleet]);
    expect(code, stderr).toBe(0);
    const lines = stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^HOST\s+SESSION\s+CLIENT\s+LINK\s+PID\s+STATE\s+AGE\s+OUT\s+IN\s+COMMAND$/);
    expect(lines.slice(1)).toHaveLength(2);
    expect(lines[1]).toMatch(new RegExp(`^alpha\\s+${clients[0]!.sessionId.slice(0, 8)}\\s+alpha-agent\\s+attached\\s+\\d+\\s+running\\s.*sleep 41$`));
    expect(lines[2]).toMatch(new RegExp(`^beta\\s+${clients[1]!.sessionId.slice(0, 8)}\\s+beta-agent\\s+attached\\s+\\d+\\s+running\\s.*sleep 42$`));
    const json = JSON.parse((await ps(['--fleet', fleet, '--json'])).stdout) as { hosts: { host: string; sessions: { clientName: string }[] }[] };
    expect(json.hosts.map((h) => [h.host, h.sessions.map((s) => s.clientName)])).toEqual([
      ['alpha', ['alpha-agent']],
      ['beta', ['beta-agent']],
    ]);
  });

  it('several --url sharing one token: each host named by its address; a host down is said, the others listed, exit 255', async () => {
    writeFileSync(join(dir, 'both'), 'alpha-token\n');
    const { code, stdout, stderr } = await ps(['--url', servers[0]!.url, '--url', down, '--url', servers[1]!.url, '--token-file', join(dir, 'both')]);
    expect(code).toBe(255);
    const host = (url: string) => new URL(url).host;
    expect(stdout).toMatch(new RegExp(`^${host(servers[0]!.url)}\\s+${clients[0]!.sessionId.slice(0, 8)}\\s.*sleep 41$`, 'm'));
    expect(stdout).not.toContain('sleep 42'); // beta refuses alpha's token
    expect(stderr).toContain(`tether ps: ${host(down)} (${down}): cannot connect:`);
    expect(stderr).toContain(`tether ps: ${host(servers[1]!.url)} (${servers[1]!.url}): cannot connect:`);
  });

  it('a fleet file with a bad line is a usage error naming it', async () => {
    expect(() => parseFleet('box1 ws://a:1\nbox2 http://b:2\n', 'f')).toThrow("--fleet f line 2: 'http://b:2' is not a ws:// or wss:// URL");
    expect(() => parseFleet('box1 ws://a:1\nbox1 ws://b:2\n', 'f')).toThrow("--fleet f line 2: host 'box1' is listed twice");
    expect(() => parseFleet('# nothing\n', 'f')).toThrow('lists no host');
    expect(parseFleet('box1 wss://front/h/box1/ t # c\n', '/etc/tether/fleet')).toEqual([{ name: 'box1', url: 'wss://front/h/box1/', tokenFile: '/etc/tether/t' }]);
    const { code, stderr } = await ps(['--fleet', join(dir, 'missing')]);
    expect(code).toBe(2);
    expect(stderr).toContain('cannot read --fleet');
  });
});
