/**
 * Shared helpers of the TypeScript SDK suite: `dsh serve` started over stdio
 * (`StdioClientTransport`) or over streamable HTTP (`dsh serve --http 127.0.0.1:0`,
 * `StreamableHTTPClientTransport` with the bearer token), a scratch workspace per
 * test, tool calls and their text, waits with generous deadlines, and the URIs and
 * texts of dsh's terminals and jobs.
 *
 * Environment (set by tests/e2e/mcp_typescript.rs):
 * - `DSH_BIN`: the dsh binary under test (required).
 * - `DSH_PLUGIN_WASM_DIR`: the test plugins built from plugins/ (`rich`, `echo`).
 * - `DSH_MCP_TS_STATE_DIR`: a state directory every server of the run shares, so the
 *   embedded plugins are compiled once (its compile cache); else one per test process.
 * - `DSH_MCP_TS_PACKAGES`: where the SDK is installed (see resolve-packages.mjs).
 */

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/** How long one request may take before the test fails (a noisy CI machine). */
export const REQUEST_TIMEOUT_MS = 20_000;
/** How long a server may take to start listening. */
const SERVER_START_TIMEOUT_MS = 30_000;
/** JSON-RPC code of "resource not found" (MCP). */
export const RESOURCE_NOT_FOUND = -32002;
/** JSON-RPC code of invalid params (an unknown tool, in dsh). */
export const INVALID_PARAMS = -32602;

export const OPENED_RE = /^opened (term-\d+) /;
export const STARTED_RE = /^started background job (bash-\d+)\b/;

const LISTENING_RE = /dsh: listening on (http:\/\/127\.0\.0\.1:(\d+)\/mcp)\s*$/m;

export function dshBin() {
  const bin = process.env.DSH_BIN;
  assert.ok(bin, 'DSH_BIN is not set: point it at the dsh binary, e.g. DSH_BIN=target/debug/dsh');
  return resolve(bin);
}

/**
 * Runs `fn` when test `t` ends, after the cleanups registered later (last in, first
 * out: a client closes before its server stops, a server stops before its directory goes).
 */
export function onCleanup(t, fn) {
  let stack = cleanups.get(t);
  if (!stack) {
    stack = [];
    cleanups.set(t, stack);
    t.after(async () => {
      const failed = [];
      while (stack.length) {
        try {
          await stack.pop()();
        } catch (error) {
          failed.push(error);
        }
      }
      if (failed.length) throw failed[0];
    });
  }
  stack.push(fn);
}
const cleanups = new WeakMap();

let sharedState;
function stateDir() {
  if (process.env.DSH_MCP_TS_STATE_DIR) return process.env.DSH_MCP_TS_STATE_DIR;
  if (!sharedState) {
    const dir = mkdtempSync(join(tmpdir(), 'dsh-mcp-ts-state-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    sharedState = dir;
  }
  return sharedState;
}

/** The component built from the plugins/ crate `name` (a test plugin). */
export function builtPlugin(name) {
  const wasmDir = process.env.DSH_PLUGIN_WASM_DIR;
  assert.ok(wasmDir, 'DSH_PLUGIN_WASM_DIR is not set: the directory of the plugins built from plugins/');
  return join(wasmDir, `${name}.wasm`);
}

/**
 * A scratch directory for one test (workspace, config, plugin directory), removed when
 * the test ends. `config`: the text of a dsh.toml; `plugins`: test plugins (built from
 * plugins/) to put in a plugin directory dsh serves and watches (`[]`: an empty one).
 * Returns the directories, the global options dsh gets and its environment.
 */
export function scratch(t, { config, plugins } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'dsh-mcp-ts-'));
  onCleanup(t, () => rmSync(dir, { recursive: true, force: true }));
  const work = join(dir, 'work');
  mkdirSync(work);
  const args = [];
  if (config !== undefined) {
    writeFileSync(join(dir, 'dsh.toml'), config);
    args.push('--config', join(dir, 'dsh.toml'));
  }
  let pluginsDir;
  if (plugins !== undefined) {
    pluginsDir = join(dir, 'plugins');
    mkdirSync(pluginsDir);
    for (const name of plugins) copyFileSync(builtPlugin(name), join(pluginsDir, `${name}.wasm`));
    args.push('--plugins', pluginsDir);
  }
  const env = { DSH_STATE_DIR: stateDir(), DSH_WORKDIR: work };
  for (const name of ['RUST_LOG', 'RUST_BACKTRACE', 'LANG']) {
    if (process.env[name]) env[name] = process.env[name];
  }
  return { dir, work, pluginsDir, args, env };
}

