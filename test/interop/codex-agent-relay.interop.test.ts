/**
 * Issue #25: the real Codex agent survives link cuts when its executor is `tether relay`.
 *
 * The workspace lives on the exec-server's host (as in codex-agent-workspace.interop.test.ts):
 * AGENTS.md must reach the model, an `apply_patch` (fs/readFile, then fs/writeFile of one
 * updated and one added file) must land on the host, and the next command must see it. The
 * link in front of the tether server is cut by TRAFFIC, not by time: the moment the server
 * receives the patch's `fs/readFile` of fix.txt, and again its `fs/writeFile` of fix.txt, the
 * chaos proxy resets every connection through it, so each of those calls is in flight with
 * its answer lost (the write is applied, its answer is not delivered). Deterministic: the cut
 * is a function of the bytes, with no clock and no random draw.
 *
 * - Pointed straight at the server, the agent must fail this (the proof the test can fail):
 *   Codex's own client fails a call in flight ("exec-server transport closed").
 * - Through `tether relay --to <proxy>` (CODEX_EXEC_SERVER_URL = the relay's URL), every check
 *   passes and no tool output mentions a transport error.
 * - Through the relay launched by Codex 0.171 itself (environments.toml `program` form, the
 *   relay on stdio), the same.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseToml } from 'smol-toml';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import type { Connection } from '../../src/server/connection/connection.js';
import { CodexAgent, type CodexAgentOptions } from '../helpers/codex-agent.js';
import { CODEX_LATEST } from '../helpers/codex.js';
import { tetherArgs } from '../helpers/cli.js';
import { assistantMessage, FakeModel, functionCall, functionCallOutputs, outputsThisTurn, outputText, type ResponseItem, type ResponsesRequest } from '../helpers/fake-model.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { serverInternals } from '../../src/server/server.js';

const MARKER = 'AGENTS-MARKER-7391';
const PATCH = ['*** Begin Patch', '*** Update File: fix.txt', '@@', '-old line', '+new line', '*** Add File: added.txt', '+added content', '*** End Patch', ''].join('\n');

/**
 * Set in the exec-servers' environments only (this process, which runs the tether server, and
 * the program environments.toml starts) and removed from the agent's: the command prints it,
 * which proves it ran on the exec-server, not inside the agent.
 */
const EXEC_SIDE = 'TETHER_EXEC_SIDE';

/** The model: apply the patch (the shell tool's apply_patch form), then print both files, then finish. */
function script(request: ResponsesRequest): ResponseItem[] {
  const outputs = outputsThisTurn(request);
  if (outputs.length === 0) return [functionCall('exec_command', { cmd: `apply_patch <<'EOF'\n${PATCH}EOF\n`, yield_time_ms: 10_000 })];
  if (outputs.length === 1) return [functionCall('exec_command', { cmd: `cat fix.txt added.txt; echo "ran on \${${EXEC_SIDE}:-the agent}"`, yield_time_ms: 20_000 })];
  return [assistantMessage('patched')];
}

function workspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-relay-ws-'));
  writeFileSync(join(dir, 'AGENTS.md'), `# Project rules\n${MARKER}: keep lines short.\n`);
  writeFileSync(join(dir, 'fix.txt'), 'old line\n');
  return dir;
}

/**
 * The cut pattern: the first time the server receives a message for which `when` holds, the
 * proxy resets every connection through it (before the server can answer). Returns what was cut.
 */
function cutOnTraffic(server: TetherTarget, proxy: ChaosProxy, rules: Array<{ name: string; when: (text: string) => boolean }>): string[] {
  const done: string[] = [];
  serverInternals(server.server).onConnection((conn: Connection) => {
    conn.ws.on('message', (data: Buffer | Buffer[], isBinary: boolean) => {
      if (isBinary) return;
      const text = Array.isArray(data) ? Buffer.concat(data).toString() : data.toString();
      for (const rule of rules) {
        if (done.includes(rule.name) || !rule.when(text)) continue;
        done.push(rule.name);
        proxy.cutAll();
      }
    });
  });
  return done;
}

const PATCH_CUTS = [
  { name: "the patch's fs/readFile", when: (t: string) => t.includes('"fs/readFile"') && t.includes('fix.txt') },
  { name: "the patch's fs/writeFile", when: (t: string) => t.includes('"fs/writeFile"') && t.includes('fix.txt') },
];

interface TurnOutcome {
  /** The checks that failed (empty: the turn did everything right). */
  failures: string[];
  /** What the cut rules fired on. */
  cuts: string[];
  diagnose: string;
}

