/**
 * `environmentConfig/read`: the Codex configuration of the host the executor runs on, so an
 * agent on another machine learns e.g. which MCP servers this host defines. Codex answers
 * with the layers of its own config (the user layer, `$CODEX_HOME/config.toml`, CODEX_HOME
 * defaulting to ~/.codex), each reduced to the requested TOML paths and written back as TOML
 * in document order. tether reads the same file the same way. Requirements layers (managed
 * configuration) are not read: tether reports none.
 *
 * Bounded: a config.toml over `MAX_CONFIG_FILE_BYTES` is refused unread (Codex reads any size;
 * a client that wrote a 150 MiB one could make a server read, parse and re-escape it all), and
 * the TOML answered is at most `MAX_CONFIG_ANSWER_BYTES`.
 */
import { open } from 'node:fs/promises';
import { homedir, hostname } from 'node:os';
import { join } from 'node:path';
import { parse, TomlDate } from 'smol-toml';
import {
  internalError,
  invalidParams,
  RpcError,
  type EnvironmentConfigLayer,
  type EnvironmentConfigReadResult,
} from '../../protocol/index.js';
import { pathToUri } from './uri.js';
import { formatBytes } from '../../util/format.js';

/** Largest config.toml read (1 MiB; a real one is a few KiB). */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;
/**
 * Largest TOML answered (4 MiB). Re-serialized TOML can outgrow its file (escapes, a nested
 * table's full path in every header); past this the read is refused instead.
 */
export const MAX_CONFIG_ANSWER_BYTES = 4 * 1024 * 1024;

