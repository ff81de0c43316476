/**
 * MCP 2026-07-28 over stdio and HTTP with the TypeScript SDK v2 client (`@modelcontextprotocol/client`,
 * pinned): with version negotiation on (`versionNegotiation: { mode: 'auto' }`; the v2
 * client's default is the 2025 handshake) it probes `server/discover`, lands on 2026-07-28
 * without falling back, and is served: tools, bash, and a REPL opened in one request and
 * read in a later one (over stdio the connection is the owner in both eras).
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { dshBin, httpServer, onCleanup, OPENED_RE, REQUEST_TIMEOUT_MS, scratch, text } from './support.mjs';

async function modernClient(t) {
  const { work, args, env } = scratch(t);
  const transport = new StdioClientTransport({ command: dshBin(), args: [...args, 'serve'], env, cwd: work });
  const client = new Client({ name: 'dsh-e2e-typescript-v2', version: '0.0.0' }, { versionNegotiation: { mode: 'auto' } });
  onCleanup(t, () => client.close());
  await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  return client;
}

test('the v2 client negotiates 2026-07-28 and keeps a REPL across stateless requests', async (t) => {
  const client = await modernClient(t);
  assert.equal(client.getNegotiatedProtocolVersion(), '2026-07-28');
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
  const server = await httpServer(t);
  const transport = new StreamableHTTPClientTransport(new URL(server.url), {
    requestInit: { headers: { Authorization: `Bearer ${server.token}` } },
  });
  const client = new Client({ name: 'dsh-e2e-typescript-v2', version: '0.0.0' }, { versionNegotiation: { mode: 'auto' } });
  onCleanup(t, () => client.close());
  await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
  assert.equal(client.getNegotiatedProtocolVersion(), '2026-07-28');
  const ran = await client.callTool({ name: 'bash', arguments: { command: 'echo http-v2-$((6*7))', description: 'x' } });
  assert.match(text(ran), /http-v2-42/, server.stderr());
  const opened = text(await client.callTool({ name: 'terminal_open', arguments: {} }));
  const id = opened.match(OPENED_RE)?.[1];
  assert.ok(id, opened);
  const send = (input, wait) => client.callTool({ name: 'terminal_send', arguments: { id, input, wait } });
  await send('export KEPT=41', { quiet_ms: 300 });
  const answered = await send('echo kept-$((KEPT + 1))', { pattern: 'kept-42', timeout_ms: 10000 });
  assert.match(text(answered), /kept-42/);
});
