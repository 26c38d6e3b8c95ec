/** The protocol's signal names (`process/signal`) and the OS signals they send. Pure. */
import type { SignalName } from '../protocol/index.js';

const SIGNALS: Record<SignalName, NodeJS.Signals> = {
  interrupt: 'SIGINT',
  terminate: 'SIGTERM',
  kill: 'SIGKILL',
  hangup: 'SIGHUP',
  quit: 'SIGQUIT',
  user1: 'SIGUSR1',
  user2: 'SIGUSR2',
};

/** The OS signal a protocol signal name sends. */
export function osSignal(name: SignalName): NodeJS.Signals {
  return SIGNALS[name];
}
