/**
 * `fs/walk`'s limits as Codex checks them (-32600, its texts): before any back-end walks, so
 * the local walk (local/fs/walk.ts) and the relay refuse alike.
 */
import { FsLimits, invalidRequest, type FsWalkOptions } from '../../protocol/index.js';

export function checkWalkLimits(options: FsWalkOptions): void {
  if (options.maxDirectories === 0 || options.maxEntries === 0) {
    throw invalidRequest('filesystem walk limits must be greater than zero');
  }
  if (
    options.maxDepth > FsLimits.walkMaxDepth ||
    options.maxDirectories > FsLimits.walkMaxDirectories ||
    options.maxEntries > FsLimits.walkMaxEntries
  ) {
    throw invalidRequest(
      `filesystem walk limits exceed maximums: depth=${FsLimits.walkMaxDepth}, directories=${FsLimits.walkMaxDirectories}, entries=${FsLimits.walkMaxEntries}`,
    );
  }
}
