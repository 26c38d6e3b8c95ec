/**
 * The relay's filesystem work (server/backend.ts, `FsWork`): each request goes to the
 * upstream session through tether's client, by what a cut may do to it:
 * - reads (readFile, getMetadata, readDirectory, canonicalize, walk, readBlock, written) are
 *   re-sent after a lost answer: doing them twice changes nothing;
 * - requests that change something (writeFile, createDirectory, remove, copy, open) carry an
 *   `idempotencyKey` when the upstream accepted `fsResume`, and are re-sent with it (the
 *   upstream answers the copy with the first outcome); against a Codex upstream they are sent
 *   once, and a lost answer is "outcome unknown" (-32603), never a second effect;
 * - `fs/writeBlock` writes the same bytes at the same offset: re-sent; `fs/close` after a lost
 *   answer on a Codex upstream closed the handle either way (Codex's die with the connection).
 * The downstream client's own idempotency keys are the server's business (it remembers their
 * outcomes per session), so a downstream re-send never reaches this far.
 *
 * Handles and the missing-watch live upstream (per upstream session with `fsResume`, else per
 * upstream connection: a Codex upstream loses them at a cut, as a direct client would).
 */
import { randomUUID } from 'node:crypto';
import { type ExecClient, OutcomeUnknownError } from '../client/index.js';
import {
  FsMethod,
  internalError,
  type FsMetadata,
  type FsReadBlockResult,
  type FsReadDirectoryResult,
  type FsReadFileResult,
  type FsWalkResult,
  type FsWatchMissingResult,
  type FsWrittenResult,
} from '../protocol/index.js';
import type { FsScope, FsTarget, FsWork } from '../server/backend/index.js';
import { RemoteHandles } from './remote-handles.js';

/** Where the relay's fs requests go: its session's upstream client, once connected. */
export interface Upstream {
  client(): Promise<ExecClient>;
}

export class RemoteFsWork implements FsWork {
  /** Which downstream scope hears of each upstream watch (the latest watchMissing for an id). */
  private readonly watches = new Map<number, FsScope>();
  private listening = false;
  private readonly handles: RemoteHandles;

  constructor(private readonly upstream: Upstream) {
    this.handles = new RemoteHandles((upstreamId) => void this.closeUpstream(upstreamId).catch(() => {}));
  }

  private async read<T>(method: string, params: object): Promise<T> {
    return (await this.upstream.client()).request<T>(method, params);
  }

  private async mutate<T>(method: string, params: object): Promise<T> {
    const client = await this.upstream.client();
    if (client.extensions.has('fsResume')) return client.request<T>(method, { ...params, idempotencyKey: randomUUID() });
    try {
      return await client.request<T>(method, params, { resend: false });
    } catch (err) {
      if (err instanceof OutcomeUnknownError) throw internalError(`${method} ${err.message}`);
      throw err;
    }
  }

  async readFile(target: FsTarget, maxBytes: number, reserve: (bytes: number) => Promise<() => void>) {
    const { dataBase64 } = await this.read<FsReadFileResult>(FsMethod.readFile, { path: target.uri });
    const data = Buffer.from(dataBase64, 'base64');
    // Held once it is here: counted now (the upstream's own cap bounds it).
    const release = await reserve(Math.max(data.length, 1));
    void maxBytes;
    return { data, release };
  }

  async writeFile(target: FsTarget, data: Buffer) {
    await this.mutate(FsMethod.writeFile, { path: target.uri, dataBase64: data.toString('base64') });
  }

  async createDirectory(target: FsTarget, recursive: boolean) {
    await this.mutate(FsMethod.createDirectory, { path: target.uri, recursive });
  }

  getMetadata(target: FsTarget) {
    return this.read<FsMetadata>(FsMethod.getMetadata, { path: target.uri });
  }

  async readDirectory(target: FsTarget) {
    return (await this.read<FsReadDirectoryResult>(FsMethod.readDirectory, { path: target.uri })).entries;
  }

  async canonicalize(target: FsTarget) {
    return (await this.read<{ path: string }>(FsMethod.canonicalize, { path: target.uri })).path;
  }

  walk(target: FsTarget, options: object) {
    return this.read<FsWalkResult>(FsMethod.walk, { path: target.uri, options });
  }

  async remove(target: FsTarget, recursive: boolean, force: boolean) {
    await this.mutate(FsMethod.remove, { path: target.uri, recursive, force });
  }

  async copy(source: FsTarget, destination: FsTarget, recursive: boolean) {
    await this.mutate(FsMethod.copy, { sourcePath: source.uri, destinationPath: destination.uri, recursive });
  }

  async openFile(scope: FsScope, handleId: string, target: FsTarget, mode: string) {
    await this.handles.open(scope, handleId, async (upstreamId) => {
      const params = { handleId: upstreamId, path: target.uri, mode };
      if (mode === 'read') await this.read(FsMethod.open, params);
      else await this.mutate(FsMethod.open, params);
    });
  }

  async readBlock(scope: FsScope, handleId: string, offset: number, len: number) {
    const upstreamId = this.handles.upstreamId(scope, handleId);
    const { chunk, eof } = await this.read<FsReadBlockResult>(FsMethod.readBlock, { handleId: upstreamId, offset, len });
    return { bytes: Buffer.from(chunk, 'base64'), eof };
  }

  async writeBlock(scope: FsScope, handleId: string, offset: number, data: Buffer, writeId?: number) {
    const params: Record<string, unknown> = { handleId: this.handles.upstreamId(scope, handleId), offset, chunk: data.toString('base64') };
    if (writeId !== undefined) params.writeId = writeId;
    await this.read(FsMethod.writeBlock, params);
  }

  async completedWrites(scope: FsScope, handleId: string, writeIds: number[]) {
    const upstreamId = this.handles.upstreamId(scope, handleId);
    return (await this.read<FsWrittenResult>(FsMethod.written, { handleId: upstreamId, writeIds })).writeIds;
  }

  closeFile(scope: FsScope, handleId: string) {
    return this.handles.close(scope, handleId, (upstreamId) => this.closeUpstream(upstreamId));
  }

  private async closeUpstream(handleId: string): Promise<void> {
    const client = await this.upstream.client();
    if (client.extensions.has('fsResume')) {
      await client.request(FsMethod.close, { handleId, idempotencyKey: randomUUID() });
      return;
    }
    await client.request(FsMethod.close, { handleId }, { resend: false }).catch((err: unknown) => {
      if (!(err instanceof OutcomeUnknownError)) throw err;
    });
  }

  async watchMissing(scope: FsScope, watchId: number, missing: FsTarget[], present: FsTarget | null) {
    const client = await this.upstream.client();
    if (!this.listening) {
      this.listening = true;
      client.on('fs/missingChanged', (id) => this.watches.get(id)?.tell(id));
    }
    this.watches.set(watchId, scope);
    const params = { watchId, missing: missing.map((t) => t.uri), ...(present ? { present: present.uri } : {}) };
    const { watching } = await client.request<FsWatchMissingResult>(FsMethod.watchMissing, params);
    return watching;
  }
}
