/**
 * The protocol's signal names (`process/signal`) and the OS signals they stand for, both ways:
 * the server sends `osSignal(name)`, a client turns Node's `kill(signal)` argument (a name, a
 * number, or the protocol's own name) into the protocol's with `protocolSignal`. Pure.
 */
import type { SignalName } from './types.js';

const OS_SIGNALS: Readonly<Record<SignalName, NodeJS.Signals>> = {
  interrupt: 'SIGINT',
  terminate: 'SIGTERM',
  kill: 'SIGKILL',
  hangup: 'SIGHUP',
  quit: 'SIGQUIT',
  user1: 'SIGUSR1',
  user2: 'SIGUSR2',
};

const BY_OS_NAME = new Map<string, SignalName>(Object.entries(OS_SIGNALS).map(([name, os]) => [os, name as SignalName]));
/** Linux's numbers (SIGUSR1 and SIGUSR2 differ elsewhere; the servers are Linux). */
const BY_NUMBER = new Map<number, SignalName>([
  [2, 'interrupt'],
  [15, 'terminate'],
  [9, 'kill'],
  [1, 'hangup'],
  [3, 'quit'],
  [10, 'user1'],
  [12, 'user2'],
]);

/** The OS signal a protocol signal name sends. */
export function osSignal(name: SignalName): NodeJS.Signals {
  return OS_SIGNALS[name];
}

/** The protocol's name for a Node signal name or number, or a protocol name itself; undefined if it has none. */
export function protocolSignal(signal: NodeJS.Signals | number | SignalName | string): SignalName | undefined {
  if (typeof signal === 'number') return BY_NUMBER.get(signal);
  if (Object.hasOwn(OS_SIGNALS, signal)) return signal as SignalName;
  return BY_OS_NAME.get(signal);
}
