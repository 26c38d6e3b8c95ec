/**
 * The real Codex agent (0.169 `codex app-server`) as a client: its executor runs on the
 * exec-server named by CODEX_EXEC_SERVER_URL, the model is a scripted fake on loopback that
 * asks for one shell command and reads back the `function_call_output`. The command's output
 * and exit code must come back through the exec-server, also when the link is cut for a
 * second and a half in the middle of the command (the agent reconnects with
 * `resumeSessionId` and catches up with `process/read`).
 *
 * Runs against tether, and against Codex's own exec-server as the control that validates
 * the harness. Every link goes through the chaos proxy so both runs are alike.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assistantMessage,
  FakeModel,
  functionCall,
  functionCallOutputs,
  lastUserText,
  outputsThisTurn,
  outputText,
  runUserCommandScript,
  type ResponseItem,
  type ResponsesRequest,
} from '../helpers/fake-model.js';
import { CodexAgent, type TurnResult } from '../helpers/codex-agent.js';
import { ChaosProxy } from '../../src/chaos/proxy.js';
import { startCodexServer } from '../helpers/codex.js';
import { startTetherServer } from '../helpers/tether.js';
import type { Target } from '../helpers/target.js';

/**
 * Set only in this process (so in the exec-servers' environments, which Codex's `envPolicy
 * inherit: "all"` passes to the command) and removed from the app-server's: a command that
 * prints it proves it ran on the exec-server, not locally inside the agent.
 */
const EXEC_SIDE_MARKER = 'TETHER_EXEC_SIDE';
const sideProbe = `\${${EXEC_SIDE_MARKER}:-agent-local}`;

/** How long the link stays down in the cut test: long enough for the command to finish meanwhile. */
const OUTAGE_MS = 1_500;

/**
 * An interactive turn: a line-echo loop on a PTY (exec_command tty), a line written to it with
 * write_stdin (process/write on the exec-server), then Ctrl-D so the loop ends and exits 0.
 * (A shell loop rather than `cat`: GNU cat closes its terminal before exiting, a separate
 * case with its own test below.)
 */
const INTERACTIVE_PROMPT = 'interactive: echo loop on a tty';
const ECHO_LOOP = 'while IFS= read -r line; do printf "%s\\n" "$line"; done';
const INTERACTIVE_LINE = 'ping-from-model';

function interactiveStep(request: ResponsesRequest): ResponseItem[] {
  const outputs = outputsThisTurn(request);
  if (outputs.length === 0) return [functionCall('exec_command', { cmd: ECHO_LOOP, tty: true, yield_time_ms: 500 })];
  const first = outputText(outputs[0]!.output);
  const sessionId = /session ID (\d+)/i.exec(first)?.[1];
  if (sessionId === undefined) return [assistantMessage(`no running session in the first output: ${first}`)];
  const session_id = Number(sessionId);
  if (outputs.length === 1) return [functionCall('write_stdin', { session_id, chars: `${INTERACTIVE_LINE}\n`, yield_time_ms: 1_000 })];
  if (outputs.length === 2) return [functionCall('write_stdin', { session_id, chars: '\u0004', yield_time_ms: 5_000 })];
  return [assistantMessage('interactive session finished')];
}

/** Prompts starting with this run the rest of the prompt on a PTY (exec_command tty: true). */
const TTY_PREFIX = 'tty: ';

function ttyCommandStep(request: ResponsesRequest): ResponseItem[] {
  if (outputsThisTurn(request).length > 0) return [assistantMessage('command finished')];
  return [functionCall('exec_command', { cmd: lastUserText(request).slice(TTY_PREFIX.length), tty: true, yield_time_ms: 20_000 })];
}

const runCommandStep = runUserCommandScript();
const modelScript = (request: ResponsesRequest, index: number): ResponseItem[] =>
  lastUserText(request) === INTERACTIVE_PROMPT
    ? interactiveStep(request)
    : lastUserText(request).startsWith(TTY_PREFIX)
      ? ttyCommandStep(request)
      : runCommandStep(request, index);

const servers: Array<{ name: string; start: () => Promise<Target> }> = [
  { name: 'tether', start: () => startTetherServer({}) },
  // Control: Codex's own exec-server; proves the harness measures the agent, not tether.
  { name: 'the Codex exec-server (control)', start: () => startCodexServer({}) },
];

