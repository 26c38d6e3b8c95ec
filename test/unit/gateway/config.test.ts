import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { InputBridge } from '../../../src/gateway/input-bridge.js';
import { ConfigError, eraOfOpening, loadConfigFile, parseConfig } from '../../../src/gateway/index.js';
import { resolveSupervisorOptions, DEFAULT_SUPERVISOR_OPTIONS } from '../../../src/supervisor/index.js';

const dir = mkdtempSync(path.join(tmpdir(), 'tether-gw-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function error(json: unknown): string {
  try {
    parseConfig(json, { source: 'tether.json', baseDir: '/etc/tether', env: { HOME: '/home/me' } });
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('gateway config', () => {
  it('reads the three kinds from the mcpServers shape hosts use', () => {
    const config = parseConfig(
      {
        mcpServers: {
          local: { command: 'npx', args: ['-y', 'server'], env: { KEY: 'v' }, cwd: 'work' },
          remote: { command: 'node', args: ['srv.js'], cwd: '/srv', tether: { url: 'ws://10.0.0.5:8765', tokenFile: 'secrets/token' } },
          web: { type: 'http', url: 'https://mcp.example.com/mcp', headers: { Authorization: 'Bearer ${API_TOKEN}' } },
          off: { command: 'x', disabled: true },
        },
      },
      { source: 'tether.json', baseDir: '/etc/tether', env: { API_TOKEN: 'abc' } },
    );
    expect(config.servers.map((s) => s.spec)).toEqual([
      { name: 'local', kind: 'stdio', command: 'npx', args: ['-y', 'server'], env: { KEY: 'v' }, cwd: '/etc/tether/work' },
      {
        name: 'remote',
        kind: 'exec',
        command: 'node',
        args: ['srv.js'],
        env: undefined,
        cwd: '/srv', // remote: not resolved locally
        tether: { url: 'ws://10.0.0.5:8765', token: undefined, tokenFile: '/etc/tether/secrets/token', recoveryDeadlineMs: undefined },
      },
      { name: 'web', kind: 'http', url: 'https://mcp.example.com/mcp', headers: { Authorization: 'Bearer abc' } },
    ]);
    expect(config.disabled).toEqual(['off']);
  });

  it('supervisor settings: global, per entry, null = unlimited retries', () => {
    const config = parseConfig({
      supervisor: { initialBackoffMs: 500, maxRetries: 5, healthIntervalMs: 30000 },
      mcpServers: { a: { command: 'a' }, b: { command: 'b', supervisor: { maxRetries: null, crashLimit: 10, maxBackoffMs: 60000 } } },
    });
    const [a, b] = config.servers.map((s) => resolveSupervisorOptions(s.supervisor));
    expect(a).toMatchObject({ maxRetries: 5, healthIntervalMs: 30000, crashLimit: 3, backoff: { initialMs: 500, factor: 2, maxMs: 180000, jitter: 0.1 } });
    expect(b).toMatchObject({ maxRetries: undefined, healthIntervalMs: 30000, crashLimit: 10, backoff: { initialMs: 500, maxMs: 60000 } });
    expect(resolveSupervisorOptions()).toEqual(DEFAULT_SUPERVISOR_OPTIONS);
    expect(DEFAULT_SUPERVISOR_OPTIONS).toMatchObject({
      backoff: { initialMs: 1000, factor: 2, maxMs: 180000, jitter: 0.1 },
      maxRetries: undefined,
      crashLimit: 3,
      crashWindowMs: 300000,
      healthIntervalMs: 120000,
      healthJitter: 0.1,
      healthTimeoutMs: 60000,
      healthFailureThreshold: 3,
    });
  });

  it('bad config → one clear error naming the entry and the field', () => {
    expect(error({})).toMatch(/^tether.json: field 'mcpServers': /);
    expect(error({ mcpServers: { fs: { args: ['x'] } } })).toBe("tether.json: server 'fs': field 'command': missing: give 'command' (a stdio server) or 'url' (a Streamable HTTP server)");
    expect(error({ mcpServers: { fs: { command: 'x', args: 'not-a-list' } } })).toMatch(/^tether.json: server 'fs': field 'args': .*expected array/);
    expect(error({ mcpServers: { fs: { command: 'x', args: ['ok', 3] } } })).toMatch(/^tether.json: server 'fs': field 'args\[1\]': .*expected string/);
    expect(error({ mcpServers: { web: { url: 'not a url' } } })).toMatch(/server 'web': field 'url': not a valid URL/);
    expect(error({ mcpServers: { web: { url: 'ftp://x/mcp' } } })).toMatch(/server 'web': field 'url': must be http/);
    expect(error({ mcpServers: { web: { url: 'http://x/mcp', command: 'y' } } })).toMatch(/server 'web': field 'url': give either 'command'/);
    expect(error({ mcpServers: { web: { type: 'websocket', url: 'ws://x' } } })).toMatch(/server 'web': field 'type': unknown type "websocket"/);
    expect(error({ mcpServers: { r: { command: 'x', tether: { url: 'http://host' } } } })).toMatch(/server 'r': field 'tether.url': must be a ws:\/\/ or wss:\/\//);
    expect(error({ mcpServers: { r: { command: 'x', tether: { url: 'ws://h:1', tokenFile: 't', bogus: 1 } } } })).toMatch(/server 'r': field 'tether': .*bogus/);
    expect(error({ mcpServers: { r: { url: 'http://h/mcp', tether: { url: 'ws://h:1' } } } })).toMatch(/server 'r': field 'tether': only a stdio entry/);
    expect(error({ mcpServers: { r: { command: 'x', supervisor: { maxRetries: -1 } } } })).toMatch(/server 'r': field 'supervisor.maxRetries': /);
    expect(error({ mcpServers: { r: { command: 'x', supervisor: { healthIntervalMS: 5 } } } })).toMatch(/server 'r': field 'supervisor': .*healthIntervalMS/);
    expect(error({ mcpServers: { 'a b': { command: 'x' } } })).toMatch(/server 'a b': the name must be/);
    expect(error({ mcpServers: { a__b: { command: 'x' } } })).toMatch(/server 'a__b': the name must not contain '__'/);
    expect(error({ mcpServers: { k: { command: 'x', env: { TOKEN: '${MISSING_VAR}' } } } })).toMatch(/server 'k': field 'env.TOKEN': environment variable MISSING_VAR is not set/);
    expect(error({ mcpServers: { k: 'x' } })).toMatch(/server 'k': must be an object/);
  });

  it('resolves ~/ in local paths to the home directory', () => {
    const config = parseConfig({ mcpServers: { r: { command: 'x', tether: { url: 'ws://h:1', tokenFile: '~/.config/tether/token' } } } });
    expect(config.servers[0]!.spec).toMatchObject({ tether: { tokenFile: path.join(homedir(), '.config/tether/token') } });
  });

  it('tether.caFile: resolved against the config file, checked when the config loads', () => {
    const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
    writeFileSync(path.join(dir, 'front-ca.pem'), pem);
    writeFileSync(path.join(dir, 'not-a-ca.txt'), 'hello\n');
    const file = path.join(dir, 'ca.json');
    const withCa = (caFile: string) => writeFileSync(file, JSON.stringify({ mcpServers: { box1: { command: 'x', tether: { url: 'wss://front/h/box1/', caFile } } } }));
    withCa('front-ca.pem');
    expect(loadConfigFile(file).servers[0]!.spec).toMatchObject({ tether: { caFile: path.join(dir, 'front-ca.pem') } });
    const loadError = () => {
      try {
        loadConfigFile(file);
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as Error).message;
      }
      throw new Error('expected a ConfigError');
    };
    withCa('missing-ca.pem');
    expect(loadError()).toBe(`${file}: server 'box1': field 'tether.caFile': cannot read ${path.join(dir, 'missing-ca.pem')}: ENOENT`);
    withCa('not-a-ca.txt');
    expect(loadError()).toBe(`${file}: server 'box1': field 'tether.caFile': ${path.join(dir, 'not-a-ca.txt')} holds no PEM certificate`);
  });

  it('expands ${VAR} and ${VAR:-default}', () => {
    const config = parseConfig({ mcpServers: { k: { command: '${HOME}/bin/srv', args: ['--port=${PORT:-8080}'] } } }, { env: { HOME: '/home/me' } });
    expect(config.servers[0]!.spec).toMatchObject({ command: '/home/me/bin/srv', args: ['--port=8080'] });
  });

  it('warns about entry keys it ignores instead of failing (host-specific fields); ignores a host\'s own top-level settings', () => {
    const config = parseConfig({ mcpServers: { k: { command: 'x', alwaysAllow: ['t'] } }, other: 1 });
    expect(config.warnings).toEqual(["config: server 'k': ignoring keys alwaysAllow"]);
  });

  it("takes the main MCP hosts' config files as they are (issue 15)", () => {
    // Claude Desktop: host settings beside mcpServers.
    const claude = parseConfig({ globalShortcut: 'Ctrl+Space', mcpServers: { fs: { command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '/tmp'], env: { A: '1' } } } });
    expect(claude.servers.map((s) => s.spec)).toEqual([{ name: 'fs', kind: 'stdio', command: 'npx', args: ['-y', '@modelcontextprotocol/server-filesystem', '/tmp'], env: { A: '1' }, cwd: undefined }]);
    // Claude Code (~/.claude.json) and Cursor: type fields, per-entry extras, an SSE entry skipped (not fatal).
    const code = parseConfig({
      numStartups: 12,
      projects: { '/x': {} },
      mcpServers: {
        local: { type: 'stdio', command: 'node', args: ['s.js'], env: {} },
        remote: { type: 'http', url: 'https://mcp.example.com/mcp', headers: { Authorization: 'Bearer x' } },
        old: { type: 'sse', url: 'https://old.example.com/sse' },
        cursor: { command: 'uvx', args: ['srv'], autoApprove: [], timeout: 60, transportType: 'stdio' },
      },
    });
    expect(code.servers.map((s) => [s.spec.name, s.spec.kind])).toEqual([['local', 'stdio'], ['remote', 'http'], ['cursor', 'stdio']]);
    expect(code.skipped).toEqual(['old']);
    expect(code.warnings.join('\n')).toMatch(/server 'old': skipped: the legacy SSE transport is not supported/);
    // Windsurf's serverUrl, Gemini CLI's httpUrl; VS Code's mcp.json ("servers", "inputs").
    expect(parseConfig({ mcpServers: { w: { serverUrl: 'https://w.example/mcp' } } }).servers[0]!.spec).toMatchObject({ kind: 'http', url: 'https://w.example/mcp' });
    expect(parseConfig({ mcpServers: { g: { httpUrl: 'https://g.example/mcp' } } }).servers[0]!.spec).toMatchObject({ kind: 'http', url: 'https://g.example/mcp' });
    const vscode = parseConfig({ inputs: [{ id: 'key', type: 'promptString' }], servers: { gh: { type: 'http', url: 'https://api.example/mcp' }, mem: { type: 'stdio', command: 'npx', args: ['m'] } } });
    expect(vscode.servers.map((s) => s.spec.name)).toEqual(['gh', 'mem']);
  });

  it('loadConfigFile: missing file and invalid JSON are clear errors', () => {
    expect(() => loadConfigFile(path.join(dir, 'nope.json'))).toThrow(/cannot read config .*nope.json: ENOENT/);
    const bad = path.join(dir, 'bad.json');
    writeFileSync(bad, '{ "mcpServers": ');
    expect(() => loadConfigFile(bad)).toThrow(/bad.json is not valid JSON/);
    const good = path.join(dir, 'good.json');
    writeFileSync(good, JSON.stringify({ mcpServers: { a: { command: 'a', cwd: 'sub' } } }));
    expect(loadConfigFile(good).servers[0]!.spec).toMatchObject({ cwd: path.join(dir, 'sub') });
  });
});

describe('the era a stdio host opens with (pure)', () => {
  it('initialize or anything unreadable is 2025; server/discover or the 2026 _meta envelope is 2026-07-28', () => {
    expect(eraOfOpening(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25' } }))).toBe('legacy');
    expect(eraOfOpening('not json')).toBe('legacy');
    expect(eraOfOpening(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }))).toBe('legacy');
    expect(eraOfOpening(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'server/discover' }))).toBe('modern');
    expect(eraOfOpening(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } } }))).toBe('modern');
  });
});

