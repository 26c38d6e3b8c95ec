/**
 * The relay's file-handle map (src/relay/remote-handles.ts), pure: downstream ids per scope
 * map to upstream ids of the relay's own, the per-scope cap and the server's texts hold, an
 * unknown handle is the server's -32004 (closing one is not an error, as Codex answers), and
 * a scope that closes closes its handles upstream.
 */
import { describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RemoteHandles } from '../../../src/relay/remote-handles.js';
import type { FsScope } from '../../../src/server/backend/fs-work.js';

/** What RemoteHandles uses of a scope: its cap and its close hook. */
function fakeScope(maxHandles = 3): FsScope & { closeNow(): void } {
  const listeners: Array<() => void> = [];
  return {
    limits: { maxHandles },
    onClose: (listener: () => void) => listeners.push(listener),
    closeNow: () => listeners.splice(0).forEach((l) => l()),
  } as unknown as FsScope & { closeNow(): void };
}

describe('RemoteHandles', () => {
  it('maps the same downstream id in two scopes to two upstream ids', async () => {
    const handles = new RemoteHandles(() => {});
    const a = fakeScope();
    const b = fakeScope();
    const opened: string[] = [];
    await handles.open(a, 'h', async (id) => void opened.push(id));
    await handles.open(b, 'h', async (id) => void opened.push(id));
    expect(new Set(opened).size).toBe(2);
    expect(handles.upstreamId(a, 'h')).toBe(opened[0]);
    expect(handles.upstreamId(b, 'h')).toBe(opened[1]);
  });

  it("refuses a duplicate id and a full scope with the server's texts; a failed open leaves nothing", async () => {
    const handles = new RemoteHandles(() => {});
    const scope = fakeScope(2);
    await handles.open(scope, 'a', async () => {});
    await expect(handles.open(scope, 'a', async () => {})).rejects.toMatchObject({ code: ErrorCode.InvalidRequest, message: 'file handle `a` already exists' });
    await expect(handles.open(scope, 'x', async () => Promise.reject(new Error('ENOENT')))).rejects.toThrow('ENOENT');
    expect(() => handles.upstreamId(scope, 'x')).toThrow('unknown file handle `x`');
    await handles.open(scope, 'b', async () => {});
    await expect(handles.open(scope, 'c', async () => {})).rejects.toMatchObject({ message: 'at most 2 file handles may be open per connection' });
    await expect(handles.open(scope, 'y'.repeat(33), async () => {})).rejects.toMatchObject({ code: ErrorCode.InvalidRequest });
  });

  it('an unknown handle is -32004; closing one is not an error; a closed one is forgotten', async () => {
    const handles = new RemoteHandles(() => {});
    const scope = fakeScope();
    expect(() => handles.upstreamId(scope, 'nope')).toThrow(expect.objectContaining({ code: ErrorCode.NotFound }));
    const closed: string[] = [];
    await handles.close(scope, 'nope', async (id) => void closed.push(id));
    expect(closed).toEqual([]);
    await handles.open(scope, 'h', async () => {});
    const upstreamId = handles.upstreamId(scope, 'h');
    await handles.close(scope, 'h', async (id) => void closed.push(id));
    expect(closed).toEqual([upstreamId]);
    expect(() => handles.upstreamId(scope, 'h')).toThrow('unknown file handle `h`');
  });

  it('a scope that closes closes its handles upstream and loses them', async () => {
    const closedUpstream: string[] = [];
    const handles = new RemoteHandles((id) => closedUpstream.push(id));
    const scope = fakeScope();
    await handles.open(scope, 'a', async () => {});
    await handles.open(scope, 'b', async () => {});
    const ids = [handles.upstreamId(scope, 'a'), handles.upstreamId(scope, 'b')];
    scope.closeNow();
    expect(closedUpstream.sort()).toEqual(ids.sort());
    expect(() => handles.upstreamId(scope, 'a')).toThrow('unknown file handle `a`');
  });
});
