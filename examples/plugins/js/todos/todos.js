// todos, in JavaScript: count the TODO and FIXME lines under a path, per file
// (dsh:plugin@0.2.0, the `tool` world, plus the WASI filesystem to read files).
//
// Build (the contract copied beside the WASI interfaces it names):
//   mkdir -p wit/deps/dsh-plugin && cp ../../../../wit/v0.2.0/plugin.wit wit/deps/dsh-plugin/
//   componentize-js todos.js --wit wit --world-name todos -d http -d fetch-event -o todos.wasm

import { getDirectories } from "wasi:filesystem/preopens@0.2.12";
import { write as log } from "dsh:plugin/log@0.2.0";

const SCHEMA = {
  type: "object",
  properties: {
    path: {
      type: "string",
      description: "A file or directory, absolute or relative to the workspace",
    },
  },
  required: ["path"],
  additionalProperties: false,
};

const decoder = new TextDecoder("utf-8");

function countLines(bytes) {
  return decoder
    .decode(bytes)
    .split("\n")
    .filter((line) => line.includes("TODO") || line.includes("FIXME")).length;
}

// The granted directory holding `path`, and `path` relative to it.
function locate(path) {
  for (const [dir, guest] of getDirectories()) {
    const base = guest.replace(/\/+$/, "");
    if (path === base) return [dir, "."];
    if (path.startsWith(base + "/")) return [dir, path.slice(base.length + 1)];
  }
  throw new Error("not granted");
}

function readAll(file) {
  const chunks = [];
  let offset = 0n;
  for (;;) {
    const [data, end] = file.read(65536n, offset);
    chunks.push(data);
    offset += BigInt(data.length);
    if (end || data.length === 0) break;
  }
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.length;
  }
  return all;
}

function open(dir, rel) {
  return dir.openAt({ symlinkFollow: true }, rel, {}, { read: true });
}

// [[relative path, count], ...] of every file with a match, sorted, and the files read.
function scan(dir, rel, baseName) {
  const root = open(dir, rel);
  if (root.stat().type !== "directory") {
    const n = countLines(readAll(root));
    return [n ? [[baseName, n]] : [], 1];
  }
  const found = [];
  let scanned = 0;
  const walk = (handle, prefix) => {
    const names = [];
    const stream = handle.readDirectory();
    for (let entry; (entry = stream.readDirectoryEntry()); ) names.push(entry.name);
    names.sort();
    for (const name of names) {
      const child = prefix ? `${prefix}/${name}` : name;
      let sub;
      try {
        sub = open(handle, name);
      } catch {
        log("warn", `cannot read ${child}`);
        continue;
      }
      if (sub.stat().type === "directory") {
        walk(sub, child);
        continue;
      }
      scanned += 1;
      const n = countLines(readAll(sub));
      if (n) found.push([child, n]);
    }
  };
  walk(root, "");
  found.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return [found, scanned];
}

export function describe() {
  return [
    {
      name: "todos",
      description:
        "Count the TODO and FIXME lines under a path (a file or a directory), per file.",
      inputSchema: JSON.stringify(SCHEMA),
      idempotent: true,
      outputBudget: undefined,
      outputSchema: undefined,
    },
  ];
}

export function call(context, name, argsJson) {
  const path = JSON.parse(argsJson).path;
  let full = path.startsWith("/") ? path : `${context.workdir}/${path}`;
  full = full.replace(/\/+$/, "") || "/";
  let found, scanned;
  try {
    const [dir, rel] = locate(full);
    [found, scanned] = scan(dir, rel, full.split("/").pop());
  } catch {
    return {
      content: [],
      structuredJson: undefined,
      error: {
        code: "invalid-arguments",
        message: `cannot read ${path}: no such file or directory in the granted directories`,
      },
      fullOutputPath: undefined,
    };
  }
  const total = found.reduce((n, [, c]) => n + c, 0);
  log("info", `todos: ${scanned} files scanned, ${total} lines found`);
  const lines = found.map(([rel, n]) => `${rel}: ${n}`);
  lines.push(`total: ${total} in ${found.length} files`);
  return {
    content: [{ tag: "text", val: lines.join("\n") }],
    structuredJson: JSON.stringify({ files: Object.fromEntries(found), total }),
    error: undefined,
    fullOutputPath: undefined,
  };
}
