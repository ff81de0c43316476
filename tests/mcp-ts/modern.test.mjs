/**
 * MCP 2026-07-28 over stdio and HTTP with the TypeScript SDK v2 client (`@modelcontextprotocol/client`,
 * pinned): with version negotiation on (`versionNegotiation: { mode: 'auto' }`; the v2
 * client's default is the 2025 handshake) it probes `server/discover`, lands on 2026-07-28
 * without falling back, and is served: tools listed with their cache hints, bash, a REPL
 * opened in one request and read in a later one (over stdio the connection is the owner
 * in both eras, over HTTP the token's principal), a background job started in one request
 * and read to its end in later ones, and `subscriptions/listen` bringing a job's output
 * updates and the list's change at its end. The round trips and tasks are in
 * modern-round-trips.test.mjs.
 */

import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { MODERN, modernHttpClient, modernStdioClient, okModern } from './modern-support.mjs';
import { OPENED_RE, readText, REQUEST_TIMEOUT_MS, STARTED_RE, text, waitFor } from './support.mjs';

test('the v2 client negotiates 2026-07-28 and keeps a REPL across stateless requests', async (t) => {
  const client = await modernStdioClient(t);
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  const names = (await client.listTools()).tools.map((tool) => tool.name);
  for (const name of ['bash', 'terminal_open', 'terminal_send']) assert.ok(names.includes(name), names.join(' '));
  const ran = await client.callTool({ name: 'bash', arguments: { command: 'echo v2-$((6*7))', description: 'x' } });
  assert.match(text(ran), /v2-42/);
  const opened = text(await client.callTool({ name: 'terminal_open', arguments: {} }));
  const id = opened.match(OPENED_RE)?.[1];
  assert.ok(id, opened);
  const send = (input, wait) => client.callTool({ name: 'terminal_send', arguments: { id, input, wait } });
  await send('python3 -q', { pattern: '>>> ', timeout_ms: 10000 });
  await send('x = 41', { quiet_ms: 300 });
  const answered = await send('print(x + 1)', { pattern: '42', timeout_ms: 10000 });
  assert.match(text(answered), /42/);
});

test('over HTTP the v2 client negotiates 2026-07-28 and its token keeps the REPL across requests', async (t) => {
  const client = await modernHttpClient(t);
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  const ran = await client.callTool({ name: 'bash', arguments: { command: 'echo http-v2-$((6*7))', description: 'x' } });
  assert.match(text(ran), /http-v2-42/, client.stderr());
  const opened = text(await client.callTool({ name: 'terminal_open', arguments: {} }));
  const id = opened.match(OPENED_RE)?.[1];
  assert.ok(id, opened);
  const send = (input, wait) => client.callTool({ name: 'terminal_send', arguments: { id, input, wait } });
  await send('export KEPT=41', { quiet_ms: 300 });
  const answered = await send('echo kept-$((KEPT + 1))', { pattern: 'kept-42', timeout_ms: 10000 });
  assert.match(text(answered), /kept-42/);
});

/**
 * The tools list as dsh put it on the wire carries the revision's cache hints
 * (`ttlMs`, `cacheScope: private`: a listing is the caller's own); the SDK returns them
 * and keeps the listing no longer than `ttlMs` (0: stale at once, the next listing asks
 * again).
 */
async function toolsListedWithCacheHints(t, open) {
  const client = await open(t);
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  const listings = () => client.wire.filter((message) => Array.isArray(message.result?.tools));
  const listed = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
  const [wire] = listings();
  assert.ok(wire, `no tools/list result on the wire: ${JSON.stringify(client.wire).slice(0, 2000)}`);
  const { tools, ...hints } = wire.result;
  assert.equal(hints.resultType, 'complete', JSON.stringify(hints));
  assert.equal(hints.cacheScope, 'private', JSON.stringify(hints));
  assert.ok(Number.isInteger(hints.ttlMs) && hints.ttlMs >= 0, JSON.stringify(hints));
  assert.equal(listed.cacheScope, hints.cacheScope);
  assert.equal(listed.ttlMs, hints.ttlMs);
  const names = listed.tools.map((tool) => tool.name);
  assert.deepEqual(names, tools.map((tool) => tool.name));
  for (const name of ['bash', 'terminal_open', 'terminal_send', 'job_output']) assert.ok(names.includes(name), names.join(' '));
  if (hints.ttlMs === 0) {
    await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
    assert.equal(listings().length, 2, 'a listing with ttlMs 0 was served from the cache');
  }
}

test('over stdio the v2 client lists the tools with their cache hints', (t) => toolsListedWithCacheHints(t, modernStdioClient));
test('over HTTP the v2 client lists the tools with their cache hints', (t) => toolsListedWithCacheHints(t, modernHttpClient));

