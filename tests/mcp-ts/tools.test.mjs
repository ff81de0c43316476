/**
 * The handshake and tools of `dsh serve` through the official TypeScript SDK, over
 * stdio and over streamable HTTP: `initialize` (server info `dsh`; the tools capability
 * with listChanged, logging and resources declared), `tools/list` (`bash` and the
 * terminal tools with their input schemas), a `bash` call's text, bad arguments as a
 * result with isError and `structuredContent.code` INVALID_ARGUMENTS, an unknown tool
 * as a JSON-RPC error (-32602), progress notifications for a call with an `onprogress`
 * callback while it runs, and `notifications/tools/list_changed` when a plugin (the
 * `echo` test plugin) is added to the watched plugin directory, its tool then listed
 * and called.
 */

import assert from 'node:assert/strict';
import { copyFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { McpError, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { builtPlugin, call, droppedProgress, INVALID_PARAMS, rejectsWithCode, show, text, TRANSPORTS, waitFor } from './support.mjs';

const TERMINAL_TOOLS = ['terminal_open', 'terminal_send', 'terminal_read', 'terminal_signal', 'terminal_close', 'terminal_list'];

describe('tools', { concurrency: true }, () => {
  for (const [transport, connect] of Object.entries(TRANSPORTS)) {
    describe(`over ${transport}`, { concurrency: true }, () => {
      test('initialize names dsh and declares tools (listChanged), logging and resources', async (t) => {
        const client = await connect(t);
        assert.equal(client.getServerVersion()?.name, 'dsh', JSON.stringify(client.getServerVersion()));
        const capabilities = client.getServerCapabilities();
        assert.equal(capabilities?.tools?.listChanged, true, JSON.stringify(capabilities));
        assert.ok(capabilities.logging, JSON.stringify(capabilities));
        assert.ok(capabilities.resources, JSON.stringify(capabilities));
        assert.ok(client.getInstructions(), 'dsh gives instructions');
      });

      test('tools/list has bash and the terminal tools with input schemas', async (t) => {
        const client = await connect(t);
        const { tools } = await client.listTools();
        const byName = new Map(tools.map((tool) => [tool.name, tool]));
        for (const name of ['bash', ...TERMINAL_TOOLS]) {
          const tool = byName.get(name);
          assert.ok(tool, `no ${name} in tools/list: ${[...byName.keys()].join(', ')}`);
          assert.equal(tool.inputSchema.type, 'object', JSON.stringify(tool));
          assert.ok(tool.description, JSON.stringify(tool));
        }
        const bash = byName.get('bash').inputSchema;
        assert.deepEqual([...bash.required].sort(), ['command', 'description'], JSON.stringify(bash));
        assert.equal(bash.properties.command.type, 'string', JSON.stringify(bash));
        assert.equal(bash.properties.run_in_background.type, 'boolean', JSON.stringify(bash));
        assert.equal(bash.additionalProperties, false, JSON.stringify(bash));
        assert.equal(byName.get('terminal_send').inputSchema.properties.input.type, 'string');
      });

      test('bash echo hi returns hi', async (t) => {
        const client = await connect(t);
        const args = { command: 'echo hi', description: 'say hi' };
        const result = await call(client, 'bash', args);
        assert.equal(result.isError, false, show('bash', args, result));
        assert.equal(text(result), 'hi\n[exit code: 0]', show('bash', args, result));
      });

      test('a call without command is an INVALID_ARGUMENTS result', async (t) => {
        const client = await connect(t);
        const args = { description: 'no command' };
        const result = await call(client, 'bash', args);
        const where = show('bash', args, result);
        assert.equal(result.isError, true, where);
        assert.equal(result.structuredContent?.code, 'INVALID_ARGUMENTS', where);
        const { message } = result.structuredContent;
        assert.match(message, /command/, where);
        assert.ok(text(result).startsWith(`INVALID_ARGUMENTS: ${message}`), where);
      });

      test('an unknown tool is a JSON-RPC error and the session goes on', async (t) => {
        const client = await connect(t);
        const error = await rejectsWithCode(
          call(client, 'no_such_tool', { command: 'echo hi', description: 'd' }),
          INVALID_PARAMS,
          'tools/call no_such_tool',
        );
        assert.ok(error instanceof McpError, error);
        assert.match(error.message, /no_such_tool/);
        assert.equal(text(await call(client, 'bash', { command: 'echo ok', description: 'd' })), 'ok\n[exit code: 0]');
      });

      test('a running call with onprogress gets progress notifications before its result', async (t) => {
        const client = await connect(t);
        const progress = [];
        let returned = false;
        const args = { command: 'sleep 1.5; echo done', description: 'wait a while' };
        const errorsBefore = client.sdkErrors.length;
        const result = await call(client, 'bash', args, {
          onprogress: (notification) => progress.push({ ...notification, returned }),
        });
        returned = true;
        assert.equal(text(result), 'done\n[exit code: 0]', show('bash', args, result));
        const before = progress.filter((p) => !p.returned);
        // The server's interval is 250 ms (the default): several while it sleeps. Over stdio
        // the SDK drops those it reads in the same chunk as the result (typescript-sdk#2580),
        // all of them when a loaded machine kept it from reading for the whole call: they
        // were sent, before the result, and count.
        const dropped = droppedProgress(client.sdkErrors.slice(errorsBefore));
        assert.ok(before.length + dropped >= 1, `no progress before the result: ${JSON.stringify(progress)}`);
        const values = progress.map((p) => p.progress);
        assert.deepEqual(
          values,
          [...values].sort((a, b) => a - b),
          `progress must increase: ${values}`,
        );
        assert.equal(new Set(values).size, values.length, `progress must increase: ${values}`);
      });

      test('a plugin added to the plugin directory brings tools/list_changed and its tool', async (t) => {
        const client = await connect(t, { plugins: [] });
        let changes = 0;
        client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
          changes += 1;
        });
        const names = async () => (await client.listTools()).tools.map((tool) => tool.name);
        assert.ok(!(await names()).includes('echo'), 'echo before its plugin is there');
        const before = changes;
        // Written under another name, then renamed into place (a half-written file is not read).
        const { pluginsDir } = client.scratch;
        copyFileSync(builtPlugin('echo'), join(pluginsDir, 'echo.wasm.partial'));
        renameSync(join(pluginsDir, 'echo.wasm.partial'), join(pluginsDir, 'echo.wasm'));
        await waitFor(() => changes > before, 20_000, 'notifications/tools/list_changed after adding echo.wasm');
        let listed = [];
        await waitFor(
          async () => (listed = await names()).includes('echo'),
          10_000,
          () => `echo in tools/list: ${listed}`,
        );
        assert.ok(listed.includes('bash'), listed);
        assert.equal(text(await call(client, 'echo', { text: 'hot' })), 'hot');
      });
    });
  }
});
