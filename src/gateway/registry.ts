/**
 * The servers a gateway runs: one supervisor per config entry, in the config's order (it
 * decides which server keeps a shared resource URI), and the reload of a new config (SIGHUP,
 * a changed file): entries added are created, entries removed are stopped, entries whose
 * spec or supervisor options changed are stopped and created again, the others are kept.
 */
import { ServerSupervisor, type Logger, type SupervisorHooks, type TransportFactory } from '../supervisor/index.js';
import type { GatewayConfig, GatewayServerConfig } from './config.js';

export interface RegistryOptions {
  logger: Logger;
  transportFactory?: TransportFactory;
  random?: () => number;
  /** Where every server's own requests and notifications go. */
  hooks: SupervisorHooks;
  /** A supervisor was created (at construction or by a reload): the gateway wires its events. */
  onAdded(supervisor: ServerSupervisor): void;
}

export interface ReloadResult {
  added: string[];
  removed: string[];
  changed: string[];
  /** The supervisors created for added and changed entries (not started). */
  fresh: ServerSupervisor[];
}

export class ServerRegistry {
  /** By configured name, in the config's order. The same Map for the registry's life. */
  readonly supervisors = new Map<string, ServerSupervisor>();
  /** Each entry's spec and supervisor options as JSON: what a reload compares. */
  private readonly configs = new Map<string, string>();

  constructor(private readonly opts: RegistryOptions) {}

  add({ spec, supervisor }: GatewayServerConfig): ServerSupervisor {
    const s = new ServerSupervisor(spec, {
      ...supervisor,
      logger: this.opts.logger,
      transportFactory: this.opts.transportFactory,
      random: this.opts.random,
      hooks: this.opts.hooks,
    });
    this.supervisors.set(spec.name, s);
    this.configs.set(spec.name, JSON.stringify({ spec, supervisor }));
    this.opts.onAdded(s);
    return s;
  }

  /** Applies a new config; the removed and changed supervisors are stopped before it resolves. */
  async reload(config: GatewayConfig): Promise<ReloadResult> {
    const next = new Map(config.servers.map((s) => [s.spec.name, s]));
    const added: string[] = [];
    const removed: string[] = [];
    const changed: string[] = [];
    for (const name of [...this.supervisors.keys()]) {
      const entry = next.get(name);
      if (!entry) removed.push(name);
      else if (JSON.stringify({ spec: entry.spec, supervisor: entry.supervisor }) !== this.configs.get(name)) changed.push(name);
    }
    for (const name of next.keys()) if (!this.supervisors.has(name)) added.push(name);
    await Promise.all(
      [...removed, ...changed].map(async (name) => {
        const s = this.supervisors.get(name)!;
        this.supervisors.delete(name);
        this.configs.delete(name);
        s.removeAllListeners();
        await s.stop();
      }),
    );
    // Keep the config's order (it decides which server keeps a shared resource URI).
    const old = new Map(this.supervisors);
    const oldConfigs = new Map(this.configs);
    this.supervisors.clear();
    this.configs.clear();
    const fresh: ServerSupervisor[] = [];
    for (const [name, entry] of next) {
      const kept = old.get(name);
      if (kept) {
        this.supervisors.set(name, kept);
        this.configs.set(name, oldConfigs.get(name)!);
      } else {
        fresh.push(this.add(entry));
      }
    }
    return { added, removed, changed, fresh };
  }
}
