/**
 * The local back-end's filesystem work (backend.ts, `FsWork`): node:fs on this machine, on the
 * native paths the handlers parsed. Handles and the missing-watch live in the client's scope
 * (scope.ts). Node's errors are left as they are: the handlers turn them into Codex's.
 */
import type { FsWork } from '../../backend/backend.js';
import { readWholeFile, writeWholeFile } from './files.js';
import { canonicalize, getMetadata, readDirectory } from './metadata.js';
import { copy, createDirectory, remove } from './tree.js';
import { walk } from './walk.js';

export const localFs: FsWork = {
  readFile: (target, maxBytes, reserve) => readWholeFile(target.path, maxBytes, reserve),
  writeFile: (target, data) => writeWholeFile(target.path, data),
  createDirectory: (target, recursive) => createDirectory(target.path, recursive),
  getMetadata: (target) => getMetadata(target.path),
  readDirectory: (target, maxEntries) => readDirectory(target.path, maxEntries),
  canonicalize: (target) => canonicalize(target.path),
  walk: (target, options) => walk(target.path, options),
  remove: (target, recursive, force) => remove(target.path, recursive, force),
  copy: (source, destination, recursive) => copy(source.path, destination.path, recursive),
  openFile: (scope, handleId, target, mode) => scope.handles.openFile(handleId, target.path, mode),
  readBlock: (scope, handleId, offset, len) => scope.handles.readBlock(handleId, offset, len),
  writeBlock: (scope, handleId, offset, data, writeId) => scope.handles.writeBlock(handleId, offset, data, writeId),
  completedWrites: (scope, handleId, writeIds) => scope.handles.completedWrites(handleId, writeIds),
  closeFile: (scope, handleId) => scope.handles.close(handleId),
  watchMissing: (scope, watchId, missing, present) =>
    scope.watchMissing(
      watchId,
      missing.map((t) => t.path),
      present?.path ?? null,
    ),
};
