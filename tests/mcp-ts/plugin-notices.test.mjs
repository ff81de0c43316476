/**
 * What a plugin says while a call runs, and what it returns beyond text, through the
 * TypeScript SDK over stdio and streamable HTTP, with the `rich` test plugin
 * (plugins/rich, granted `log` and `progress`): after `logging/setLevel debug` its log
 * lines arrive as `notifications/message` (logger `rich`, every level down to debug;
 * before a level is set, none); its progress reports arrive on the call's `onprogress`
 * as percentages of 100; its structured output matches the `outputSchema` the SDK
 * validates it against, and its failure comes back as the tool's error.
 *
 * One test is marked todo over stdio (it runs, its failure is reported, the run
 * passes): where an SDK 1.x bug meets dsh's answers, progress read in the same chunk as
 * the result is dropped.
 */

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { call, ok, show, text, TRANSPORTS, waitFor } from './support.mjs';

const RICH = { config: '[plugins.rich]\ninterfaces = ["log", "progress"]\n', plugins: ['rich'] };

describe('plugin notices', { concurrency: true }, () => {
  for (const [transport, connect] of Object.entries(TRANSPORTS)) {
    describe(`over ${transport}`, { concurrency: true }, () => {
      test('after setLoggingLevel debug a plugin log line arrives as notifications/message', async (t) => {
        const client = await connect(t, RICH);
        const lines = [];
        client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
          lines.push(notification.params);
        });
        assert.equal(await ok(client, 'rich_log', {}), 'logged');
        // dsh sends a call's notifications before its result: none can still come.
        assert.deepEqual(lines, [], 'no log line before the client sets a level');

        await client.setLoggingLevel('debug');
        assert.equal(await ok(client, 'rich_log', {}), 'logged');
        await waitFor(
          () => lines.some((line) => line.data === 'rich error line'),
          10_000,
          () => `the log lines; got ${JSON.stringify(lines)}`,
        );
        const got = lines.map((line) => [line.level, line.logger, line.data]);
        for (const expected of [
          ['debug', 'rich', 'rich debug line'],
          ['info', 'rich', 'rich info line'],
          ['warning', 'rich', 'rich warn line'],
          ['error', 'rich', 'rich error line'],
        ]) {
          assert.ok(
            got.some((line) => JSON.stringify(line) === JSON.stringify(expected)),
            `no ${expected}: ${JSON.stringify(got)}`,
          );
        }
        assert.ok(
          got.every(([, logger]) => logger === 'rich'),
          JSON.stringify(got),
        );
      });

      // Over stdio the four reports and the result reach the SDK in one read: it handles a
      // response at once but a notification a microtask later, so the response has retired
      // the progress handler before the reports are looked at, and they go to `onerror` as
      // "unknown token" (modelcontextprotocol/typescript-sdk#2580, open for 1.x). dsh sends
      // them before the result, as it must; nothing on its side can help.
      const dropped = transport === 'stdio' && 'typescript-sdk#2580: progress read in the same chunk as the result is dropped';
      test('a plugin progress report arrives on onprogress', { todo: dropped }, async (t) => {
        const client = await connect(t, RICH);
        const seen = [];
        const result = await call(client, 'rich_progress', { steps: 4 }, { onprogress: (p) => seen.push(p) });
        assert.equal(text(result), '4 steps done', show('rich_progress', { steps: 4 }, result));
        await waitFor(
          () => seen.filter((p) => p.message?.startsWith('step ')).length >= 4,
          3_000,
          () => `4 steps; got ${JSON.stringify(seen)}`,
        );
        const steps = seen.filter((p) => p.message?.startsWith('step '));
        assert.deepEqual(
          steps.map((p) => [p.progress, p.total, p.message]),
          [1, 2, 3, 4].map((i) => [25 * i, 100, `step ${i} of 4`]),
          JSON.stringify(seen),
        );
      });

      test('structured output matches the output schema the SDK checks it against', async (t) => {
        const client = await connect(t, RICH);
        const { tools } = await client.listTools();
        const structured = tools.find((tool) => tool.name === 'rich_structured');
        assert.deepEqual(structured?.outputSchema?.required, ['count', 'label'], JSON.stringify(structured));
        const result = await call(client, 'rich_structured', { valid: true });
        assert.equal(result.isError, false, show('rich_structured', { valid: true }, result));
        assert.deepEqual(result.structuredContent, { count: 3, label: 'three' });
      });

      // A failed result of a tool with an `outputSchema` carries no `structuredContent`:
      // the SDK checks it against that schema (after `tools/list`, even when `isError` is
      // true: modelcontextprotocol/typescript-sdk#1943, fixed on main, still so in 1.x)
      // and would throw McpError -32602 instead of returning the tool's error.
      test(
        "a failed call of a tool with an output schema comes back as the tool's error",
        async (t) => {
          const client = await connect(t, RICH);
          await client.listTools(); // the SDK learns the output schemas here
          for (const [args, code] of [
            [{ valid: false }, 'INVALID_OUTPUT'],
            [{ valid: 'no' }, 'INVALID_ARGUMENTS'],
          ]) {
            const result = await call(client, 'rich_structured', args);
            assert.equal(result.isError, true, show('rich_structured', args, result));
            assert.match(text(result), new RegExp(`^${code}: `), show('rich_structured', args, result));
            assert.equal(result.structuredContent, undefined, show('rich_structured', args, result));
          }
        },
      );
    });
  }
});
