/**
 * MCP 2026-07-28's round trips and tasks with the TypeScript SDK v2 client
 * (`@modelcontextprotocol/client` 2.4.0, pinned; negotiation on, see modern-support.mjs),
 * over stdio and HTTP.
 *
 * Round trips: a guard's ask (`ask_git_push`) and a plugin's sampling and form (the
 * conformance plugin) come back as the call's `input_required` result; the SDK fulfils
 * them through the handlers registered for `elicitation/create` and
 * `sampling/createMessage` (for the capabilities the client declared) and retries the
 * call with the answers. The wire shows the `input_required` results and no request from
 * the server. A declined ask is DENIED and runs nothing; a client that declared no
 * elicitation is denied without a round trip.
 *
 * Tasks (the `io.modelcontextprotocol/tasks` extension, declared in the client's
 * capabilities, which the SDK sends in every request's `_meta`): a background job is a
 * task, polled with `tasks/get` to its result and cancelled with `tasks/cancel` (its
 * processes gone, checked in /proc). The SDK has no tasks API, and 2.4.0 cannot return
 * a task as a call's result: its 2026-07-28 codec refuses any `resultType` but `complete`
 * and `input_required` (`decodeResult`, core-internal/src/wire/rev2026-07-28/codec.ts:234
 * in its source map; dist/src-CeKsbNLO.mjs:3993), so `callTool` rejects with
 * `SdkError(UNSUPPORTED_RESULT_TYPE, { resultType: 'task' })`, which the test asserts,
 * and the task's id is read from the result the SDK's transport delivered. `tasks/get`
 * and `tasks/cancel` go through the SDK's generic `client.request` with a result schema:
 * the one path its era gate lets those two names through on 2026-07-28
 * (`isExtensionReusedRequestMethod`, core-internal/src/wire/codec.ts:340,
 * shared/protocol.ts:1289; without a schema it throws METHOD_NOT_SUPPORTED_BY_PROTOCOL_VERSION).
 */

import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { SdkError, SdkErrorCode } from '@modelcontextprotocol/client';

import {
  callModern,
  marker,
  MODERN,
  modernHttpClient,
  modernStdioClient,
  okModern,
  processesAppear,
  processesGone,
  RESULT,
  TASK,
  TASKS_EXTENSION,
  wireRequests,
  wireResults,
} from './modern-support.mjs';
import { INVALID_PARAMS, REQUEST_TIMEOUT_MS, rejectsWithCode, text, waitFor } from './support.mjs';

const ASKING = '[pipeline]\nguards = ["ask_git_push"]\n';
/** Writes pushed.txt when it runs; `git push` is what the guard asks about. */
const PUSH = { command: 'echo would-push | tee pushed.txt; git push origin main 2>/dev/null; true', description: 'push' };

/** The methods of the input requests of each `input_required` result on the client's wire. */
function askedOnTheWire(client) {
  return wireResults(client, 'input_required').map((result) => {
    assert.equal(typeof result.requestState, 'string', JSON.stringify(result));
    return Object.values(result.inputRequests).map((request) => request.method);
  });
}

async function aGuardsAskIsARoundTrip(t, open) {
  const asked = [];
  const answers = ['decline', 'accept'];
  const client = await open(t, {
    config: ASKING,
    capabilities: { elicitation: { form: {} } },
    handlers: {
      'elicitation/create': async (request) => {
        asked.push(request.params);
        const action = answers.shift();
        return action === 'accept' ? { action, content: {} } : { action };
      },
    },
  });
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  const pushed = join(client.scratch.work, 'pushed.txt');
  const declined = await callModern(client, 'bash', PUSH);
  assert.equal(declined.isError, true, JSON.stringify(declined));
  assert.match(text(declined), /^DENIED: guard ask_git_push asked for approval .* and it was refused$/);
  assert.equal(existsSync(pushed), false, 'the declined command ran');
  const accepted = await callModern(client, 'bash', PUSH);
  assert.equal(accepted.isError, false, JSON.stringify(accepted));
  assert.match(text(accepted), /^would-push\n/);
  assert.equal(readFileSync(pushed, 'utf8'), 'would-push\n');
  assert.equal(asked.length, 2, JSON.stringify(asked));
  for (const params of asked) {
    assert.equal(params.mode, 'form', JSON.stringify(params));
    assert.match(params.message, /^Guard ask_git_push asks for approval: `git push origin main`/, params.message);
  }
  assert.deepEqual(askedOnTheWire(client), [['elicitation/create'], ['elicitation/create']]);
  assert.deepEqual(wireRequests(client), []);
}

