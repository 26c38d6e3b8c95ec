/**
 * Processes a restart could not keep (restart adoption): a session record names them, but the
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

/**
 * Why a process a client names is unknown to a restored session: no record and no keeper
 * had it (its start came in the instant before a crash, its record write had not landed, and
 * its keeper is gone too). The tether client names only processes whose start it saw
 * answered, so for those the start did happen.
 */
export const NOT_RECORDED = 'the server restarted and does not know this process: its start was not recorded before the crash (it may never have run, or its keeper was gone)';

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
   * With `restored` (the session was rebuilt by this server from a predecessor's record),
   * every other id it names and does not have is lost too (NOT_RECORDED): a client only
   * acts on it for a process it still waits on (the others it forgot itself).
   */
  named(
    sessionId: string,
    delivered: Readonly<Record<string, number>> | null | undefined,
    has: (processId: string) => boolean = () => false,
    restored = false,
  ): Record<string, string> | undefined {
    if (!delivered) return undefined;
    const lost = this.bySession.get(sessionId);
    const answer: Array<[string, string]> = [];
    for (const processId of Object.keys(delivered)) {
      if (has(processId)) continue;
      const reason = lost?.get(processId) ?? (restored ? NOT_RECORDED : undefined);
      if (reason !== undefined) answer.push([processId, reason]);
    }
    // fromEntries defines each as its own property (an id like "__proto__" included).
    return answer.length > 0 ? Object.fromEntries(answer) : undefined;
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
