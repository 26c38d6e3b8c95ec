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
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeModel, functionCallOutputs, outputText, runUserCommandScript } from './helpers/fake-model.js';
import { CodexAgent, type TurnResult } from './helpers/codex-agent.js';
import { ChaosProxy } from './helpers/chaos-proxy.js';
import { startCodexServer } from './helpers/codex.js';
import { startTetherServer } from './helpers/tether.js';
import type { Target } from './helpers/target.js';

/**
 * Set only in this process (so in the exec-servers' environments, which Codex's `envPolicy
 * inherit: "all"` passes to the command) and removed from the app-server's: a command that
 * prints it proves it ran on the exec-server, not locally inside the agent.
 */
const EXEC_SIDE_MARKER = 'TETHER_EXEC_SIDE';
const sideProbe = `\${${EXEC_SIDE_MARKER}:-agent-local}`;

/** How long the link stays down in the cut test: long enough for the command to finish meanwhile. */
const OUTAGE_MS = 1_500;

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
  const log: string[] = [];

  beforeAll(async () => {
    process.env[EXEC_SIDE_MARKER] = 'exec-server';
    server = await start();
    proxy = await ChaosProxy.start({ targetPort: Number(new URL(server.url).port) });
    model = await FakeModel.start(runUserCommandScript());
    agent = await CodexAgent.start({
      execServerUrl: proxy.url,
      modelBaseUrl: model.baseUrl,
      unsetEnv: [EXEC_SIDE_MARKER],
      log: (line) => {
        log.push(line);
        if (log.length > 200) log.shift();
      },
    });
    threadId = await agent.startThread(process.cwd());
  });

  afterAll(async () => {
    await agent?.stop();
    await proxy?.close();
    await model?.close();
    await server?.stop();
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
});
