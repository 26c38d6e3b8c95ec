/**
 * The relay's file handles, per downstream scope (a connection, or the session with
 * `fsResume`): the downstream client's ids map to upstream ids of the relay's own choosing,
 * so two downstream connections of one session may use the same id, and a scope that closes
 * (its connection gone, Codex's rule) loses its handles — closed upstream too — exactly as on
 * a server. The ids, the per-scope cap and the refusals are the server's own
 * (server/fs/handle-ids.ts, shared with the local back-end).
 */
import type { FsScope } from '../server/backend/index.js';
import { checkHandleId, HandleIds } from '../server/fs/index.js';

export class RemoteHandles {
  /** Per scope: downstream id → upstream id, for open handles. */
  private readonly scopes = new WeakMap<FsScope, HandleIds<string>>();
  private next = 0;

  /** `closeUpstream`: closes one upstream handle, best effort (its scope is gone). */
  constructor(private readonly closeUpstream: (upstreamId: string) => void) {}

  private of(scope: FsScope): HandleIds<string> {
    let handles = this.scopes.get(scope);
    if (!handles) {
      const created = new HandleIds<string>(scope.limits.maxHandles);
      handles = created;
      this.scopes.set(scope, created);
      scope.onClose(() => {
        for (const upstreamId of created.clear()) this.closeUpstream(upstreamId);
      });
    }
    return handles;
  }

  /** Opens `handleId` with `open(upstreamId)`; the server's refusals for a duplicate id or a full scope. */
  async open(scope: FsScope, handleId: string, open: (upstreamId: string) => Promise<void>): Promise<void> {
    checkHandleId(handleId);
    await this.of(scope).add(handleId, async () => {
      const upstreamId = `relay-${++this.next}`;
      await open(upstreamId);
      return upstreamId;
    });
  }

  /** The upstream id of an open handle; the server's "unknown file handle" otherwise. */
  upstreamId(scope: FsScope, handleId: string): string {
    return this.of(scope).get(handleId);
  }

  /** Forgets `handleId` (closed), after `close(upstreamId)`; an unknown one is closed already (as Codex answers). */
  async close(scope: FsScope, handleId: string, close: (upstreamId: string) => Promise<void>): Promise<void> {
    const upstreamId = this.of(scope).find(handleId);
    if (upstreamId === undefined) return;
    await close(upstreamId);
    this.of(scope).delete(handleId);
  }
}
