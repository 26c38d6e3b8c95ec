/**
 * The real Codex agent (0.169 `codex app-server`) working on a workspace that lives on the
 * exec-server's host (extends codex-agent.interop.test.ts, same helpers): its AGENTS.md must
 * reach the model (fs/getMetadata, fs/readFile), an `apply_patch` that updates one file and
 * adds another must change the host (fs/readFile, fs/writeFile), and the next command must
 * see both. Once on a good link, once with the link cut in the middle of the turn.
 *
 * Runs against tether, and against Codex's own exec-server as the control.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assistantMessage, FakeModel, functionCall, functionCallOutputs, outputsThisTurn, outputText, type ResponseItem, type ResponsesRequest } from '../helpers/fake-model.js';
import { CodexAgent } from '../helpers/codex-agent.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { startCodexServer } from '../helpers/codex.js';
import { startTetherServer } from '../helpers/tether.js';
import type { Target } from '../helpers/target.js';

const MARKER = 'AGENTS-MARKER-4821';
const PATCH = ['*** Begin Patch', '*** Update File: fix.txt', '@@', '-old line', '+new line', '*** Add File: added.txt', '+added content', '*** End Patch', ''].join('\n');
const OUTAGE_MS = 1_500;

/** The model: apply the patch (the shell tool's apply_patch form), then print both files, then finish. */
function script(request: ResponsesRequest): ResponseItem[] {
  const outputs = outputsThisTurn(request);
  if (outputs.length === 0) return [functionCall('exec_command', { cmd: `apply_patch <<'EOF'\n${PATCH}EOF\n`, yield_time_ms: 10_000 })];
  if (outputs.length === 1) return [functionCall('exec_command', { cmd: 'cat fix.txt added.txt', yield_time_ms: 20_000 })];
  return [assistantMessage('patched')];
}

function workspace(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-agent-ws-'));
  writeFileSync(join(dir, 'AGENTS.md'), `# Project rules\n${MARKER}: keep lines short.\n`);
  writeFileSync(join(dir, 'fix.txt'), 'old line\n');
  return dir;
}

const servers: Array<{ name: string; start: () => Promise<Target> }> = [
  { name: 'tether', start: () => startTetherServer({}) },
  { name: 'the Codex exec-server (control)', start: () => startCodexServer({}) },
];

describe.each(servers)('the real Codex agent edits a workspace on $name', ({ start }) => {
  let server: Target | undefined;
  let proxy: ChaosProxy | undefined;
  let model: FakeModel | undefined;
  let agent: CodexAgent | undefined;
  const dirs: string[] = [];
  const log: string[] = [];

  beforeAll(async () => {
    server = await start();
    proxy = await ChaosProxy.inFrontOf(server.url);
    model = await FakeModel.start(script);
    agent = await CodexAgent.start({
      execServerUrl: proxy.url,
      modelBaseUrl: model.baseUrl,
      log: (line) => {
        log.push(line);
        if (log.length > 200) log.shift();
      },
    });
  });

  afterAll(async () => {
    await agent?.stop();
    await proxy?.close();
    await model?.close();
    await server?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  /** One turn in a fresh workspace; `duringTurn` runs when the model gets its first request. */
  async function patchTurn(duringTurn?: () => void) {
    const dir = workspace();
    dirs.push(dir);
    const threadId = await agent!.startThread(dir);
    const before = model!.responses.length;
    const onRequest = () => {
      if (model!.responses.length === before + 1) duringTurn?.();
    };
    model!.on('responses', onRequest);
    const result = await agent!.runTurn(threadId, 'apply the fix', 60_000).finally(() => model!.off('responses', onRequest));
    const requests = model!.responses.slice(before);
    const outputs = requests.flatMap((r) => functionCallOutputs(r)).map((o) => outputText(o.output));
    const diagnose = () => `outputs ${JSON.stringify(outputs)}; log:\n${log.slice(-30).join('\n')}`;
    return { dir, result, requests, outputs, diagnose };
  }

  function expectPatched({ dir, result, requests, outputs, diagnose }: Awaited<ReturnType<typeof patchTurn>>): void {
    // AGENTS.md of the remote workspace reached the model with the first request.
    expect(JSON.stringify(requests[0]!.input), 'AGENTS.md never reached the model').toContain(MARKER);
    expect(result.turn.status, diagnose()).toBe('completed');
    // The patch changed the host...
    expect(readFileSync(join(dir, 'fix.txt'), 'utf8'), diagnose()).toBe('new line\n');
    expect(existsSync(join(dir, 'added.txt')), diagnose()).toBe(true);
    expect(readFileSync(join(dir, 'added.txt'), 'utf8')).toBe('added content\n');
    // ...the agent reported it, and the next command saw both files.
    const last = [...new Set(outputs)];
    expect(last.some((o) => /Success\. Updated the following files:\s+A added\.txt\s+M fix\.txt/.test(o)), diagnose()).toBe(true);
    const cat = outputs.find((o) => o.includes('Process exited with code'));
    expect(cat, diagnose()).toMatch(/new line\nadded content\n/);
    expect(cat).toContain('Process exited with code 0');
  }

  it('reads AGENTS.md, applies the patch on the host, and the next command sees both files', async () => {
    expectPatched(await patchTurn());
  });

  it('does the same when the link is cut for 1.5 s in the middle of the turn', async () => {
    let cutAt = 0;
    let reconnectedAt = 0;
    const onConnection = () => {
      if (cutAt > 0 && reconnectedAt === 0) reconnectedAt = Date.now();
    };
    proxy!.on('connection', onConnection);
    // Cut as the model is asked for its first step: the patch's fs calls come during the outage.
    const turn = await patchTurn(() => {
      proxy!.refuse(true);
      proxy!.cutAll();
      cutAt = Date.now();
      setTimeout(() => proxy!.refuse(false), OUTAGE_MS);
    }).finally(() => proxy!.off('connection', onConnection));
    expect(cutAt).toBeGreaterThan(0);
    expect(reconnectedAt).toBeGreaterThanOrEqual(cutAt + OUTAGE_MS - 50);
    expectPatched(turn);
  });
});
