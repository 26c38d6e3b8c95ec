/**
 * Resource URIs through the gateway. A URI is shown unchanged, so links a server returns in
 * tool results (resource_link, embedded resources) stay valid for the host. Only when two
 * servers offer the same URI (or URI template) does the later one in the config get a
 * prefixed URI, `tether-gateway://<server>/<its URI>`; the first keeps the plain one. The
 * order is the config's, and a server that is down keeps its last known list, so an exposed
 * URI does not change while servers come and go.
 */
import type { Resource, ResourceTemplate } from '@modelcontextprotocol/sdk/types.js';
import { UriTemplate } from '@modelcontextprotocol/sdk/shared/uriTemplate.js';

export const GATEWAY_URI_PREFIX = 'tether-gateway://';

export interface ResourceSource {
  name: string;
  resources: Resource[];
  resourceTemplates: ResourceTemplate[];
  /** The server said it has resources (or, not connected yet, may have). */
  offersResources: boolean;
}

export function prefixedUri(server: string, uri: string): string {
  return `${GATEWAY_URI_PREFIX}${server}/${uri}`;
}

/** The exposed lists and the way back from an exposed URI to (server, its URI). */
export class ResourceIndex {
  readonly resources: Resource[] = [];
  readonly templates: ResourceTemplate[] = [];
  /** plain URI → owner */
  private readonly plainOwner = new Map<string, string>();
  /** plain template → owner */
  private readonly templateOwner = new Map<string, string>();
  private readonly sources: ResourceSource[];

  constructor(sources: ResourceSource[]) {
    this.sources = sources;
    for (const s of sources) {
      for (const r of s.resources) {
        const owner = this.plainOwner.get(r.uri);
        if (owner === undefined) this.plainOwner.set(r.uri, s.name);
        this.resources.push(owner === undefined || owner === s.name ? r : { ...r, uri: prefixedUri(s.name, r.uri) });
      }
      for (const t of s.resourceTemplates) {
        const owner = this.templateOwner.get(t.uriTemplate);
        if (owner === undefined) this.templateOwner.set(t.uriTemplate, s.name);
        this.templates.push(owner === undefined || owner === s.name ? t : { ...t, uriTemplate: prefixedUri(s.name, t.uriTemplate) });
      }
    }
  }

  /** The URI a host sees for `server`'s `uri`. */
  exposed(server: string, uri: string): string {
    const owner = this.plainOwner.get(uri);
    if (owner === undefined || owner === server) {
      // Not listed (a template instance, a session resource): plain unless another server
      // claims it through a listed resource or a matching template first.
      const templateOwner = owner === undefined ? this.templateMatch(uri)?.name : undefined;
      return templateOwner === undefined || templateOwner === server ? uri : prefixedUri(server, uri);
    }
    return prefixedUri(server, uri);
  }

  /**
   * Which server an exposed URI belongs to: a prefixed URI names it; a plain one is looked up
   * among the listed resources, then the templates, then it goes to the only server that
   * offers resources. undefined when nobody can be named.
   */
  resolve(uri: string, known: (name: string) => boolean): { server: string; uri: string } | undefined {
    if (uri.startsWith(GATEWAY_URI_PREFIX)) {
      const rest = uri.slice(GATEWAY_URI_PREFIX.length);
      const slash = rest.indexOf('/');
      if (slash > 0 && known(rest.slice(0, slash))) return { server: rest.slice(0, slash), uri: rest.slice(slash + 1) };
      return undefined;
    }
    // A listed URI, a listed template itself (completion/complete names one), an instance of one.
    const owner = this.plainOwner.get(uri) ?? this.templateOwner.get(uri) ?? this.templateMatch(uri)?.name;
    if (owner !== undefined) return { server: owner, uri };
    const offering = this.sources.filter((s) => s.offersResources);
    return offering.length === 1 ? { server: offering[0]!.name, uri } : undefined;
  }

  /** The first server (config order) whose own template matches. */
  private templateMatch(uri: string): ResourceSource | undefined {
    for (const s of this.sources) {
      for (const t of s.resourceTemplates) {
        try {
          if (new UriTemplate(t.uriTemplate).match(uri)) return s;
        } catch {
          // a template the SDK cannot parse matches nothing
        }
      }
    }
    return undefined;
  }
}
