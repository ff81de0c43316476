/**
 * Resource change notifications and completions through the TypeScript SDK, over
 * stdio and streamable HTTP: `resources.subscribe` and `resources.listChanged` are
 * declared; after `subscribeResource` of a terminal screen, typing into the terminal
 * with `terminal_send` brings `notifications/resources/updated` for that URI (and a
 * subscribed job's output when the job prints), `unsubscribeResource` stops them, and a
 * bogus URI cannot be subscribed to (-32002); opening a terminal, and closing it, brings
 * `notifications/resources/list_changed`; the `completions` capability is declared and
 * `complete` of the templates' `id` returns the open terminal ids (`term-`) and the job
 * ids (`bash-`). Over HTTP, another session (another owner) hears none of the first's
 * changes, cannot subscribe to its URIs, and never sees its ids completed.
 *
 * Each test is skipped, saying so, when the server does not declare the capability it
 * needs.
 */

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { ResourceListChangedNotificationSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import {
  httpClient,
  httpServer,
  ok,
  openTerminal,
  outputUri,
  readUntil,
  rejectsWithCode,
  RESOURCE_NOT_FOUND,
  REQUEST_TIMEOUT_MS,
  screenUri,
  sleep,
  startJob,
  TRANSPORTS,
  waitFor,
} from './support.mjs';

/** How long a notification may take to come (the server batches them every 100 ms). */
const NOTIFIED_WITHIN_MS = 10_000;
/** How long an update already on its way when a client unsubscribes may still take. */
const SETTLE_MS = 500;

/** Whether the server declares what `needs` checks; skips `t` saying what is missing. */
function declared(t, client, what, needs) {
  const capabilities = client.getServerCapabilities() ?? {};
  if (needs(capabilities)) return true;
  t.skip(`dsh does not declare ${what} yet (capabilities: ${JSON.stringify(capabilities)})`);
  return false;
}
const subscribable = (c) => c.resources?.subscribe === true;
const listChanging = (c) => c.resources?.listChanged === true;
const completing = (c) => Boolean(c.completions);

/** Records the URIs of `notifications/resources/updated` and the list_changed count. */
function recordChanges(client) {
  const seen = { updated: [], listChanged: 0 };
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
    seen.updated.push(notification.params.uri);
  });
  client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
    seen.listChanged += 1;
  });
  return seen;
}

/** `completion/complete` of template `uri`'s `id` from `value`: the values. */
async function completeId(client, uri, value) {
  const { completion } = await client.complete(
    { ref: { type: 'ref/resource', uri }, argument: { name: 'id', value } },
    { timeout: REQUEST_TIMEOUT_MS },
  );
  assert.ok(Array.isArray(completion.values), JSON.stringify(completion));
  return completion.values;
}

