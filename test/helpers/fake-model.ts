/**
 * A scripted stand-in for the OpenAI Responses API on loopback, so the real Codex agent can
 * run a turn with no login and no network. Each `POST …/responses` is answered by the next
 * step of the script with server-sent events; every request body is recorded so a test can
 * read what Codex sent back (tool list, `function_call_output`, …).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { EventEmitter } from 'node:events';

/** One item of the Responses API `input`/`output` arrays (only the fields we look at). */
export interface ResponseItem {
  type: string;
  [key: string]: unknown;
}

export interface ResponsesRequest {
  model?: string;
  input: ResponseItem[];
  tools?: Array<{ type: string; name?: string; parameters?: unknown; [key: string]: unknown }>;
  [key: string]: unknown;
}

/** A scripted answer: the output items of one model response. */
export type ScriptStep = (request: ResponsesRequest, index: number) => ResponseItem[];

export interface RecordedRequest {
  method: string;
  path: string;
  body: unknown;
}

export function functionCall(name: string, args: object, callId = `call_${Math.random().toString(36).slice(2, 10)}`): ResponseItem {
  return { type: 'function_call', id: `fc_${callId}`, call_id: callId, name, arguments: JSON.stringify(args) };
}

export function assistantMessage(text: string): ResponseItem {
  return {
    type: 'message',
    id: `msg_${Math.random().toString(36).slice(2, 10)}`,
    role: 'assistant',
    status: 'completed',
    content: [{ type: 'output_text', text, annotations: [] }],
  };
}

/** The `function_call_output` items a request carries (what the tool returned to the model). */
export function functionCallOutputs(request: ResponsesRequest): Array<{ call_id: string; output: unknown }> {
  return request.input
    .filter((item) => item.type === 'function_call_output')
    .map((item) => ({ call_id: String(item.call_id), output: item.output }));
}

/** Text of a `function_call_output` whose output is a string or a list of text parts. */
export function outputText(output: unknown): string {
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) {
    return output.map((part) => (part && typeof part === 'object' && 'text' in part ? String(part.text) : '')).join('');
  }
  if (output && typeof output === 'object' && 'content' in output) return outputText((output as { content: unknown }).content);
  return JSON.stringify(output);
}

/** The shell tool Codex offers (`exec_command {cmd}` in 0.169), found by its argument shape. */
export function findShellTool(request: ResponsesRequest): { name: string; commandArg: string; properties: Record<string, unknown> } | undefined {
  const candidates = (request.tools ?? []).filter((tool) => tool.type === 'function' && typeof tool.name === 'string');
  const shaped = candidates.map((tool) => {
    const properties = ((tool.parameters as { properties?: Record<string, unknown> } | undefined)?.properties ?? {}) as Record<string, unknown>;
    const commandArg = ['cmd', 'command'].find((arg) => arg in properties);
    return { name: tool.name!, commandArg, properties };
  });
  const preferred = shaped.find((tool) => tool.name === 'exec_command' && tool.commandArg) ?? shaped.find((tool) => tool.commandArg);
  return preferred?.commandArg ? { name: preferred.name, commandArg: preferred.commandArg, properties: preferred.properties } : undefined;
}

/** Text of the latest user message (the turn's prompt). */
export function lastUserText(request: ResponsesRequest): string {
  for (let i = request.input.length - 1; i >= 0; i--) {
    const item = request.input[i]!;
    if (item.type === 'message' && item.role === 'user' && Array.isArray(item.content)) {
      return (item.content as Array<{ text?: string }>).map((part) => part.text ?? '').join('');
    }
  }
  return '';
}

/** `function_call_output` items after the latest user message: the tool results of this turn so far. */
export function outputsThisTurn(request: ResponsesRequest): Array<{ call_id: string; output: unknown }> {
  let start = 0;
  request.input.forEach((item, index) => {
    if (item.type === 'message' && item.role === 'user') start = index;
  });
  return functionCallOutputs({ ...request, input: request.input.slice(start) });
}

