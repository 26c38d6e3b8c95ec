/**
 * `tether cp [options] SOURCE DESTINATION`: copies a file or a directory tree to or from the
 * host of a tether server (or a Codex exec-server), through network drops. The remote side
 * is written with a leading colon, like `docker cp`'s `CONTAINER:PATH` without the name:
 *
 *   tether cp ./build.tar :/srv/build.tar     upload
 *   tether cp :/var/log/app ./logs            download (a directory: copied whole)
 *   tether cp :/etc/hostname -                to stdout;  `tether cp - :/tmp/x` from stdin
 */
import { pipeline } from 'node:stream/promises';
import { OutcomeUnknownError, reconnectDelayMs, SessionLostError, type ExecClient, type RecoveredEvent } from '../client/index.js';
import { copyFromRemote, copyToRemote, type CopyReport } from '../client/fs/copy.js';
import { RunningClock } from '../client/running-clock.js';
import { connectClient } from './connect.js';
import { connectionOptionsHelp, parseLeadingOptions, readCa, readToken, type ConnectionOptions } from './remote-options.js';
import { printHelp, reportUsageError, UsageError } from './usage.js';
import { formatBytes } from '../util/format.js';

/** Like ssh and `tether exec`: 255 is tether's own failure (cannot connect, session lost). */
const EXIT_TETHER_ERROR = 255;
const EXIT_COPY_FAILED = 1;

export const CP_USAGE = `usage: tether cp [options] SOURCE DESTINATION

Copies a file or a directory (with everything in it) to or from a tether host, surviving
network drops: transfers resume where they were. Write the remote side with a leading
colon; '-' is stdin (as SOURCE) or stdout (as DESTINATION) for a single file.

  tether cp ./build.tar :/srv/build.tar     copy to the remote host
  tether cp :/var/log/app ./logs            copy a directory from it
  tether cp :/etc/hostname -                print a remote file

Into an existing directory the source keeps its name; otherwise DESTINATION is the copy.
Symbolic links are not followed or copied, and file modes are not kept.

options (they end at the first operand, or at '--'):
${connectionOptionsHelp()}
  -q, --quiet               print nothing but errors
  -h, --help                this text

exit status: 0 copied; 1 the copy failed (the reason is printed); 2 usage error;
${EXIT_TETHER_ERROR} the server cannot be reached or the session was lost.`;

export interface CpOptions extends ConnectionOptions {
  quiet: boolean;
  source: Endpoint;
  destination: Endpoint;
}

type Endpoint = { side: 'local' | 'remote'; path: string } | { side: 'stdio' };

function endpoint(text: string): Endpoint {
  if (text === '-') return { side: 'stdio' };
  if (text.startsWith(':')) {
    if (text.length === 1) throw new UsageError("a remote path is missing after ':'");
    return { side: 'remote', path: text.slice(1) };
  }
  if (text === '') throw new UsageError('an empty path');
  return { side: 'local', path: text };
}

/** Parses the command line; options end at the first operand (as POSIX utilities do). */
export function parseCpArgs(argv: string[], environment: NodeJS.ProcessEnv = process.env): CpOptions | 'help' {
  let quiet = false;
  const parsed = parseLeadingOptions(argv, environment, (name) => {
    switch (name) {
      case '-q':
      case '--quiet':
        quiet = true;
        return true;
      case '-r':
      case '-R':
      case '--recursive':
        return true; // directories are always copied whole; accepted for cp/scp habits
      default:
        return false;
    }
  });
  if (parsed === 'help') return 'help';
  const operands = parsed.operands;
  if (operands.length !== 2) throw new UsageError(`expected SOURCE and DESTINATION, got ${operands.length} operand${operands.length === 1 ? '' : 's'}`);
  const source = endpoint(operands[0]!);
  const destination = endpoint(operands[1]!);
  const sides = [source.side, destination.side];
  if (!sides.includes('remote')) throw new UsageError("one side must be remote: write it with a leading colon, e.g. ':/srv/file'");
  if (source.side === 'remote' && destination.side === 'remote') throw new UsageError('both sides are remote: copy on the remote host with tether exec -- cp …');
  return { ...parsed.connection, quiet, source, destination };
}

