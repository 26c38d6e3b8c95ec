/**
 * What one MCP server offers (capabilities, server info, tools, resources, resource templates,
 * prompts), discovered after every connection and on its list_changed notifications; and the
 * state hosts set on the server (log level, resource subscriptions), replayed on every new
 * connection. A failed list keeps the last known one.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Implementation, LoggingLevel, ServerCapabilities } from '@modelcontextprotocol/sdk/types.js';
import { errorText } from './errors.js';
import type { Logger, ServerLists } from './types.js';

/** Pages of one list fetched at most: a server that keeps returning cursors cannot loop us forever. */
const MAX_PAGES = 100;

export class Catalog {
  capabilities: ServerCapabilities | null = null;
  serverInfo: Implementation | null = null;
  lists: ServerLists = { tools: [], resources: [], resourceTemplates: [], prompts: [] };
  /** The log level hosts asked for (applied to every connection), or null for the server's default. */
  logLevel: LoggingLevel | null = null;
  /** Resource URIs (the server's own) hosts subscribed to: subscribed again on every connection. */
  readonly subscriptions = new Set<string>();
  /** Lists that differ from what was last announced. */
  private readonly pendingChanges = new Set<keyof ServerLists>();

  constructor(
    private readonly requestTimeoutMs: number,
    private readonly log: Logger,
    private readonly name: string,
  ) {}

  /** Capabilities and lists after (re)connection, then the hosts' state replayed. */
  async discover(client: Client): Promise<void> {
    this.capabilities = client.getServerCapabilities() ?? null;
    this.serverInfo = client.getServerVersion() ?? null;
    await Promise.all([this.fetchList(client, 'tools'), this.fetchList(client, 'resources'), this.fetchList(client, 'resourceTemplates'), this.fetchList(client, 'prompts')]);
    await this.restoreHostState(client);
  }

  /** What hosts asked of the previous connection, asked again of this one (best effort). */
  private async restoreHostState(client: Client): Promise<void> {
    const caps = client.getServerCapabilities();
    const opts = { timeout: this.requestTimeoutMs };
    const work: Promise<unknown>[] = [];
    if (this.logLevel && caps?.logging) work.push(client.setLoggingLevel(this.logLevel, opts));
    if (caps?.resources?.subscribe) for (const uri of this.subscriptions) work.push(client.subscribeResource({ uri }, opts));
    const results = await Promise.allSettled(work);
    for (const r of results) if (r.status === 'rejected') this.log('warn', `[${this.name}] restoring log level / subscriptions: ${errorText(r.reason)}`);
  }

  /** Sets the log level on a live connection (best effort: a failure is logged). */
  async applyLogLevel(client: Client, level: LoggingLevel): Promise<void> {
    if (!client.getServerCapabilities()?.logging) return;
    await client.setLoggingLevel(level, { timeout: this.requestTimeoutMs }).catch((err: unknown) => {
      this.log('warn', `[${this.name}] logging/setLevel ${level}: ${errorText(err)}`);
    });
  }

  /**
   * Keeps `uri` subscribed on every later connection while `send` subscribes on this one; a
   * subscription that fails the first time it is asked is not kept.
   */
  async subscribe(uri: string, send: () => Promise<unknown>): Promise<void> {
    const had = this.subscriptions.has(uri);
    this.subscriptions.add(uri);
    try {
      await send();
    } catch (err) {
      if (!had) this.subscriptions.delete(uri);
      throw err;
    }
  }

  /** One list fetched again (after its list_changed); resources bring their templates. */
  async refresh(client: Client, list: keyof ServerLists): Promise<void> {
    await this.fetchList(client, list);
    // A resource list change can come with new templates too.
    if (list === 'resources') await this.fetchList(client, 'resourceTemplates');
  }

  async fetchList(client: Client, list: keyof ServerLists): Promise<void> {
    const caps = client.getServerCapabilities();
    if (!caps?.[list === 'resourceTemplates' ? 'resources' : list]) {
      this.setList(list, []);
      return;
    }
    const opts = { timeout: this.requestTimeoutMs };
    try {
      const items: unknown[] = [];
      let cursor: string | undefined;
      for (let page = 0; page < MAX_PAGES; page++) {
        const params = cursor ? { cursor } : undefined;
        const res =
          list === 'tools'
            ? await client.listTools(params, opts).then((r) => ({ items: r.tools, next: r.nextCursor }))
            : list === 'resources'
              ? await client.listResources(params, opts).then((r) => ({ items: r.resources, next: r.nextCursor }))
              : list === 'resourceTemplates'
                ? await client.listResourceTemplates(params, opts).then((r) => ({ items: r.resourceTemplates, next: r.nextCursor }))
                : await client.listPrompts(params, opts).then((r) => ({ items: r.prompts, next: r.nextCursor }));
        items.push(...res.items);
        cursor = res.next;
        if (!cursor) break;
      }
      this.setList(list, items as never[]);
    } catch (err) {
      this.log('warn', `[${this.name}] ${list}/list failed, keeping the last known ${list}: ${errorText(err)}`);
    }
  }

  private setList(list: keyof ServerLists, items: never[]): void {
    if (JSON.stringify(items) !== JSON.stringify(this.lists[list])) this.pendingChanges.add(list);
    this.lists = { ...this.lists, [list]: items };
  }

  /** The lists that changed since last taken (to announce), oldest change first. */
  takeChanges(): (keyof ServerLists)[] {
    const changed = [...this.pendingChanges];
    this.pendingChanges.clear();
    return changed;
  }
}