/**
 * A model that runs the user's message as one shell command: the first request of a turn gets a
 * `function_call` to the shell tool with the message text as the command; once the request
 * carries that call's output, the model answers with a final message.
 */
export function runUserCommandScript(options: { yieldTimeMs?: number } = {}): ScriptStep {
  return (request) => {
    const last = request.input[request.input.length - 1];
    if (last?.type === 'function_call_output') return [assistantMessage('command finished')];
    const tool = findShellTool(request);
    if (!tool) {
      return [assistantMessage(`fake model: no shell tool among ${JSON.stringify((request.tools ?? []).map((t) => t.name))}`)];
    }
    const args: Record<string, unknown> = { [tool.commandArg]: lastUserText(request) };
    // Wait for the exit instead of yielding a still-running session back to the model.
    if ('yield_time_ms' in tool.properties) args.yield_time_ms = options.yieldTimeMs ?? 20_000;
    return [functionCall(tool.name, args)];
  };
}

export class FakeModel extends EventEmitter {
  /** Every `POST …/responses` body, in arrival order. */
  readonly responses: ResponsesRequest[] = [];
  /** Every HTTP request, including ones the fake does not answer (for diagnosis). */
  readonly requests: RecordedRequest[] = [];
  private responseCounter = 0;

  private constructor(
    private readonly server: Server,
    private readonly script: ScriptStep[] | ScriptStep,
    readonly baseUrl: string,
  ) {
    super();
  }

  /** Listens on 127.0.0.1 (any free port). `baseUrl` ends in `/v1`. */
  static async start(script: ScriptStep[] | ScriptStep): Promise<FakeModel> {
    let model: FakeModel | undefined;
    const server = createServer((req, res) => {
      model!.handle(req, res).catch((error: unknown) => {
        if (!res.headersSent) res.writeHead(500);
        res.end(String(error));
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    model = new FakeModel(server, script, `http://127.0.0.1:${port}/v1`);
    return model;
  }

  /** Resolves with the n-th (0-based) `/responses` request once it has arrived. */
  waitForResponseRequest(n: number): Promise<ResponsesRequest> {
    if (this.responses.length > n) return Promise.resolve(this.responses[n]!);
    return new Promise((resolve) => {
      const onRequest = (): void => {
        if (this.responses.length > n) {
          this.off('responses', onRequest);
          resolve(this.responses[n]!);
        }
      };
      this.on('responses', onRequest);
    });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body: unknown = raw;
    try {
      body = raw.length > 0 ? JSON.parse(raw) : undefined;
    } catch {
      // Codex may compress request bodies; record the raw text and let the test report it.
    }
    const path = (req.url ?? '/').split('?')[0]!;
    this.requests.push({ method: req.method ?? 'GET', path, body });
    this.emit('request', { method: req.method, path, body });

    if (req.method === 'POST' && path.endsWith('/responses')) {
      const request = body as ResponsesRequest;
      const index = this.responses.length;
      this.responses.push(request);
      this.emit('responses', request);
      const step = typeof this.script === 'function' ? this.script : this.script[Math.min(index, this.script.length - 1)];
      const items = step ? step(request, index) : [assistantMessage('done')];
      this.streamResponse(res, items);
      return;
    }
    if (req.method === 'GET' && path.endsWith('/models')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [], models: [] }));
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message: `fake model: no route for ${req.method} ${path}` } }));
  }

  private streamResponse(res: ServerResponse, items: ResponseItem[]): void {
    const id = `resp_${++this.responseCounter}`;
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const send = (type: string, data: object): void => {
      res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
    };
    send('response.created', { response: { id, object: 'response', status: 'in_progress', output: [] } });
    items.forEach((item, outputIndex) => send('response.output_item.done', { output_index: outputIndex, item }));
    send('response.completed', {
      response: {
        id,
        object: 'response',
        status: 'completed',
        output: items,
        usage: {
          input_tokens: 10,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: 5,
          output_tokens_details: { reasoning_tokens: 0 },
          total_tokens: 15,
        },
      },
    });
    res.end();
  }
}
