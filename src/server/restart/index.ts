/**
 * server/restart/: Restart adoption: the state dir, session store, key journal, adoption, hand-over.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { HandoverError, adminSocketPath, offerHandover, takeOver } from './handover.js';
export type { HandoverOffer } from './handover.js';
export { KeptServer } from './kept-server.js';
export { answerWhileStarting } from './starting-gate.js';
export { StateDirError, defaultStateDir } from './state-dir.js';
export { defaultDiskTotal } from './disk-quota.js';