describe.each(servers)('the real Codex agent runs commands through $name', ({ start }) => {
  let server: Target | undefined;
  let proxy: ChaosProxy | undefined;
  let model: FakeModel | undefined;
  let agent: CodexAgent | undefined;
  let threadId = '';
  let workdir = '';
  const log: string[] = [];

  beforeAll(async () => {
    process.env[EXEC_SIDE_MARKER] = 'exec-server';
    server = await start();
    proxy = await ChaosProxy.inFrontOf(server.url);
    model = await FakeModel.start(modelScript);
    agent = await CodexAgent.start({
      execServerUrl: proxy.url,
      modelBaseUrl: model.baseUrl,
      unsetEnv: [EXEC_SIDE_MARKER],
      log: (line) => {
        log.push(line);
        if (log.length > 200) log.shift();
      },
    });
    // An empty working directory: no repository, AGENTS.md or skills for the agent to pick up.
    workdir = mkdtempSync(join(tmpdir(), 'tether-agent-cwd-'));
    threadId = await agent.startThread(workdir);
  });

  afterAll(async () => {
    await agent?.stop();
    await proxy?.close();
    await model?.close();
    await server?.stop();
    if (workdir) rmSync(workdir, { recursive: true, force: true });
    delete process.env[EXEC_SIDE_MARKER];
  });

  /** Runs one turn and returns what the model was told the command printed. */
  async function runCommand(command: string): Promise<{ result: TurnResult; toolOutput: string }> {
    const before = model!.responses.length;
    const result = await agent!.runTurn(threadId, command, 45_000);
    expect(result.commandExecutions).toHaveLength(1);
    // The app-server names the command item after the model's call id.
    const callId = result.commandExecutions[0]!.id;
    const outputs = model!.responses
      .slice(before)
      .flatMap((request) => functionCallOutputs(request))
      .filter((output) => output.call_id === callId);
    if (outputs.length === 0) {
      throw new Error(
        `the model never received the output of ${callId}; turn ${JSON.stringify(result.turn)}; ` +
          `model requests ${JSON.stringify(model!.requests.map((r) => `${r.method} ${r.path}`))}; log:\n${log.join('\n')}`,
      );
    }
    return { result, toolOutput: outputText(outputs[0]!.output) };
  }

  it('returns a command’s stdout, stderr and exit code to the model', async () => {
    const { result, toolOutput } = await runCommand(`echo "out side=${sideProbe}"; echo err-line >&2; exit 3`);

    expect(result.turn.status).toBe('completed');
    expect(toolOutput).toContain('Process exited with code 3');
    expect(toolOutput).toContain('out side=exec-server');
    expect(toolOutput).toContain('err-line');
    const [command] = result.commandExecutions;
    expect(command?.exitCode).toBe(3);
    expect(command?.aggregatedOutput).toContain('out side=exec-server');
    expect(agent!.serverRequests).toEqual([]);
  });

  it('returns every line and the exit code when the link is cut for 1.5 s mid-command', async () => {
    const connectionsBefore = proxy!.activeConnections;
    expect(connectionsBefore).toBeGreaterThan(0); // the agent holds its exec-server link open
    let cutAt = 0;
    let reconnectedAt = 0;
    const onConnection = (): void => {
      if (cutAt > 0 && reconnectedAt === 0) reconnectedAt = Date.now();
    };
    proxy!.on('connection', onConnection);

    // Cut as soon as the agent reports the command running; it prints "done" and exits while
    // the link is down, so both can only reach the agent through the resume + process/read.
    const cutDone = agent!
      .waitForNotification((n) => n.method === 'item/started' && n.params?.item?.type === 'commandExecution', 30_000, agent!.notifications.length)
      .then(async () => {
        // Down for OUTAGE_MS: live connections reset, new ones refused (host unreachable).
        proxy!.refuse(true);
        proxy!.cutAll();
        cutAt = Date.now();
        await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS));
        proxy!.refuse(false);
      });
    const { result, toolOutput } = await runCommand(`echo "start side=${sideProbe}"; sleep 1; echo done; exit 3`);
    await cutDone;
    proxy!.off('connection', onConnection);

    expect(cutAt).toBeGreaterThan(0);
    expect(reconnectedAt).toBeGreaterThanOrEqual(cutAt + OUTAGE_MS - 50); // the cut really separated them
    expect(result.turn.status).toBe('completed');
    expect(toolOutput).toContain('Process exited with code 3');
    expect(toolOutput.match(/start side=exec-server/g)).toHaveLength(1);
    expect(toolOutput.match(/^done$/gm)).toHaveLength(1);
    const [command] = result.commandExecutions;
    expect(command?.exitCode).toBe(3);
    expect(command?.aggregatedOutput).toBe('start side=exec-server\ndone\n');
  });

  it('drives an interactive PTY command with write_stdin (process/write) to a clean exit', async () => {
    const before = model!.responses.length;
    const result = await agent!.runTurn(threadId, INTERACTIVE_PROMPT, 45_000);
    const last = model!.responses[model!.responses.length - 1]!;
    expect(model!.responses.length).toBeGreaterThan(before);
    const outputs = outputsThisTurn(last).map((output) => outputText(output.output));
    expect(outputs, `tool outputs: ${JSON.stringify(outputs)}`).toHaveLength(3);
    expect(outputs[0]).toMatch(/session ID \d+/i); // the loop is still running after 500 ms
    // Written through process/write: the terminal echoes it and the loop prints it, both as CRLF.
    expect(outputs[1]!.match(new RegExp(`${INTERACTIVE_LINE}\r\n`, 'g'))).toHaveLength(2);
    expect(outputs[2], JSON.stringify(outputs)).toContain('Process exited with code 0');
    expect(result.turn.status).toBe('completed');
    const [command] = result.commandExecutions;
    expect(command?.exitCode).toBe(0);
  });

  it('delivers a write_stdin issued while the link is down exactly once, after the resume', async () => {
    const before = model!.responses.length;
    let cutAt = 0;
    let connectionsCut = 0;
    let reconnectedAt = 0;
    // The model's second request carries "cat is running, session N"; its answer is the
    // write_stdin. Cutting as that request arrives puts the write inside the outage.
    const onModelRequest = (): void => {
      if (model!.responses.length !== before + 2 || cutAt !== 0) return;
      proxy!.refuse(true);
      connectionsCut = proxy!.cutAll();
      cutAt = Date.now();
      setTimeout(() => proxy!.refuse(false), OUTAGE_MS);
    };
    const onConnection = (): void => {
      if (cutAt > 0 && reconnectedAt === 0) reconnectedAt = Date.now();
    };
    model!.on('responses', onModelRequest);
    proxy!.on('connection', onConnection);
    const result = await agent!.runTurn(threadId, INTERACTIVE_PROMPT, 45_000).finally(() => {
      model!.off('responses', onModelRequest);
      proxy!.off('connection', onConnection);
    });

    expect(connectionsCut).toBeGreaterThan(0);
    expect(reconnectedAt).toBeGreaterThanOrEqual(cutAt + OUTAGE_MS - 50);
    const last = model!.responses[model!.responses.length - 1]!;
    const outputs = outputsThisTurn(last).map((output) => outputText(output.output));
    expect(outputs, `tool outputs: ${JSON.stringify(outputs)}`).toHaveLength(3);
    // Once: a re-sent write (same writeId) must not reach the loop twice.
    expect(outputs[1]!.match(new RegExp(`${INTERACTIVE_LINE}\r\n`, 'g'))).toHaveLength(2);
    expect(outputs[2], JSON.stringify(outputs)).toContain('Process exited with code 0');
    expect(result.commandExecutions[0]?.exitCode).toBe(0);
  });

  /**
   * GNU cat (and other programs that read stdin) close all three terminal descriptors before
   * they exit. If the server closes the PTY master as soon as it reads EOF/EIO there, the
   * kernel hangs the terminal up while the program is still alive and it dies of SIGHUP
   * (exit 129) instead of exiting 0. This program makes that window 200 ms wide.
   */
  it('reports the own exit code of a PTY command that closes its terminal before exiting', async () => {
    const closesTerminalFirst = `perl -e 'print "bye\\n"; close STDIN; close STDOUT; close STDERR; select(undef, undef, undef, 0.2); exit 0'`;
    const { result, toolOutput } = await runCommand(`${TTY_PREFIX}${closesTerminalFirst}`);
    expect(toolOutput).toContain('bye');
    expect(toolOutput).toContain('Process exited with code 0');
    expect(result.commandExecutions[0]?.exitCode).toBe(0);
  });
});