test("over stdio a guard's ask is an input_required round trip the v2 client answers: declined is DENIED, accepted runs", (t) =>
  aGuardsAskIsARoundTrip(t, modernStdioClient));
test("over HTTP a guard's ask is an input_required round trip the v2 client answers: declined is DENIED, accepted runs", (t) =>
  aGuardsAskIsARoundTrip(t, modernHttpClient));

test("a v2 client that declared no elicitation is denied a guard's ask without a round trip", async (t) => {
  const client = await modernStdioClient(t, { config: ASKING });
  const result = await callModern(client, 'bash', PUSH);
  assert.equal(result.isError, true, JSON.stringify(result));
  assert.match(text(result), /approval required/);
  assert.equal(existsSync(join(client.scratch.work, 'pushed.txt')), false, 'the command ran');
  assert.deepEqual(askedOnTheWire(client), []);
});

const GRANTS = '[plugins.conformance]\ninterfaces = ["sampling", "elicitation"]\n';

async function aPluginsAsksAreRoundTrips(t, open) {
  const samplings = [];
  const forms = [];
  const client = await open(t, {
    config: GRANTS,
    plugins: ['conformance'],
    capabilities: { sampling: {}, elicitation: { form: {} } },
    handlers: {
      'sampling/createMessage': async (request) => {
        samplings.push(request.params);
        return {
          role: 'assistant',
          content: { type: 'text', text: 'This is a test response from the client' },
          model: 'test-model',
          stopReason: 'endTurn',
        };
      },
      'elicitation/create': async (request) => {
        forms.push(request.params);
        return { action: 'accept', content: { username: 'testuser', email: 'test@example.com' } };
      },
    },
  });
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
  const sampled = await okModern(client, 'test_sampling', { prompt: 'Test prompt for sampling' });
  assert.equal(sampled, 'LLM response: This is a test response from the client');
  const elicited = await okModern(client, 'test_elicitation', { message: 'Please provide your information' });
  const prefix = 'User response: action: accept, content: ';
  assert.ok(elicited.startsWith(prefix), elicited);
  assert.deepEqual(JSON.parse(elicited.slice(prefix.length)), { username: 'testuser', email: 'test@example.com' });
  // What the model was sent: the prompt alone, 100 tokens, no tools.
  assert.equal(samplings.length, 1, JSON.stringify(samplings));
  const [sampling] = samplings;
  assert.equal(sampling.maxTokens, 100);
  assert.equal(sampling.tools, undefined);
  assert.deepEqual(sampling.messages, [{ role: 'user', content: { type: 'text', text: 'Test prompt for sampling' } }]);
  // What the user was shown: the message and the scenario's form.
  assert.equal(forms.length, 1, JSON.stringify(forms));
  const [form] = forms;
  assert.equal(form.message, 'Please provide your information');
  assert.deepEqual(Object.keys(form.requestedSchema.properties).sort(), ['email', 'username']);
  assert.deepEqual([...form.requestedSchema.required].sort(), ['email', 'username']);
  assert.deepEqual(askedOnTheWire(client), [['sampling/createMessage'], ['elicitation/create']]);
  assert.deepEqual(wireRequests(client), []);
}

test("over stdio a plugin's sampling and form are input_required round trips the v2 client answers", (t) =>
  aPluginsAsksAreRoundTrips(t, modernStdioClient));
test("over HTTP a plugin's sampling and form are input_required round trips the v2 client answers", (t) =>
  aPluginsAsksAreRoundTrips(t, modernHttpClient));

/**
 * Starts `command` as a background job of a client that declared the Tasks extension:
 * dsh answers with a task, which SDK 2.4.0 refuses as a call's result (see the top of the
 * file); returns the task as the wire brought it.
 */
