"""event_sink: append every record of the session's event log to a file, one JSON
object a line (dsh:plugin@0.2.0, `observer` world).

It sees each record (`tool/call`, `tool/result`, `approval`, `job/start`, `job/end`)
after the event log has it, off the call's path, and appends the record's JSON and a
newline to the file its settings name (`path`, absolute), in a directory granted to it
read-write:

    [pipeline]
    observers = ["event_sink"]
    [plugins.event_sink]
    interfaces = ["log"]
    fs = [{ path = "/var/log/dsh", mode = "rw" }]
    settings = { path = "/var/log/dsh/events.jsonl" }

Without a `path`, or when the file cannot be written, it logs why and drops the record
(an observer can change nothing, and a failed record must not stop the next).

Build: componentize-py -d ../../../../wit/v0.2.0 -w observer componentize app -o event_sink.wasm
"""

import json
import os

import wit_world
from wit_world.imports import log


def sink_path(event):
    """The file of the settings' `path`, or None when they name none."""
    try:
        settings = json.loads(event.settings_json or "{}")
    except ValueError:
        return None
    path = settings.get("path") if isinstance(settings, dict) else None
    return path if isinstance(path, str) and path else None


class WitWorld(wit_world.WitWorld):
    def observe(self, event):
        path = sink_path(event)
        if path is None:
            log.write(
                log.Level.WARN,
                f"event_sink: no `path` in its settings: dropped a {event.kind} record",
            )
            return
        line = event.json.rstrip("\n").encode("utf-8") + b"\n"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                # The whole line in one write, so records appended side by side do not mix.
                written = os.write(fd, line)
                while written < len(line):
                    written += os.write(fd, line[written:])
            finally:
                os.close(fd)
        except OSError as e:
            log.write(
                log.Level.WARN, f"event_sink: cannot append a {event.kind} record to {path}: {e}"
            )
