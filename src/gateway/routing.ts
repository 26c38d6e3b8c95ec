/**
 * Names between the aggregate and its servers: each server's tools and prompts listed as
 * `<server>__<name>`, its resources under the URIs the resource index exposes, and back
 * from an aggregated name or URI to the server and the name it knows.
 */
import { ErrorCode, type Prompt, type Resource, type ResourceTemplate, type Tool } from '@modelcontextprotocol/sdk/types.js';
import type { ServerSupervisor } from '../supervisor/index.js';
import { managementTools } from './management-tools.js';
import { ResourceIndex } from './resources.js';
import { rpcError } from './rpc-errors.js';

/** `<server>__<tool>` (and `<server>__<prompt>`): the aggregate's name for a server's tool. */
export const TOOL_SEPARATOR = '__';

export function aggregateToolName(server: string, tool: string): string {
  return `${server}${TOOL_SEPARATOR}${tool}`;
}

export class Router {
  /** The registry's supervisors, in the config's order. */
  constructor(private readonly supervisors: ReadonlyMap<string, ServerSupervisor>) {}

  /** Management tools first, then every server's last known tools, prefixed. */
  tools(): Tool[] {
    return [...managementTools, ...this.prefixed((s) => s.tools)];
  }

  /** Every server's last known prompts, named `<server>__<prompt>`. */
  prompts(): Prompt[] {
    return this.prefixed((s) => s.prompts);
  }

  resources(): Resource[] {
    return this.resourceIndex().resources;
  }

  resourceTemplates(): ResourceTemplate[] {
    return this.resourceIndex().templates;
  }

  /** The URI hosts know a server's resource by. */
  exposedUri(server: string, uri: string): string {
    return this.resourceIndex().exposed(server, uri);
  }

  /** 'a, b' or 'none': the servers, for a message. */
  serverList(): string {
    return [...this.supervisors.keys()].join(', ') || 'none';
  }

  private prefixed<T extends { name: string }>(items: (s: ServerSupervisor) => T[]): T[] {
    const out: T[] = [];
    const seen = new Set(managementTools.map((t) => t.name));
    for (const s of this.supervisors.values()) {
      for (const item of items(s)) {
        const name = aggregateToolName(s.name, item.name);
        // Two servers can only collide through odd names (a + _x vs a_ + x): first one wins.
        if (seen.has(name)) continue;
        seen.add(name);
        out.push({ ...item, name });
      }
    }
    return out;
  }

  private resourceIndex(): ResourceIndex {
    return new ResourceIndex(
      [...this.supervisors.values()].map((s) => ({
        name: s.name,
        resources: s.resources,
        resourceTemplates: s.resourceTemplates,
        offersResources: s.serverCapabilities ? Boolean(s.serverCapabilities.resources) : true,
      })),
    );
  }

  /**
   * Which server and name an aggregated name stands for: a listed item first (names like
   * `a___x` could split two ways), else the longest server-name prefix (a server whose list
   * is not known yet still gets the request, and with it an immediate connection attempt).
   */
  resolveTool(name: string): { server: ServerSupervisor; tool: string } | undefined {
    const r = this.resolveName(name, (s) => s.tools);
    return r && { server: r.server, tool: r.name };
  }

  resolvePrompt(name: string): { server: ServerSupervisor; name: string } | undefined {
    return this.resolveName(name, (s) => s.prompts);
  }

  private resolveName(name: string, items: (s: ServerSupervisor) => { name: string }[]): { server: ServerSupervisor; name: string } | undefined {
    for (const s of this.supervisors.values()) {
      const prefix = s.name + TOOL_SEPARATOR;
      if (name.startsWith(prefix) && items(s).some((t) => t.name === name.slice(prefix.length))) return { server: s, name: name.slice(prefix.length) };
    }
    const candidates = [...this.supervisors.values()].filter((s) => name.startsWith(s.name + TOOL_SEPARATOR));
    const best = candidates.sort((a, b) => b.name.length - a.name.length)[0];
    return best ? { server: best, name: name.slice(best.name.length + TOOL_SEPARATOR.length) } : undefined;
  }

  /** The server behind an exposed resource URI (or a template's match); an unknown one is -32602. */
  resolveResource(uri: string): { server: ServerSupervisor; uri: string } {
    const r = this.resourceIndex().resolve(uri, (name) => this.supervisors.has(name));
    if (!r) throw rpcError(ErrorCode.InvalidParams, `unknown resource '${uri}': no server behind this gateway lists it or a template that matches it`);
    return { server: this.supervisors.get(r.server)!, uri: r.uri };
  }
}