/** The file's text, at most `MAX_CONFIG_FILE_BYTES` (larger: refused unread); undefined when it does not exist. */
async function readConfigFile(file: string): Promise<string | undefined> {
  let handle;
  try {
    handle = await open(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw internalError(`failed to load executor-local config: ${file}: ${(err as Error).message}`);
  }
  try {
    const { size } = await handle.stat();
    const tooLarge = (bytes: string) =>
      internalError(`failed to load executor-local config: ${file}: the file is ${bytes}, larger than the ${formatBytes(MAX_CONFIG_FILE_BYTES)} tether reads`);
    if (size > MAX_CONFIG_FILE_BYTES) throw tooLarge(formatBytes(size));
    // One byte more than the limit: a file that grew since the stat is refused, not cut.
    const buf = Buffer.allocUnsafe(MAX_CONFIG_FILE_BYTES + 1);
    let filled = 0;
    for (;;) {
      const { bytesRead } = await handle.read(buf, filled, buf.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
      if (filled > MAX_CONFIG_FILE_BYTES) throw tooLarge(`over ${formatBytes(MAX_CONFIG_FILE_BYTES)}`);
    }
    return buf.toString('utf8', 0, filled);
  } catch (err) {
    if (err instanceof RpcError) throw err;
    throw internalError(`failed to load executor-local config: ${file}: ${(err as Error).message}`);
  } finally {
    await handle.close();
  }
}

type Table = { [key: string]: TomlValue };
type TomlValue = string | number | bigint | boolean | TomlDate | TomlValue[] | Table;

export function codexHome(): string {
  return process.env.CODEX_HOME || join(homedir(), '.codex');
}

export function checkConfigPaths(configPaths: string[][], requirementsPaths: string[][]): void {
  if (configPaths.length === 0 && requirementsPaths.length === 0) {
    throw invalidParams('at least one config or requirements path is required');
  }
  if ([...configPaths, ...requirementsPaths].some((path) => path.length === 0)) {
    throw invalidParams('TOML paths must contain at least one key segment');
  }
}

export async function readEnvironmentConfig(configPaths: string[][], requirementsPaths: string[][]): Promise<EnvironmentConfigReadResult> {
  checkConfigPaths(configPaths, requirementsPaths);
  const home = codexHome();
  const layers: EnvironmentConfigLayer[] = [];
  const file = join(home, 'config.toml');
  const text = await readConfigFile(file);
  if (text !== undefined && configPaths.length > 0) {
    let document: Table;
    try {
      document = parse(text, { integersAsBigInt: true }) as Table;
    } catch (err) {
      throw internalError(`failed to load executor-local config: ${file}: ${(err as Error).message.split('\n')[0]}`);
    }
    const selected = select(document, configPaths);
    if (Object.keys(selected).length > 0) {
      const toml = stringifyToml(selected);
      if (toml.length > MAX_CONFIG_ANSWER_BYTES) {
        throw internalError(
          `failed to load executor-local config: ${file}: the requested paths come to ${formatBytes(toml.length)} of TOML, more than the ${formatBytes(MAX_CONFIG_ANSWER_BYTES)} tether answers`,
        );
      }
      layers.push({ source: `user (${file})`, baseDir: pathToUri(home), toml });
    }
  }
  return {
    userHomeDir: pathToUri(homedir()),
    codexHomeDir: pathToUri(home),
    hostname: hostname(),
    config: { layers, cloudInsertionIndex: 0 },
    requirements: { layers: [], cloudInsertionIndex: 0 },
  };
}

/** The parts of `document` on the requested paths, in the document's own order. */
function select(document: Table, paths: string[][]): Table {
  const out: Table = {};
  for (const [key, value] of Object.entries(document)) {
    const below = paths.filter((p) => p[0] === key);
    if (below.length === 0) continue;
    if (below.some((p) => p.length === 1)) out[key] = value;
    else if (isTable(value)) {
      const inner = select(value, below.map((p) => p.slice(1)));
      if (Object.keys(inner).length > 0) out[key] = inner;
    }
  }
  return out;
}

function isTable(value: TomlValue): value is Table {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof TomlDate);
}

const isTableArray = (value: TomlValue): value is Table[] => Array.isArray(value) && value.length > 0 && value.every(isTable);

/** TOML in the layout of Rust's `toml` serializer: plain keys first, then `[tables]` separated by blank lines. */
export function stringifyToml(table: Table): string {
  const sections: string[] = [];
  emitTable(table, [], sections);
  return sections.join('\n');
}

function emitTable(table: Table, path: string[], sections: string[]): void {
  const lines: string[] = [];
  for (const [key, value] of Object.entries(table)) {
    if (!isTable(value) && !isTableArray(value)) lines.push(`${tomlKey(key)} = ${tomlValue(value)}`);
  }
  if (lines.length > 0 || (path.length > 0 && Object.values(table).every((v) => !isTable(v) && !isTableArray(v)))) {
    sections.push(`${path.length > 0 ? `[${path.map(tomlKey).join('.')}]\n` : ''}${lines.map((l) => `${l}\n`).join('')}`);
  }
  for (const [key, value] of Object.entries(table)) {
    if (isTable(value)) emitTable(value, [...path, key], sections);
    else if (isTableArray(value)) {
      for (const item of value) {
        const header = `[[${[...path, key].map(tomlKey).join('.')}]]\n`;
        const inner: string[] = [];
        emitTable(item, [...path, key], inner);
        sections.push(header + (inner[0]?.replace(/^\[[^\n]*\]\n/, '') ?? ''), ...inner.slice(1));
      }
    }
  }
}

function tomlKey(key: string): string {
  return /^[A-Za-z0-9_-]+$/.test(key) ? key : tomlString(key);
}

function tomlValue(value: TomlValue): string {
  if (typeof value === 'string') return tomlString(value);
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return 'nan';
    if (!Number.isFinite(value)) return value > 0 ? 'inf' : '-inf';
    return Number.isInteger(value) ? `${value}.0` : String(value);
  }
  if (typeof value === 'boolean') return String(value);
  if (value instanceof TomlDate) return value.toISOString();
  if (Array.isArray(value)) return `[${value.map(tomlValue).join(', ')}]`;
  return `{ ${Object.entries(value).map(([k, v]) => `${tomlKey(k)} = ${tomlValue(v)}`).join(', ')} }`;
}

function tomlString(text: string): string {
  const escaped = text.replace(/[\\"\u0000-\u001f\u007f]/g, (c) => {
    const named: Record<string, string> = { '\\': '\\\\', '"': '\\"', '\b': '\\b', '\t': '\\t', '\n': '\\n', '\f': '\\f', '\r': '\\r' };
    return named[c] ?? `\\u${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
  });
  return `"${escaped}"`;
}