describe('InputBridge (pure; fake timers)', () => {
  it('a call that asks the host answers input_required; the next round answers the ask and gets the result; an unknown state is refused', async () => {
    const bridge = new InputBridge(60_000);
    const never = new AbortController().signal;
    const first = (await bridge.round(async (call) => {
      const answer = await call.ask({ method: 'sampling/createMessage', params: { messages: [] } });
      return { content: [{ type: 'text', text: `got ${(answer as { content: { text: string } }).content.text}` }] };
    }, never, undefined, undefined)) as { resultType: string; inputRequests: Record<string, unknown>; requestState: string };
    expect(first.resultType).toBe('input_required');
    const [key] = Object.keys(first.inputRequests);
    expect(first.inputRequests[key!]).toEqual({ method: 'sampling/createMessage', params: { messages: [] } });
    expect(bridge.size).toBe(1);
    const second = await bridge.round(() => Promise.reject(new Error('not started again')), never, { [key!]: { content: { text: 'it' } } }, first.requestState);
    expect(second).toEqual({ content: [{ type: 'text', text: 'got it' }] });
    expect(bridge.size).toBe(0);
    await expect(bridge.round(() => Promise.resolve({}), never, undefined, first.requestState)).rejects.toThrow(/Invalid or expired requestState/);
  });

  it('a call nobody resumes is ended after resumeTimeoutMs (its backend call aborted); a host abort ends it at once', async () => {
    vi.useFakeTimers();
    try {
      const bridge = new InputBridge(1000);
      const aborted: string[] = [];
      const start = (name: string) => (call: { ask: (r: { method: string }) => Promise<unknown>; signal: AbortSignal }) => {
        call.signal.addEventListener('abort', () => aborted.push(name));
        return call.ask({ method: 'elicitation/create' }).then(() => ({}));
      };
      await bridge.round(start('idle'), new AbortController().signal, undefined, undefined);
      await vi.advanceTimersByTimeAsync(999);
      expect(aborted).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      expect(aborted).toEqual(['idle']);
      expect(bridge.size).toBe(0);
      const host = new AbortController();
      const round = bridge.round((call) => new Promise((resolve) => call.signal.addEventListener('abort', () => { aborted.push('cancelled'); resolve({}); })), host.signal, undefined, undefined);
      host.abort();
      await round;
      expect(aborted).toEqual(['idle', 'cancelled']);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('InputBridge bound', () => {
  it('past maxWaiting calls waiting for their hosts, a call that asks ends with an error (its backend call aborted)', async () => {
    const bridge = new InputBridge(60_000, 1);
    const never = new AbortController().signal;
    const asking = (call: { ask: (r: { method: string }) => Promise<unknown>; signal: AbortSignal }) =>
      new Promise<Record<string, never>>((resolve, reject) => {
        call.signal.addEventListener('abort', () => reject(new Error('aborted')));
        void call.ask({ method: 'elicitation/create' }).then(() => resolve({}), reject);
      });
    expect(await bridge.round(asking, never, undefined, undefined)).toMatchObject({ resultType: 'input_required' });
    await expect(bridge.round(asking, never, undefined, undefined)).rejects.toThrow(/too many calls \(1\) waiting/);
    expect(bridge.size).toBe(1);
  });
});
