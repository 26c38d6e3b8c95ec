/** A reader for the gateway's GET /events (server-sent events), for tests. */
export interface SseEvent {
  event: string;
  data: any;
}

export interface SseSubscription {
  /** The next event (bounded by the test timeout). */
  next(): Promise<SseEvent>;
  /** Events up to and including the first one for which `done` is true. */
  until(done: string | ((e: SseEvent) => boolean)): Promise<SseEvent[]>;
  close(): void;
}

/**
 * `server_status` (a whole summary after every change, for the status page) is left out
 * unless `withStatus`: the tests that follow the event sequence read the named events.
 */
export async function subscribeEvents(url: string, { withStatus = false }: { withStatus?: boolean } = {}): Promise<SseSubscription> {
  const controller = new AbortController();
  const res = await fetch(url, { signal: controller.signal });
  if (res.headers.get('content-type') !== 'text/event-stream') throw new Error(`not an event stream: ${res.status} ${res.headers.get('content-type')}`);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const queue: SseEvent[] = [];
  let buffer = '';
  let wake: (() => void) | undefined;
  void (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event && data && (withStatus || event !== 'server_status')) queue.push({ event, data: JSON.parse(data) });
          wake?.();
        }
      }
    } catch {
      // aborted by close()
    }
  })();
  const sub: SseSubscription = {
    async next() {
      while (queue.length === 0) await new Promise<void>((r) => (wake = r));
      return queue.shift()!;
    },
    async until(done) {
      const test = typeof done === 'string' ? (e: SseEvent) => e.event === done : done;
      const out: SseEvent[] = [];
      for (;;) {
        const e = await sub.next();
        out.push(e);
        if (test(e)) return out;
      }
    },
    close: () => controller.abort(),
  };
  return sub;
}

/** Follows server statuses from a snapshot and the events after it. */
export async function waitForStatuses(sub: SseSubscription, want: Record<string, string>): Promise<Record<string, string>> {
  const status: Record<string, string> = {};
  const matches = () => Object.entries(want).every(([k, v]) => status[k] === v);
  const apply = (e: SseEvent) => {
    if (e.event === 'snapshot') for (const s of e.data.servers) status[s.name] = s.status;
    else if (e.event === 'server_connected' || e.event === 'server_reconnected') status[e.data.server] = 'connected';
    else if (e.event === 'server_reconnecting') status[e.data.server] = 'reconnecting';
    else if (e.event === 'server_failed') status[e.data.server] = e.data.status;
    else if (e.event === 'server_disconnected' && e.data.wasIntentional) status[e.data.server] = 'disconnected';
  };
  await sub.until((e) => {
    apply(e);
    return matches();
  });
  return status;
}
