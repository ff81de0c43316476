/**
 * dsh's MCP resources through the TypeScript SDK, over stdio and streamable HTTP: a
 * terminal opened with `terminal_open` and a job started with `bash` run_in_background
 * are listed by `listResources` as `terminal://term-N/screen` and `job://bash-N/output`
 * (text/plain, named, described) and read back by `readResource` (the screen shows an
 * `echo` marker, the job its output); `listResourceTemplates` names both templates; a
 * bogus URI, an id that never existed and a URI of no known shape are an McpError
 * -32002. Over HTTP, a second session (another owner) lists none of the first's
 * resources, and reading one of them is the very error an id that never existed gets.
 */

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  httpClient,
  httpServer,
  listedUris,
  ok,
  openTerminal,
  outputUri,
  readText,
  readUntil,
  rejectsWithCode,
  RESOURCE_NOT_FOUND,
  screenUri,
  startJob,
  TRANSPORTS,
} from './support.mjs';

/** An error's code and message with `uri` in it replaced, to compare errors for different URIs. */
function masked(error, uri) {
  const data = JSON.stringify(error.data ?? null).replaceAll(uri, '<URI>');
  return [error.code, error.message.replaceAll(uri, '<URI>'), data];
}

describe('resources', { concurrency: true }, () => {
  for (const [transport, connect] of Object.entries(TRANSPORTS)) {
    describe(`over ${transport}`, { concurrency: true }, () => {
      test('the templates are terminal://{id}/screen, job://{id}/output and checkpoint://{id}/changes; a new connection has no resources', async (t) => {
        const client = await connect(t);
        const { resourceTemplates } = await client.listResourceTemplates();
        const byTemplate = new Map(resourceTemplates.map((template) => [template.uriTemplate, template]));
        assert.deepEqual(
          [...byTemplate.keys()].sort(),
          ['checkpoint://{id}/changes', 'job://{id}/output', 'terminal://{id}/screen'],
          JSON.stringify(resourceTemplates),
        );
        for (const template of byTemplate.values()) {
          assert.equal(template.mimeType, 'text/plain', JSON.stringify(template));
          assert.ok(template.name && template.description, JSON.stringify(template));
        }
        assert.deepEqual(await listedUris(client), []);
      });

      test('a terminal screen and a job output are listed and read', async (t) => {
        const client = await connect(t);
        const term = await openTerminal(client);
        await ok(client, 'terminal_send', { id: term, input: 'echo screen-$((6*7))-marker' });
        const job = await startJob(client, 'echo job-$((5*5))-out; echo second-line');
        const screen = screenUri(term);
        const output = outputUri(job);

        const { resources } = await client.listResources();
        const byUri = new Map(resources.map((resource) => [resource.uri, resource]));
        assert.deepEqual([...byUri.keys()].sort(), [output, screen].sort(), JSON.stringify(resources));
        for (const [uri, word] of [
          [screen, 'terminal'],
          [output, 'job'],
        ]) {
          const resource = byUri.get(uri);
          assert.equal(resource.mimeType, 'text/plain', JSON.stringify(resource));
          assert.ok(resource.name, JSON.stringify(resource));
          assert.match(resource.description ?? '', new RegExp(word, 'i'), JSON.stringify(resource));
        }

        const shown = await readUntil(client, screen, 'screen-42-marker');
        assert.ok(shown.includes('echo screen-$((6*7))-marker'), JSON.stringify(shown));
        assert.ok(!shown.includes('\x1b'), `no escape sequences on the screen: ${JSON.stringify(shown)}`);
        await readUntil(client, output, 'second-line');
        assert.equal(await readText(client, output), 'job-25-out\nsecond-line\n');
      });

      test('a bogus URI is an McpError -32002', async (t) => {
        const client = await connect(t);
        const term = await openTerminal(client);
        for (const uri of [
          'terminal://term-999/screen',
          'job://bash-999/output',
          `terminal://${term}/plain`,
          'file:///etc/passwd',
          'bogus:nothing',
        ]) {
          await rejectsWithCode(client.readResource({ uri }), RESOURCE_NOT_FOUND, `resources/read ${uri}`);
        }
        // The connection goes on.
        assert.equal(typeof (await readText(client, screenUri(term))), 'string');
      });
    });
  }

  test("over HTTP another session (another owner) neither lists nor reads the first one's resources", async (t) => {
    const server = await httpServer(t);
    const a = await httpClient(t, server);
    const b = await httpClient(t, server);
    const term = await openTerminal(a);
    const job = await startJob(a, 'echo owner-a-secret');
    const [screen, output] = [screenUri(term), outputUri(job)];
    await readUntil(a, output, 'owner-a-secret');
    assert.deepEqual(await listedUris(a), [output, screen].sort());

    assert.deepEqual(await listedUris(b), [], "B lists A's resources");
    for (const [theirs, never] of [
      [screen, 'terminal://term-999/screen'],
      [output, 'job://bash-999/output'],
    ]) {
      const theirsError = await rejectsWithCode(b.readResource({ uri: theirs }), RESOURCE_NOT_FOUND, `B reads ${theirs}`);
      const neverError = await rejectsWithCode(b.readResource({ uri: never }), RESOURCE_NOT_FOUND, `B reads ${never}`);
      assert.deepEqual(masked(theirsError, theirs), masked(neverError, never));
      assert.ok(!JSON.stringify(theirsError).includes('owner-a-secret'));
    }

    const own = await startJob(b, 'echo owner-b');
    assert.deepEqual(await listedUris(b), [outputUri(own)]);
    assert.ok((await readText(a, output)).includes('owner-a-secret'));
  });
});