async function startTask(client, command) {
  const before = client.wire.length;
  const args = { command, description: 'v2 task', run_in_background: true };
  let error;
  try {
    const result = await callModern(client, 'bash', args);
    assert.fail(`SDK 2.4.0 returned a task result as ${JSON.stringify(result)}: it can decode tasks now, use that`);
  } catch (caught) {
    error = caught;
  }
  if (error instanceof assert.AssertionError) throw error;
  assert.ok(error instanceof SdkError, String(error?.stack ?? error));
  assert.equal(error.code, SdkErrorCode.UnsupportedResultType, String(error.stack));
  assert.deepEqual(error.data, { resultType: 'task', method: 'tools/call' });
  const tasks = wireResults({ wire: client.wire.slice(before) }, 'task');
  assert.equal(tasks.length, 1, JSON.stringify(client.wire.slice(before)));
  const [task] = tasks;
  assert.match(task.taskId, /^bash-\d+$/, JSON.stringify(task));
  assert.equal(task.status, 'working', JSON.stringify(task));
  return task;
}

const getTask = (client, taskId) => client.request({ method: 'tasks/get', params: { taskId } }, TASK, { timeout: REQUEST_TIMEOUT_MS });
const cancelTask = (client, taskId) =>
  client.request({ method: 'tasks/cancel', params: { taskId } }, RESULT, { timeout: REQUEST_TIMEOUT_MS });

/** Polls `tasks/get` until the task is no longer working; returns it. */
function settled(client, taskId) {
  let last;
  return waitFor(
    async () => {
      last = await getTask(client, taskId);
      assert.equal(last.taskId, taskId, JSON.stringify(last));
      return last.status === 'working' ? undefined : last;
    },
    30_000,
    () => `task ${taskId} to settle; last: ${JSON.stringify(last)}`,
  );
}

async function aJobIsATask(t, open) {
  const client = await open(t, { capabilities: { extensions: { [TASKS_EXTENSION]: {} } } });
  assert.equal(client.getNegotiatedProtocolVersion(), MODERN);

  // Polled to its result.
  const { taskId: done } = await startTask(client, 'until [ -e go ]; do sleep 0.05; done; echo task-$((6*7))');
  assert.equal((await getTask(client, done)).status, 'working');
  writeFileSync(join(client.scratch.work, 'go'), '');
  const finished = await settled(client, done);
  assert.equal(finished.status, 'completed', JSON.stringify(finished));
  assert.equal(finished.result.isError, false, JSON.stringify(finished));
  // The `go` file this test writes while the task runs is a change of the task's call:
  // its result ends with dsh's undo line, which is not the tool's.
  const toolContent = finished.result.content.filter((item) => !item.text?.startsWith('[changed: '));
  assert.deepEqual(toolContent, [{ type: 'text', text: 'task-42\n[exit code: 0]' }]);

  // Cancelled with its processes.
  const sleep = marker(t);
  const { taskId: running } = await startTask(client, `sleep ${sleep} & sleep ${sleep}; wait`);
  assert.notEqual(running, done);
  await processesAppear(`sleep ${sleep}`, 2);
  assert.equal((await getTask(client, running)).status, 'working');
  await cancelTask(client, running);
  await processesGone(sleep);
  const cancelled = await settled(client, running);
  assert.equal(cancelled.status, 'cancelled', JSON.stringify(cancelled));

  // The job tools see the tasks' jobs.
  const listed = await okModern(client, 'job_list', {});
  const [first, second] = listed.split('\n').map((line) => line.split('\t'));
  assert.deepEqual(first.slice(0, 3), [done, 'bash', 'exited with code 0'], listed);
  assert.deepEqual(second.slice(0, 2), [running, 'bash'], listed);
  assert.match(second[2], /^killed by signal \d+/, listed);

  // A task that does not exist.
  const missing = await rejectsWithCode(getTask(client, 'bash-999'), INVALID_PARAMS, 'tasks/get bash-999');
  assert.match(missing.message, /bash-999/);
}

test('over stdio a job is a task the v2 client polls with tasks/get and cancels with tasks/cancel, its processes gone', (t) =>
  aJobIsATask(t, modernStdioClient));
test('over HTTP a job is a task the v2 client polls with tasks/get and cancels with tasks/cancel, its processes gone', (t) =>
  aJobIsATask(t, modernHttpClient));