/** `[id: state; next cursor: N]`, the last line of a `job_output` text. */
const JOB_STATUS_RE = /\[([a-z]+-\d+): ([^\n]*); next cursor: (\d+)\]$/;

/**
 * A background job (the client declared no tasks: the job's text, as in 2025) started in
 * one request, listed and read to its end by cursor with `job_output {wait_ms}` in later
 * ones: each request is stateless, the owner keeps the job.
 */
async function aJobAcrossRequests(t, open) {
  const client = await open(t);
  const command = 'until [ -e go ]; do sleep 0.05; done; echo job-$((6*7))';
  const started = await okModern(client, 'bash', { command, description: 'v2 job', run_in_background: true });
  const job = STARTED_RE.exec(started)?.[1];
  assert.ok(job, started);
  const listed = (await okModern(client, 'job_list', {})).split('\n').map((line) => line.split('\t'));
  assert.deepEqual(
    listed.map(([id, kind, state, , , description, shown]) => [id, kind, state, description, shown]),
    [[job, 'bash', 'running', 'v2 job', `$ ${command}`]],
  );
  writeFileSync(join(client.scratch.work, 'go'), '');
  let output = '';
  let since = 0;
  const status = await waitFor(
    async () => {
      const read = await okModern(client, 'job_output', { id: job, since, wait_ms: 2000 });
      const match = JOB_STATUS_RE.exec(read);
      assert.ok(match && match[1] === job, read);
      output += read.slice(0, match.index);
      since = Number(match[3]);
      return match[2] === 'running' ? undefined : match[2];
    },
    30_000,
    () => `${job} to end; its output so far: ${JSON.stringify(output)}`,
  );
  assert.equal(status, 'exited with code 0');
  assert.equal(output, 'job-42\n');
  const [[id, , state]] = (await okModern(client, 'job_list', {})).split('\n').map((line) => line.split('\t'));
  assert.deepEqual([id, state], [job, 'exited with code 0']);
}

test('over stdio the v2 client starts a job in one request and reads it to its end in later ones', (t) =>
  aJobAcrossRequests(t, modernStdioClient));
test('over HTTP the v2 client starts a job in one request and reads it to its end in later ones', (t) =>
  aJobAcrossRequests(t, modernHttpClient));

/**
 * `client.listen` (`subscriptions/listen`): dsh honours the job's output URI and drops
 * one that names nothing; the job's output then comes as `notifications/resources/updated`
 * and its end as `notifications/resources/list_changed`, dispatched by the SDK to the
 * handlers registered for them; the output is read after.
 */
async function listenToAJob(t, open) {
  const client = await open(t);
  const updated = [];
  let listChanged = 0;
  client.setNotificationHandler('notifications/resources/updated', (notification) => updated.push(notification.params.uri));
  client.setNotificationHandler('notifications/resources/list_changed', () => listChanged++);
  const command = 'until [ -e go ]; do sleep 0.05; done; for i in 1 2 3; do echo tick-$i; sleep 0.1; done';
  const started = await okModern(client, 'bash', { command, description: 'x', run_in_background: true });
  const job = STARTED_RE.exec(started)?.[1];
  assert.ok(job, started);
  const uri = `job://${job}/output`;
  const subscription = await client.listen(
    { resourcesListChanged: true, resourceSubscriptions: [uri, 'job://bash-999/output'] },
    { timeout: REQUEST_TIMEOUT_MS },
  );
  assert.deepEqual(subscription.honoredFilter.resourceSubscriptions, [uri], JSON.stringify(subscription.honoredFilter));
  assert.equal(subscription.honoredFilter.resourcesListChanged, true, JSON.stringify(subscription.honoredFilter));
  assert.deepEqual([updated, listChanged], [[], 0], 'notified before the job wrote anything');
  writeFileSync(join(client.scratch.work, 'go'), '');
  await waitFor(
    () => listChanged > 0 && updated.includes(uri),
    30_000,
    () => `an update of ${uri} and the list's change at the job's end (updates: ${JSON.stringify(updated)}, list changes: ${listChanged})\n${client.stderr()}`,
  );
  assert.deepEqual([...new Set(updated)], [uri]);
  assert.match(await readText(client, uri), /tick-1\ntick-2\ntick-3\n/);
  await subscription.close();
  assert.equal(await subscription.closed, 'local');
}

test("over stdio subscriptions/listen brings a job's output updates and the list's change at its end", (t) =>
  listenToAJob(t, modernStdioClient));
test("over HTTP subscriptions/listen brings a job's output updates and the list's change at its end", (t) =>
  listenToAJob(t, modernHttpClient));
