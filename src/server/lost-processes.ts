/**
 * Processes a restart could not keep (issue #27): a session record names them, but the
 * successor could not adopt them (their keeper died while no server ran, or its dump did not
 * fit together). The session is restored without them, and a client that resumes it with
 * `acks` naming one in `tether.delivered` is told in the `initialize` answer
 * (`tether.lost: {processId: reason}`) instead of waiting forever for events that cannot
 * come. A client that no longer names one (it forgot it) is told nothing. Without `acks` a
 * client reads the process back and gets "unknown process id", as from Codex.
 *
 * Pure bookkeeping; bounded by the recorded processes (at most --max-processes a session),
 * forgotten when the session ends.
 */

/** Why a recorded process whose keeper was not found is gone. */
export const KEEPER_GONE = 'the process was lost in the server restart (its keeper was gone)';

export class LostProcesses {
  private readonly bySession = new Map<string, Map<string, string>>();

  /** `processId` of session `sessionId` was lost, for `reason` (the first reason stays). */
  add(sessionId: string, processId: string, reason: string): void {
    let lost = this.bySession.get(sessionId);
    if (!lost) this.bySession.set(sessionId, (lost = new Map()));
    if (!lost.has(processId)) lost.set(processId, reason);
  }

  /** How many processes of the session were lost. */
  count(sessionId: string): number {
    return this.bySession.get(sessionId)?.size ?? 0;
  }

  /**
   * The lost processes among those a resuming client names (`delivered`): id → reason;
   * undefined when none. An id the session `has` again (started anew since) is not lost.
   */
  named(sessionId: string, delivered: Readonly<Record<string, number>> | null | undefined, has: (processId: string) => boolean = () => false): Record<string, string> | undefined {
    const lost = this.bySession.get(sessionId);
    if (!lost || !delivered) return undefined;
    let answer: Record<string, string> | undefined;
    for (const [processId, reason] of lost) if (Object.hasOwn(delivered, processId) && !has(processId)) (answer ??= {})[processId] = reason;
    return answer;
  }

  /** Every lost process of the session (for its record: a second restart still knows them); undefined when none. */
  of(sessionId: string): Record<string, string> | undefined {
    const lost = this.bySession.get(sessionId);
    return lost && lost.size > 0 ? Object.fromEntries(lost) : undefined;
  }

  /** The session ended: nothing of it is remembered. */
  forget(sessionId: string): void {
    this.bySession.delete(sessionId);
  }
}
