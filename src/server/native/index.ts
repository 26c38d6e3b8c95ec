/**
 * server/native/: The native part: where the keeper and the addon are, and loading the addon.
 * This file is the folder's only door: what other folders use of it, and nothing else.
 */
export { assertKeeperBuilt, keeperPath, nativeAddon, nativeBuild, nativeSummary, protectServerProcess } from './native.js';
