/**
 * Counts crashes of a local or remote stdio MCP server inside a sliding time window. The
 * supervisor restarts a crashed server at once, but a server that keeps dying (bad config,
 * missing dependency) must stop being restarted: `limit` crashes within `windowMs` → failed.
 */
export class CrashWindow {
  private times: number[] = [];

  constructor(
    readonly limit: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Records a crash; true when the limit is reached (the server should be marked failed). */
  record(): boolean {
    const t = this.now();
    this.times.push(t);
    this.prune(t);
    return this.times.length >= this.limit;
  }

  /** Crashes still inside the window. */
  get count(): number {
    this.prune(this.now());
    return this.times.length;
  }

  reset(): void {
    this.times = [];
  }

  private prune(t: number): void {
    this.times = this.times.filter((x) => t - x < this.windowMs);
  }
}