describe('resource changes', { concurrency: true }, () => {
  for (const [transport, connect] of Object.entries(TRANSPORTS)) {
    describe(`over ${transport}`, { concurrency: true }, () => {
      test('a subscribed screen is updated as the terminal is typed into, until unsubscribed', async (t) => {
        const client = await connect(t);
        if (!declared(t, client, 'resources.subscribe', subscribable)) return;
        const seen = recordChanges(client);
        const term = await openTerminal(client);
        const uri = screenUri(term);
        await client.subscribeResource({ uri }, { timeout: REQUEST_TIMEOUT_MS });

        await ok(client, 'terminal_send', { id: term, input: 'echo typed-$((6*7))' });
        await waitFor(
          () => seen.updated.includes(uri),
          NOTIFIED_WITHIN_MS,
          () => `resources/updated ${uri}; got ${JSON.stringify(seen.updated)}`,
        );
        await readUntil(client, uri, 'typed-42');
        assert.ok(
          seen.updated.every((updated) => updated === uri),
          `only the subscribed URI is updated: ${JSON.stringify(seen.updated)}`,
        );

        await client.unsubscribeResource({ uri }, { timeout: REQUEST_TIMEOUT_MS });
        await sleep(SETTLE_MS);
        seen.updated.length = 0;
        await ok(client, 'terminal_send', { id: term, input: 'echo after-$((7*8))' });
        await readUntil(client, uri, 'after-56');
        await sleep(1000); // room for an update, were one (wrongly) sent
        assert.deepEqual(seen.updated, [], 'updates after unsubscribing');
      });

      test("a subscribed job's output is updated when the job prints", async (t) => {
        const client = await connect(t);
        if (!declared(t, client, 'resources.subscribe', subscribable)) return;
        const seen = recordChanges(client);
        const job = await startJob(client, 'sleep 1; echo late-output');
        const uri = outputUri(job);
        await client.subscribeResource({ uri }, { timeout: REQUEST_TIMEOUT_MS });
        await waitFor(
          () => seen.updated.includes(uri),
          NOTIFIED_WITHIN_MS,
          () => `resources/updated ${uri}; got ${JSON.stringify(seen.updated)}`,
        );
        await readUntil(client, uri, 'late-output');
      });

      test('a URI that names nothing cannot be subscribed to', async (t) => {
        const client = await connect(t);
        if (!declared(t, client, 'resources.subscribe', subscribable)) return;
        for (const uri of ['terminal://term-999/screen', 'job://bash-999/output', 'bogus:nothing']) {
          await rejectsWithCode(client.subscribeResource({ uri }), RESOURCE_NOT_FOUND, `resources/subscribe ${uri}`);
        }
      });

      test('opening and closing a terminal bring resources/list_changed', async (t) => {
        const client = await connect(t);
        if (!declared(t, client, 'resources.listChanged', listChanging)) return;
        const seen = recordChanges(client);
        const term = await openTerminal(client);
        await waitFor(() => seen.listChanged > 0, NOTIFIED_WITHIN_MS, 'notifications/resources/list_changed after terminal_open');
        await sleep(SETTLE_MS); // the opening's changes have all come
        const before = seen.listChanged;
        await ok(client, 'terminal_close', { id: term });
        await waitFor(() => seen.listChanged > before, NOTIFIED_WITHIN_MS, 'notifications/resources/list_changed after terminal_close');
      });

      test('complete gives the open terminal ids and the job ids', async (t) => {
        const client = await connect(t);
        if (!declared(t, client, 'completions', completing)) return;
        assert.deepEqual(await completeId(client, 'terminal://{id}/screen', 'term-'), [], 'no terminal yet');
        const terms = [await openTerminal(client), await openTerminal(client)];
        const job = await startJob(client, 'echo completed');
        assert.deepEqual(await completeId(client, 'terminal://{id}/screen', 'term-'), terms);
        assert.deepEqual(await completeId(client, 'terminal://{id}/screen', ''), terms);
        assert.deepEqual(await completeId(client, 'job://{id}/output', 'bash-'), [job]);
        assert.deepEqual(await completeId(client, 'job://{id}/output', 'term-'), []);
      });
    });
  }

  test("over HTTP another owner hears none of the first one's changes and never sees its ids", async (t) => {
    const server = await httpServer(t);
    const a = await httpClient(t, server);
    const b = await httpClient(t, server);
    const capabilities = a.getServerCapabilities() ?? {};
    if (!subscribable(capabilities) && !listChanging(capabilities) && !completing(capabilities)) {
      t.skip(`dsh declares none of resources.subscribe, resources.listChanged, completions yet (${JSON.stringify(capabilities)})`);
      return;
    }
    const seenByA = recordChanges(a);
    const seenByB = recordChanges(b);
    const term = await openTerminal(a);
    const job = await startJob(a, 'echo owner-a-secret');
    const [screen, output] = [screenUri(term), outputUri(job)];
    if (subscribable(capabilities)) {
      await a.subscribeResource({ uri: screen });
      for (const uri of [screen, output]) {
        await rejectsWithCode(b.subscribeResource({ uri }), RESOURCE_NOT_FOUND, `B subscribes to A's ${uri}`);
      }
      await ok(a, 'terminal_send', { id: term, input: 'echo for-a-only' });
      await waitFor(() => seenByA.updated.includes(screen), NOTIFIED_WITHIN_MS, `A's resources/updated ${screen}`);
    }
    if (listChanging(capabilities)) {
      await waitFor(() => seenByA.listChanged > 0, NOTIFIED_WITHIN_MS, "A's resources/list_changed");
    }
    if (completing(capabilities)) {
      assert.deepEqual(await completeId(a, 'terminal://{id}/screen', 'term-'), [term]);
      assert.deepEqual(await completeId(b, 'terminal://{id}/screen', ''), [], "B completes A's terminal ids");
      assert.deepEqual(await completeId(b, 'job://{id}/output', ''), [], "B completes A's job ids");
    }
    await sleep(SETTLE_MS); // anything misrouted to B has arrived by now
    assert.deepEqual(seenByB, { updated: [], listChanged: 0 }, "B heard A's changes");
  });
});
