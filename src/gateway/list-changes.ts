/** Telling a host that the aggregated lists changed, the same way for both SDKs' servers. */
import type { HostList } from './gateway.js';

/** What both SDKs' MCP servers (v1 for 2025 hosts, v2 for 2026-07-28 ones) have for telling a host a list changed. */
export interface ListChangeSender {
  sendToolListChanged(): Promise<void>;
  sendResourceListChanged(): Promise<void>;
  sendPromptListChanged(): Promise<void>;
}

/** Tells a host's server that these lists changed (a host that is gone is not an error). */
export function sendListsChanged(server: ListChangeSender, lists: readonly HostList[]): void {
  for (const list of lists) {
    const send = list === 'tools' ? server.sendToolListChanged() : list === 'resources' ? server.sendResourceListChanged() : server.sendPromptListChanged();
    void send.catch(() => {});
  }
}
