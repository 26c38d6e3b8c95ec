/**
 * The relay's file handles, per downstream scope (a connection, or the session with
 * `fsResume`): the downstream client's ids map to upstream ids of the relay's own choosing,
 * so two downstream connections of one session may use the same id, and a scope that closes
 * (its connection gone, Codex's rule) loses its handles — closed upstream too — exactly as on
 * a server. The per-scope cap and the texts are the server's (server/fs/handles.ts).
 */
import { invalidRequest } from '../protocol/index.js';
import { notFound } from '../server/fs/errors.js';
import { checkHandleId } from '../server/local/fs/handles.js';
import type { FsScope } from '../server/fs/scope.js';

interface ScopeHandles {
  /** Downstream id → upstream id, for open handles. */
  readonly open: Map<string, string>;
  readonly opening: Set<string>;
}

export class RemoteHandles {
  private readonly scopes = new WeakMap<FsScope, ScopeHandles>();
  private next = 0;

  /** `closeUpstream`: closes one upstream handle, best effort (its scope is gone). */
  constructor(private readonly closeUpstream: (upstreamId: string) => void) {}

  private of(scope: FsScope): ScopeHandles {
    let handles = this.scopes.get(scope);
    if (!handles) {
      const created: ScopeHandles = { open: new Map(), opening: new Set() };
      handles = created;
      this.scopes.set(scope, created);
      scope.onClose(() => {
        for (const upstreamId of created.open.values()) this.closeUpstream(upstreamId);
        created.open.clear();
      });
    }
    return handles;
  }

  /** Opens `handleId` with `open(upstreamId)`; the server's refusals for a duplicate id or a full scope. */
  async open(scope: FsScope, handleId: string, open: (upstreamId: string) => Promise<void>): Promise<void> {
    checkHandleId(handleId);
    const handles = this.of(scope);
    if (handles.open.has(handleId) || handles.opening.has(handleId)) throw invalidRequest(`file handle \`${handleId}\` already exists`);
    const capacity = scope.limits.maxHandles;
    if (handles.open.size + handles.opening.size >= capacity) throw invalidRequest(`at most ${capacity} file handles may be open per connection`);
    const upstreamId = `relay-${++this.next}`;
    handles.opening.add(handleId);
    try {
      await open(upstreamId);
      handles.open.set(handleId, upstreamId);
    } finally {
      handles.opening.delete(handleId);
    }
  }

  /** The upstream id of an open handle; the server's "unknown file handle" otherwise. */
  upstreamId(scope: FsScope, handleId: string): string {
    checkHandleId(handleId);
    const id = this.of(scope).open.get(handleId);
    if (id === undefined) throw notFound(`unknown file handle \`${handleId}\``);
    return id;
  }

  /** Forgets `handleId` (closed), after `close(upstreamId)`; an unknown one is closed already (as Codex answers). */
  async close(scope: FsScope, handleId: string, close: (upstreamId: string) => Promise<void>): Promise<void> {
    checkHandleId(handleId);
    const upstreamId = this.of(scope).open.get(handleId);
    if (upstreamId === undefined) return;
    await close(upstreamId);
    this.of(scope).open.delete(handleId);
  }
}
