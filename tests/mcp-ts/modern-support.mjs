/**
 * Helpers of the MCP 2026-07-28 tests with the TypeScript SDK v2 client
 * (`@modelcontextprotocol/client`, pinned in package.json): a client of `dsh serve` over
 * stdio or over HTTP with version negotiation on (`versionNegotiation: { mode: 'auto' }`;
 * the v2 client's default is the 2025 handshake), the messages its transport received
 * (to see what dsh put on the wire beneath what the SDK returns), a schema for the Tasks
 * extension's results, and the processes of a test found in /proc by a marker.
 */

import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { httpServer, onCleanup, REQUEST_TIMEOUT_MS, stdioClient, text, waitFor } from './support.mjs';

export const MODERN = '2026-07-28';
/** The Tasks extension's name, declared in the client's capabilities (`extensions`). */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

/**
 * A v2 client with negotiation on. `capabilities`: what it declares (sent in every
 * request's `_meta`); `handlers`: `{ method: handler }` for the requests it answers
 * (`elicitation/create`, `sampling/createMessage`), which the SDK calls to fulfil an
 * `input_required` result before it retries the call.
 */
function modernClient({ capabilities, handlers = {} } = {}) {
  const client = new Client(
    { name: 'dsh-e2e-typescript-v2', version: '0.0.0' },
    { versionNegotiation: { mode: 'auto' }, ...(capabilities && { capabilities }) },
  );
  client.sdkErrors = [];
  client.onerror = (error) => client.sdkErrors.push(String(error));
  for (const [method, handler] of Object.entries(handlers)) client.setRequestHandler(method, handler);
  return client;
}

/**
 * Keeps every message `transport` delivers to the client in `client.wire` (the raw
 * JSON-RPC, before the SDK decodes it), from now on.
 */
function tapWire(client, transport) {
  client.wire = [];
  const deliver = transport.onmessage;
  assert.equal(typeof deliver, 'function', 'the connected transport has no onmessage');
  transport.onmessage = (message, extra) => {
    client.wire.push(message);
    return deliver.call(transport, message, extra);
  };
}

/**
 * A connected v2 client of `dsh serve` on stdio (closed when the test ends); `options`:
 * those of `scratch` (config, plugins) and of `modernClient`. `client.stderr()` is the
 * server's stderr so far, `client.scratch` its directories.
 */
export async function modernStdioClient(t, options = {}) {
  const client = await stdioClient(t, options, () => modernClient(options));
  tapWire(client, client.transport);
  return client;
}

/**
 * A connected v2 client of a `dsh serve --http` of its own (with its bearer token: under
 * 2026-07-28 there is no session, the token's principal owns what its requests open).
 */
export async function modernHttpClient(t, options = {}) {
  const server = await httpServer(t, options);
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${server.token}` } },
  });
  const client = modernClient(options);
  onCleanup(t, () => client.close());
  try {
    await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  } catch (error) {
    throw new Error(`connecting to ${server.url}: ${error}\n${server.stderr()}`, { cause: error });
  }
  tapWire(client, transport);
  client.stderr = server.stderr;
  client.scratch = server.scratch;
  return client;
}

/** Both transports: `[name, (t, options) => client]`. */
export const MODERN_TRANSPORTS = [
  ['stdio', modernStdioClient],
  ['http', modernHttpClient],
];

/** `tools/call` with the request timeout; returns the SDK's result. */
export function callModern(client, name, args) {
  return client.callTool({ name, arguments: args }, { timeout: REQUEST_TIMEOUT_MS });
}

/** Calls a tool and asserts it succeeded; returns its text. */
export async function okModern(client, name, args) {
  const result = await callModern(client, name, args);
  assert.equal(result.isError, false, `${name} ${JSON.stringify(args)}: ${JSON.stringify(result)}\n${client.stderr()}`);
  return text(result);
}

/** The results the wire brought whose `resultType` is `resultType` (`input_required`, `task`, ...). */
export function wireResults(client, resultType) {
  return client.wire.filter((message) => message.result?.resultType === resultType).map((message) => message.result);
}

/** Requests the server sent the client on the wire (none under 2026-07-28). */
export function wireRequests(client) {
  return client.wire.filter((message) => typeof message.method === 'string' && message.id !== undefined);
}

/** A Standard Schema (what `client.request` validates a result against) from a predicate. */
function schema(name, check) {
  return {
    '~standard': {
      version: 1,
      vendor: 'dsh-e2e',
      validate: (value) => (check(value) ? { value } : { issues: [{ message: `not ${name}: ${JSON.stringify(value)}` }] }),
    },
  };
}

const TASK_STATUSES = ['working', 'input_required', 'completed', 'failed', 'cancelled'];
/** A task (the result of `tasks/get`). */
export const TASK = schema('a task', (value) => typeof value?.taskId === 'string' && TASK_STATUSES.includes(value.status));
/** Any result object (that of `tasks/cancel`). */
export const RESULT = schema('a result', (value) => value !== null && typeof value === 'object' && !Array.isArray(value));

/**
 * A marker unique to this test, a valid `sleep` duration (`600.123456789012`): a process
 * with it on its command line is one the test started. Those still alive when the test
 * ends are killed.
 */
export function marker(t) {
  const made = `600.${String(randomInt(0, 1e12)).padStart(12, '0')}`;
  onCleanup(t, () => {
    for (const { pid } of processesWith(made)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  });
  return made;
}

/** The live processes (not zombies) with `needle` on their command line, from /proc: `{ pid, cmdline }`. */
export function processesWith(needle) {
  const found = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    let cmdline;
    let stat;
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ').trim();
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // A zombie is dead already, just not reaped yet.
    if (stat.slice(stat.lastIndexOf(')') + 1).trim().split(' ')[0] === 'Z') continue;
    if (cmdline.includes(needle)) found.push({ pid: Number(entry), cmdline });
  }
  return found;
}

/** Waits until `count` processes whose command line is exactly `cmdline` run; returns them. */
export function processesAppear(cmdline, count, timeoutMs = 10_000) {
  let seen = [];
  return waitFor(
    () => {
      seen = processesWith(cmdline);
      const exact = seen.filter((found) => found.cmdline === cmdline);
      return exact.length >= count ? exact : undefined;
    },
    timeoutMs,
    () => `${count} processes \`${cmdline}\` (seen: ${JSON.stringify(seen)})`,
  );
}

/** Waits until no process with `needle` on its command line is alive. */
export async function processesGone(needle, timeoutMs = 10_000) {
  await waitFor(
    () => processesWith(needle).length === 0,
    timeoutMs,
    () => `the processes with ${needle} to be gone (still: ${JSON.stringify(processesWith(needle))})`,
  );
}
