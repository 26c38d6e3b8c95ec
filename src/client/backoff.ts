/**
 * Reconnect delays: the first attempt goes at once (most drops are a single reset), then
 * short, doubling, fully jittered waits so a server that restarts is not hit by every
 * client in lockstep. Attempt numbers start at 1.
 */
export function reconnectDelayMs(attempt: number, random: () => number = Math.random): number {
  if (attempt <= 1) return 0;
  const ceiling = Math.min(2000, 100 * 2 ** (attempt - 2));
  return Math.round(ceiling / 2 + (random() * ceiling) / 2);
}
