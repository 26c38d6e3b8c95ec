export { ChaosProxy } from './proxy.js';
export type {
  BlackholeMode,
  ChaosProxyEvents,
  ChaosProxyOptions,
  ChaosStats,
  CloseReason,
  ConnectionReport,
  CutAfterBytesOptions,
  CutRandomlyOptions,
  Direction,
  FaultState,
} from './proxy.js';
export type { LinkShape, PipeCounters } from './pipe.js';
export { ChaosPlan, faultsAt, isActive, nextChange } from './schedule.js';
export type { Fault, FaultKind, PlanClock, ScheduledFault, Window } from './schedule.js';
export { seededRandom } from './random.js';
