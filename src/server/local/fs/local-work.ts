/**
 * The local back-end's filesystem work (backend.ts, `FsWork`): node:fs on this machine, on the
 * native paths the handlers parsed. Handles and the missing-watch are its state in the
 * client's scope (local-scope.ts). Node's errors are left as they are: the handlers turn them
 * into Codex's.
 */
import type { FsScope, FsWork } from '../../backend/index.js';
import { readWholeFile, writeWholeFile } from './files.js';
import { canonicalize, getMetadata, readDirectory } from './metadata.js';
import { copy, createDirectory, remove } from './tree.js';
import { walk } from './walk.js';
import { LocalFsScope } from './local-scope.js';

/** Each scope's local state, made when the scope opens (`openScope`). */
const scopes = new WeakMap<FsScope, LocalFsScope>();

function local(scope: FsScope): LocalFsScope {
  let state = scopes.get(scope);
  if (!state) {
    state = new LocalFsScope(scope);
    scopes.set(scope, state);
  }
  return state;
}

export const localFs: FsWork = {
  openScope: local,
  readFile: (target, maxBytes, reserve) => readWholeFile(target.path, maxBytes, reserve),
  writeFile: (target, data) => writeWholeFile(target.path, data),
  createDirectory: (target, recursive) => createDirectory(target.path, recursive),
  getMetadata: (target) => getMetadata(target.path),
  readDirectory: (target, maxEntries) => readDirectory(target.path, maxEntries),
  canonicalize: (target) => canonicalize(target.path),
  walk: (target, options) => walk(target.path, options),
  remove: (target, recursive, force) => remove(target.path, recursive, force),
  copy: (source, destination, recursive) => copy(source.path, destination.path, recursive),
  openFile: (scope, handleId, target, mode) => local(scope).handles.openFile(handleId, target.path, mode),
  readBlock: (scope, handleId, offset, len) => local(scope).handles.readBlock(handleId, offset, len),
  writeBlock: (scope, handleId, offset, data, writeId) => local(scope).handles.writeBlock(handleId, offset, data, writeId),
  completedWrites: (scope, handleId, writeIds) => local(scope).handles.completedWrites(handleId, writeIds),
  closeFile: (scope, handleId) => local(scope).handles.close(handleId),
  watchMissing: (scope, watchId, missing, present) =>
    local(scope).watchMissing(
      watchId,
      missing.map((t) => t.path),
      present?.path ?? null,
    ),
};