/** A relay started by the test: `tether relay --to <url> --listen ws://127.0.0.1:0 --insecure-no-token`. */
async function startRelay(to: string, log: string[]): Promise<{ url: string; child: ChildProcess; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, tetherArgs(['relay', '--to', to, '--listen', 'ws://127.0.0.1:0', '--insecure-no-token']), {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  createInterface({ input: child.stderr! }).on('line', (line) => log.push(`[relay] ${line}`));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (line) => resolve(line.trim()));
    child.once('exit', (code) => reject(new Error(`tether relay exited early (${code}): ${log.slice(-5).join('\n')}`)));
  });
  return {
    url,
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await exited;
      }
    },
  };
}

describe("docs/codex.md's environments.toml", () => {
  it('is TOML of the shape Codex 0.171 reads: a default environment started as `tether relay … --listen stdio`', () => {
    const toml = parseToml(documentedEnvironmentsToml('ws://127.0.0.1:1', '/tmp/token')) as any;
    expect(toml.include_local).toBe(false);
    const [env] = toml.environments;
    expect(toml.environments).toHaveLength(1);
    expect(env).toEqual({ id: toml.default, program: 'tether', args: ['relay', '--to', 'ws://127.0.0.1:1', '--token-file', '/tmp/token', '--listen', 'stdio'] });
  });
});

