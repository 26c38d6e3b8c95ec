/**
 * server/memory/: The memory budget, fair share, capacity and descriptors.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { serverCapacity } from './capacity.js';
export type { ProcessCapacity } from './capacity.js';
export { DescriptorBudget, defaultMaxConnections, defaultMaxHttpSockets, defaultMaxHttpSocketsPerSession, descriptorLimit } from './descriptors.js';
export { HOLD_REASONS, OutputShares, shareOwner } from './fair-share.js';
export type { HoldReason, SessionShare } from './fair-share.js';
export { MEMORY_HOLDERS } from './memory-budget.js';
export type { MemoryAccount, MemoryBudget } from './memory-budget.js';
