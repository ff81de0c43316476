"""guard_paths: deny `bash` commands that name a protected path (dsh:plugin@0.2.0, `guard` world).

The protected paths are the guard's settings in dsh.toml:

    [pipeline]
    guards = ["guard_paths"]
    [plugins.guard_paths]
    interfaces = ["log"]
    settings = { paths = ["/etc/shadow", "secrets/"] }

Build: componentize-py -d ../../../../wit/v0.2.0 -w guard componentize app -o guard_paths.wasm
"""

import json

import wit_world
from wit_world.imports import log

# Named in every denial: which build of the guard decided (the tests hot-swap it).
VERSION = "1"


class WitWorld(wit_world.WitWorld):
    def check(self, call):
        if call.tool != "bash":
            return wit_world.Verdict_Allow()
        paths = json.loads(call.context.settings_json or "{}").get("paths", [])
        command = json.loads(call.args_json).get("command", "")
        for path in paths:
            if path and path in command:
                log.write(log.Level.INFO, f"guard_paths: denied a command naming {path}")
                return wit_world.Verdict_Deny(
                    f"the command names {path}, which guard_paths (v{VERSION}) protects"
                )
        return wit_world.Verdict_Allow()