describe('the real Codex agent, its exec-server link cut on the patch (by traffic)', () => {
  let server: TetherTarget | undefined;
  let proxy: ChaosProxy | undefined;
  let model: FakeModel | undefined;
  let agent: CodexAgent | undefined;
  const stops: Array<() => Promise<void>> = [];
  const dirs: string[] = [];
  const log: string[] = [];

  beforeAll(async () => {
    process.env[EXEC_SIDE] = 'the exec-server';
    model = await FakeModel.start(script);
  });

  afterEach(async () => {
    await agent?.stop();
    agent = undefined;
    for (const stop of stops.splice(0).reverse()) await stop();
    await proxy?.close();
    await server?.stop();
    proxy = undefined;
    server = undefined;
  });

  afterAll(async () => {
    await model?.close();
    delete process.env[EXEC_SIDE];
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  /** A fresh server, a proxy in front of it that cuts on the patch's traffic, an agent through `via(proxyUrl)`. */
  async function patchTurn(via: (proxyUrl: string) => Promise<Partial<CodexAgentOptions>>, serverOptions: { token?: string } = {}): Promise<TurnOutcome> {
    server = await startTetherServer(serverOptions);
    proxy = await ChaosProxy.inFrontOf(server.url);
    const cuts = cutOnTraffic(server, proxy, PATCH_CUTS);
    agent = await CodexAgent.start({
      modelBaseUrl: model!.baseUrl,
      ...(await via(proxy.url)),
      unsetEnv: [EXEC_SIDE],
      log: (line) => {
        log.push(line);
        if (log.length > 300) log.shift();
      },
    });
    const dir = workspace();
    dirs.push(dir);
    const threadId = await agent.startThread(dir);
    const before = model!.responses.length;
    const result = await agent.runTurn(threadId, 'apply the fix', 90_000);
    const requests = model!.responses.slice(before);
    const outputs = requests.flatMap((r) => functionCallOutputs(r)).map((o) => outputText(o.output));
    const failures: string[] = [];
    const check = (ok: boolean, what: string) => {
      if (!ok) failures.push(what);
    };
    check(requests.length > 0 && JSON.stringify(requests[0]!.input).includes(MARKER), 'AGENTS.md reached the model');
    check(result.turn.status === 'completed', 'the turn completed');
    check(readFileSync(join(dir, 'fix.txt'), 'utf8') === 'new line\n', 'fix.txt was updated on the host');
    check(existsSync(join(dir, 'added.txt')) && readFileSync(join(dir, 'added.txt'), 'utf8') === 'added content\n', 'added.txt was added on the host');
    check(outputs.some((o) => /Success\. Updated the following files:\s+A added\.txt\s+M fix\.txt/.test(o)), 'the patch reported success');
    check(outputs.some((o) => /new line\nadded content\n/.test(o) && o.includes('Process exited with code 0')), 'the next command saw both files');
    check(outputs.some((o) => o.includes('ran on the exec-server')), 'the commands ran on the exec-server');
    check(!outputs.some((o) => /transport|connection (closed|reset|lost)/i.test(o)), 'no tool call reported a transport error');
    const diagnose = `cuts ${JSON.stringify(cuts)}; outputs ${JSON.stringify(outputs)}; log:\n${log.slice(-40).join('\n')}`;
    return { failures, cuts, diagnose };
  }

  it(`Codex ${CODEX_LATEST} launches an exec-server from environments.toml (program form): tether serve --listen stdio, no cut`, async () => {
    const outcome = await patchTurn(async () => ({
      version: CODEX_LATEST,
      environmentsToml: programEnvironment(['serve', '--listen', 'stdio']),
    }));
    // The server launched on stdio is not the one behind the proxy: nothing crossed the cut.
    expect(outcome.cuts).toEqual([]);
    expect(outcome.failures, outcome.diagnose).toEqual([]);
  });

  it('pointed straight at the server, the same cuts break the patch (the proof this test can fail)', async () => {
    const outcome = await patchTurn(async (proxyUrl) => ({ execServerUrl: proxyUrl }));
    expect(outcome.cuts, outcome.diagnose).toContain("the patch's fs/readFile");
    // Codex's client fails the read in flight ("exec-server transport closed"): the patch never lands.
    expect(outcome.failures, outcome.diagnose).toEqual(expect.arrayContaining(['fix.txt was updated on the host', 'no tool call reported a transport error']));
  });

  it('through tether relay (CODEX_EXEC_SERVER_URL = the relay), every check passes', async () => {
    const outcome = await patchTurn(async (proxyUrl) => {
      const relay = await startRelay(proxyUrl, log);
      stops.push(relay.stop);
      return { execServerUrl: relay.url };
    });
    expect(outcome.cuts, outcome.diagnose).toEqual(PATCH_CUTS.map((c) => c.name));
    expect(outcome.failures, outcome.diagnose).toEqual([]);
  });

  it(`through tether relay launched by Codex ${CODEX_LATEST} (docs/codex.md's environments.toml, stdio), every check passes`, async () => {
    const outcome = await patchTurn(
      async (proxyUrl) => {
        const tokenFile = join(mkdtempSync(join(tmpdir(), 'tether-relay-token-')), 'token');
        dirs.push(dirname(tokenFile));
        writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
        return {
          version: CODEX_LATEST,
          environmentsToml: documentedEnvironmentsToml(proxyUrl, tokenFile),
          // `program = "tether"`, as documented: found on the agent's PATH.
          env: { PATH: `${tetherOnPath(dirs)}:${process.env.PATH ?? '/usr/bin:/bin'}` },
        };
      },
      { token: TOKEN },
    );
    expect(outcome.cuts, outcome.diagnose).toEqual(PATCH_CUTS.map((c) => c.name));
    expect(outcome.failures, outcome.diagnose).toEqual([]);
  });
});

const TOKEN = 'relay-upstream-token-5120';

/**
 * The environments.toml block of docs/codex.md, as written, with this test's server URL and
 * token file in place of the documented ones.
 */
function documentedEnvironmentsToml(url: string, tokenFile: string): string {
  const docs = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'codex.md'), 'utf8');
  const block = /^```\n([^`]*\[\[environments\]\][^`]*)^```$/m.exec(docs)?.[1];
  if (!block) throw new Error('docs/codex.md has no environments.toml block');
  const replaced = block.replace('"wss://box:8765"', JSON.stringify(url)).replace('"/home/me/.config/tether/token"', JSON.stringify(tokenFile));
  if (!replaced.includes(JSON.stringify(url)) || !replaced.includes(JSON.stringify(tokenFile))) throw new Error(`docs/codex.md's block changed:\n${block}`);
  return replaced;
}

/** A directory with a `tether` command in it (this checkout's, as `npm install -g` would put it). */
function tetherOnPath(cleanup: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-bin-'));
  cleanup.push(dir);
  const [script] = tetherArgs([]);
  writeFileSync(join(dir, 'tether'), `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(script)} "$@"\n`, { mode: 0o755 });
  return dir;
}

/**
 * environments.toml (Codex 0.171, read from CODEX_HOME) with one environment that Codex starts
 * as a program speaking the exec-server protocol on stdio, made the default; the agent's own
 * machine is left out, so every tool call goes through it.
 */
function programEnvironment(args: string[]): string {
  const [script, ...rest] = tetherArgs(args);
  return [
    'default = "tether"',
    'include_local = false',
    '',
    '[[environments]]',
    'id = "tether"',
    `program = ${JSON.stringify(process.execPath)}`,
    `args = ${JSON.stringify([script, ...rest])}`,
    `env = { ${EXEC_SIDE} = "the exec-server" }`,
    '',
  ].join('\n');
}