/** A client that keeps what the SDK reports through `onerror` in `client.sdkErrors`. */
function newClient() {
  const client = new Client({ name: 'dsh-e2e-typescript', version: '0.0.0' });
  client.sdkErrors = [];
  client.onerror = (error) => client.sdkErrors.push(String(error));
  return client;
}

/**
 * How many progress notifications the SDK dropped as "unknown token" among `errors`
 * (a slice of `client.sdkErrors`): over stdio, those it read in the same chunk as the
 * result (modelcontextprotocol/typescript-sdk#2580).
 */
export function droppedProgress(errors) {
  return errors.filter((error) => error.includes('Received a progress notification for an unknown token')).length;
}

/**
 * A connected client of `dsh serve` on stdio (closed when the test ends). `client.stderr()`
 * is what the server wrote on stderr so far, for failure messages; `client.scratch` its
 * directories (see `scratch`). `makeClient` makes the client (the v2 one, for instance).
 */
export async function stdioClient(t, options = {}, makeClient = newClient) {
  const made = scratch(t, options);
  const { work, args, env } = made;
  const transport = new StdioClientTransport({
    command: dshBin(),
    args: [...args, 'serve'],
    env,
    cwd: work,
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const client = makeClient();
  onCleanup(t, () => client.close());
  client.stderr = () => `--- dsh serve stderr ---\n${stderr.slice(-4000)}`;
  try {
    await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  } catch (error) {
    throw new Error(`connecting to dsh serve over stdio: ${error}\n${client.stderr()}`, { cause: error });
  }
  client.scratch = made;
  return client;
}

/**
 * `dsh serve --http 127.0.0.1:0` with a random bearer token, stopped when the test ends
 * (SIGTERM, then SIGKILL to its process group). Resolves once it prints where it listens.
 */
export async function httpServer(t, options = {}) {
  const made = scratch(t, options);
  const { work, args, env } = made;
  const token = crypto.randomUUID().replaceAll('-', '');
  const child = spawn(dshBin(), [...args, 'serve', '--http', '127.0.0.1:0'], {
    cwd: work,
    env: { HOME: process.env.HOME, PATH: process.env.PATH, ...env, DSH_HTTP_TOKEN: token },
    stdio: ['pipe', 'ignore', 'pipe'],
    detached: true,
  });
  let stderr = '';
  const exited = new Promise((resolve) => child.once('exit', resolve));
  liveServers.add(child);
  exited.then(() => liveServers.delete(child));
  onCleanup(t, async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const stopped = await Promise.race([exited.then(() => true), sleep(5000, false, { ref: false })]);
      if (!stopped) {
        try {
          process.kill(-child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
        await exited;
      }
    }
    child.stdin.destroy();
  });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`dsh serve --http printed no listening line within ${SERVER_START_TIMEOUT_MS} ms:\n${stderr}`)),
      SERVER_START_TIMEOUT_MS,
    );
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
      const match = LISTENING_RE.exec(stderr);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`dsh serve --http exited (${code ?? signal}) before listening:\n${stderr}`));
    });
  });
  return { url, token, scratch: made, stderr: () => `--- dsh serve --http stderr ---\n${stderr.slice(-4000)}` };
}