export async function run(argv: string[]): Promise<void> {
  let options: CpOptions;
  let token: string | undefined;
  let ca: string | undefined;
  try {
    const parsed = parseCpArgs(argv);
    if (parsed === 'help') {
      printHelp(CP_USAGE);
      return;
    }
    options = parsed;
    token = await readToken(options.tokenFile);
    ca = await readCa(options.caFile);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    reportUsageError('cp', err.message);
    return;
  }
  const say = (line: string) => {
    if (!options.quiet) process.stderr.write(`tether cp: ${line}\n`);
  };

  let client: ExecClient;
  try {
    client = await connectPatiently(options, token, ca);
  } catch (err) {
    process.stderr.write(`tether cp: cannot connect to ${options.url}: ${(err as Error).message}\n`);
    process.exitCode = EXIT_TETHER_ERROR;
    return;
  }
  let recoveries = 0;
  client.on('recovered', (event: RecoveredEvent) => {
    recoveries++;
    if (recoveries <= 3 || recoveries % 10 === 0) say(`link lost and resumed (${Math.round(event.downtimeMs)} ms; ${recoveries} so far); the transfer goes on`);
  });
  const started = performance.now();
  try {
    const report = await copy(client, options);
    if (report) {
      for (const skipped of report.skipped) say(`skipped ${skipped}`);
      const seconds = (performance.now() - started) / 1000;
      say(`copied ${report.files} file${report.files === 1 ? '' : 's'}${report.directories ? ` in ${report.directories} director${report.directories === 1 ? 'y' : 'ies'}` : ''}, ${formatBytes(report.bytes, 'long')} in ${seconds.toFixed(1)} s${recoveries ? ` through ${recoveries} reconnect${recoveries === 1 ? '' : 's'}` : ''}`);
    }
  } catch (err) {
    process.stderr.write(`tether cp: ${describe(err)}\n`);
    process.exitCode = err instanceof SessionLostError ? EXIT_TETHER_ERROR : EXIT_COPY_FAILED;
  } finally {
    await client.close().catch(() => {});
  }
}

/**
 * The first connection gets the same patience as a reconnect: a link that drops during the
 * handshake is tried again (with the client's backoff) until the recovery deadline. A refused
 * credential is final.
 */
async function connectPatiently(options: CpOptions, token: string | undefined, ca: string | undefined): Promise<ExecClient> {
  // Running time, as the client's own deadlines: a stop or a sleep of this process does not use it up.
  const clock = new RunningClock();
  const deadline = options.recoveryDeadlineMs ?? 25_000;
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        return await connectClient(options, { token, ca }, { clientName: 'tether-cp' });
      } catch (err) {
        const wait = reconnectDelayMs(attempt + 1);
        if (err instanceof SessionLostError || clock.elapsed() + wait >= deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  } finally {
    clock.stop();
  }
}

async function copy(client: ExecClient, options: CpOptions): Promise<CopyReport | undefined> {
  const { source, destination } = options;
  if (source.side === 'stdio' && destination.side === 'remote') {
    await pipeline(process.stdin, client.fs.createWriteStream(destination.path));
    return undefined;
  }
  if (source.side === 'remote' && destination.side === 'stdio') {
    // Not ended: when stdout is a socket (a Node parent's 'pipe' is a socketpair), ending it
    // shuts the socket down for every process sharing it, and the commands after this one in
    // the same script could no longer write there. Writes to pipes and sockets are synchronous.
    await pipeline(client.fs.createReadStream(source.path), process.stdout, { end: false });
    return undefined;
  }
  if (source.side === 'local' && destination.side === 'remote') return copyToRemote(client.fs, source.path, destination.path);
  if (source.side === 'remote' && destination.side === 'local') return copyFromRemote(client.fs, source.path, destination.path);
  throw new UsageError('unsupported combination');
}

function describe(err: unknown): string {
  if (err instanceof OutcomeUnknownError) return `${err.message}`;
  return err instanceof Error ? err.message : String(err);
}
