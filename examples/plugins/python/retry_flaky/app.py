"""retry_flaky: run a call again when it failed in a way another run may fix
(dsh:plugin@0.2.0, `middleware` world).

It runs the rest of the call (the middleware after it, then the tool) and, while the
result is an error with the code `plugin-trap`, `internal` or `timeout`, runs it once
more, at most `attempts` runs in all (its settings in dsh.toml; default 2). It returns
the last result, failed or not; any other result (a success, or another error) is
returned as it is.

    [pipeline]
    middleware = ["retry_flaky"]
    [plugins.retry_flaky]
    interfaces = ["log"]
    settings = { attempts = 3 }

A run again is the tool run again with the same arguments: select it only where that
is safe. The host allows a call at most `[limits] max_next_runs` runs of the rest; the
host's own retry of idempotent tools (`[limits] max_retries`) happens inside each run.

Build: componentize-py -d ../../../../wit/v0.2.0 -w middleware componentize app -o retry_flaky.wasm
"""

import json

import wit_world
from wit_world.imports import log, types
from wit_world.imports import next as rest

# The codes a run again may fix: the plugin trapped, failed unexpectedly, or was slow.
RETRIED = {types.ErrorCode.PLUGIN_TRAP, types.ErrorCode.INTERNAL, types.ErrorCode.TIMEOUT}

DEFAULT_ATTEMPTS = 2


def attempts(call):
    """The most runs in all: settings `attempts` (a whole number, at least 1), else 2."""
    try:
        settings = json.loads(call.context.settings_json or "{}")
    except ValueError:
        return DEFAULT_ATTEMPTS
    n = settings.get("attempts", DEFAULT_ATTEMPTS) if isinstance(settings, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        return n
    return DEFAULT_ATTEMPTS


class WitWorld(wit_world.WitWorld):
    def handle(self, call):
        limit = attempts(call)
        result = rest.run(None)
        runs = 1
        while runs < limit and result.error is not None and result.error.code in RETRIED:
            runs += 1
            code = result.error.code.name.lower().replace("_", "-")
            log.write(
                log.Level.INFO,
                f"retry_flaky: {call.tool} failed ({code}): run {runs} of at most {limit}",
            )
            result = rest.run(None)
        return result