/** HTTP servers still running: killed (their process groups) if this process exits first. */
const liveServers = new Set();
process.on('exit', () => {
  for (const child of liveServers) {
    try {
      process.kill(-child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});

/** A connected client of `server` (one MCP session: one owner), closed when the test ends. */
export async function httpClient(t, server) {
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${server.token}` } },
  });
  const client = newClient();
  onCleanup(t, async () => {
    // End the MCP session (DELETE), then the transport.
    await transport.terminateSession().catch(() => {});
    await client.close();
  });
  try {
    await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  } catch (error) {
    throw new Error(`connecting to ${server.url}: ${error}\n${server.stderr()}`, { cause: error });
  }
  client.stderr = server.stderr;
  client.scratch = server.scratch;
  return client;
}

/**
 * The two transports, each as a function `(t, options) => client`, for tests that run
 * over both. Over HTTP every client gets a server of its own.
 */
export const TRANSPORTS = {
  stdio: stdioClient,
  http: async (t, options) => httpClient(t, await httpServer(t, options)),
};

/** `tools/call` with the request timeout (and `options`, e.g. `onprogress`). */
export function call(client, name, args, options = {}) {
  return client.callTool({ name, arguments: args }, undefined, { timeout: REQUEST_TIMEOUT_MS, ...options });
}

/** The text items of a tool result, concatenated. */
export function text(result) {
  return result.content
    .filter((item) => item.type === 'text')
    .map((item) => item.text)
    .join('');
}

/** A request and its result, for assertion messages. */
export function show(name, args, result) {
  return `request: ${name} ${JSON.stringify(args)}\nresponse: ${JSON.stringify(result).slice(0, 3000)}`;
}

/** Calls a tool and asserts it succeeded; returns its text. */
export async function ok(client, name, args) {
  const result = await call(client, name, args);
  assert.equal(result.isError, false, show(name, args, result));
  return text(result);
}

/** Opens a terminal session; returns its id (`term-N`). */
export async function openTerminal(client) {
  const opened = await ok(client, 'terminal_open', {});
  const match = OPENED_RE.exec(opened);
  assert.ok(match, `terminal_open said ${JSON.stringify(opened)}`);
  return match[1];
}

/** Starts `command` as a background job; returns its id (`bash-N`). */
export async function startJob(client, command) {
  const args = { command, description: 'typescript sdk test job', run_in_background: true };
  const started = await ok(client, 'bash', args);
  const match = STARTED_RE.exec(started);
  assert.ok(match, `bash ${JSON.stringify(args)} said ${JSON.stringify(started)}`);
  return match[1];
}

export const screenUri = (term) => `terminal://${term}/screen`;
export const outputUri = (job) => `job://${job}/output`;

/** Reads a resource, asserting one text/plain content for `uri`; returns its text. */
export async function readText(client, uri) {
  const result = await client.readResource({ uri }, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(result.contents.length, 1, JSON.stringify(result));
  const [contents] = result.contents;
  assert.equal(contents.uri, uri, JSON.stringify(contents));
  assert.equal(contents.mimeType, 'text/plain', JSON.stringify(contents));
  assert.equal(typeof contents.text, 'string', JSON.stringify(contents));
  return contents.text;
}

/** Reads `uri` until its text contains `needle` (a shell or a job takes a moment). */
export async function readUntil(client, uri, needle, timeoutMs = 10_000) {
  let last = '';
  await waitFor(
    async () => (last = await readText(client, uri)).includes(needle),
    timeoutMs,
    () => `${uri} to show ${JSON.stringify(needle)}; last read: ${JSON.stringify(last)}`,
  );
  return last;
}

/** The URIs `resources/list` names, sorted. */
export async function listedUris(client) {
  const { resources } = await client.listResources(undefined, { timeout: REQUEST_TIMEOUT_MS });
  return resources.map((resource) => resource.uri).sort();
}

/** Asserts `promise` rejects with an McpError of `code`; returns the error. */
export async function rejectsWithCode(promise, code, what) {
  let error;
  try {
    const value = await promise;
    assert.fail(`${what}: expected an MCP error ${code}, got ${JSON.stringify(value)}`);
  } catch (caught) {
    error = caught;
  }
  if (error instanceof assert.AssertionError) throw error;
  assert.equal(error?.code, code, `${what}: ${error?.stack ?? error}`);
  return error;
}

/**
 * Polls `condition` (sync or async) every 50 ms until it is truthy; fails after
 * `timeoutMs` naming `what` (a string or a function giving one).
 */
export async function waitFor(condition, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) {
      assert.fail(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'function' ? what() : what}`);
    }
    await sleep(50);
  }
}

export { sleep };
