"""todos: count the TODO and FIXME lines under a path, per file (dsh:plugin@0.2.0, `tool` world).

Build: componentize-py -d ../../../../wit/v0.2.0 -w tool componentize app -o todos.wasm
"""

import json
import os

import wit_world
from wit_world.imports import log, types

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "A file or directory, absolute or relative to the workspace",
        }
    },
    "required": ["path"],
    "additionalProperties": False,
}


def count_lines(text):
    return sum(1 for line in text.split("\n") if "TODO" in line or "FIXME" in line)


def scan(root):
    """(relative path, count) of every file under root with a match, sorted by path."""
    found = []
    if not os.path.isdir(root):
        with open(root, "rb") as f:
            n = count_lines(f.read().decode("utf-8", "replace"))
        return [(os.path.basename(root), n)] if n else [], 1
    scanned = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        entries = sorted(os.listdir(os.path.join(root, rel)) if rel else os.listdir(root))
        for name in reversed(entries):
            child = f"{rel}/{name}" if rel else name
            full = os.path.join(root, child)
            if os.path.isdir(full):
                stack.append(child)
                continue
            try:
                with open(full, "rb") as f:
                    n = count_lines(f.read().decode("utf-8", "replace"))
            except OSError:
                log.write(log.Level.WARN, f"cannot read {child}")
                continue
            scanned += 1
            if n:
                found.append((child, n))
    found.sort()
    return found, scanned


class WitWorld(wit_world.WitWorld):
    def describe(self):
        return [
            types.ToolSpec(
                name="todos",
                description="Count the TODO and FIXME lines under a path (a file or a "
                "directory), per file.",
                input_schema=json.dumps(SCHEMA),
                idempotent=True,
                output_budget=None,
                output_schema=None,
            )
        ]

    def call(self, context, name, args_json):
        path = json.loads(args_json)["path"]
        root = path if path.startswith("/") else os.path.join(context.workdir, path)
        try:
            found, scanned = scan(root.rstrip("/") or "/")
        except OSError:
            return types.ToolResult(
                content=[],
                structured_json=None,
                error=types.ToolError(
                    code=types.ErrorCode.INVALID_ARGUMENTS,
                    message=f"cannot read {path}: no such file or directory in the granted directories",
                ),
                full_output_path=None,
            )
        total = sum(n for _, n in found)
        log.write(log.Level.INFO, f"todos: {scanned} files scanned, {total} lines found")
        lines = [f"{rel}: {n}" for rel, n in found]
        lines.append(f"total: {total} in {len(found)} files")
        structured = {"files": dict(found), "total": total}
        return types.ToolResult(
            content=[types.ContentItem_Text("\n".join(lines))],
            structured_json=json.dumps(structured),
            error=None,
            full_output_path=None,
        )
