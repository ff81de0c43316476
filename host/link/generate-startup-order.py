#!/usr/bin/env python3
"""Writes host/link/startup-order.txt: the functions an idle `dsh serve` runs (started,
initialized, tools listed), which release builds of the dsh binary link first and
together (build.rs passes the file to lld as its symbol ordering file).

Why: the kernel maps a file-backed page fault's neighbours with it (fault-around, 64 KiB
here), so code run at start-up that is spread over the binary's 27 MB of text makes most
of the text resident, and that counts in the server's RSS. Linked together, the ~2.4 MB
it runs is all that is mapped.

How the functions are found, exactly and without instrumenting the build: the release
binary is relinked with its functions in a random order; with the page cache dropped and
the disk's readahead off, a page of it is resident after an idle start only when the
server ran (or read) something in it; a function whose pages were never resident did not
run. Each round eliminates most of the functions that did not run; after the rounds (16
by default), what is left is what runs.

Needs root (it drops the page cache and sets the disk's readahead to 0 during each
probe, then restores it), a release build (`cargo build --release`; this script relinks
the binary with `cargo rustc`), and nothing else running that minds a cold page cache.
Run it again when the toolchain or a dependency changes: symbol names carry hashes of
both, and names the binary no longer has are skipped (`cargo bench --bench mcp` says how
many of the listed functions the binary has).

Usage: python3 host/link/generate-startup-order.py [ROUNDS]
"""

import json
import os
import random
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORDER_FILE = os.path.join(ROOT, "host", "link", "startup-order.txt")


def link_command():
    """The release link of the dsh binary, as rustc runs it (objects kept)."""
    out = subprocess.run(
        ["cargo", "rustc", "-p", "dsh", "--release", "--bin", "dsh", "--",
         "-C", "save-temps", "--print", "link-args"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout
    line = next(l for l in out.splitlines() if " -o " in l or "\"-o\"" in l)
    parts = shlex.split(line)
    env = dict(os.environ)
    while "=" in parts[0] and not parts[0].startswith("-"):
        key, value = parts.pop(0).split("=", 1)
        env[key] = value
    # Any ordering build.rs added: the rounds set their own.
    parts = [p for p in parts if "symbol-ordering" not in p]
    return env, parts


def relink(env, command, output, order=None):
    command = list(command)
    command[command.index("-o") + 1] = output
    if order is not None:
        command += [f"-Wl,--symbol-ordering-file={order}", "-Wl,--no-warn-symbol-ordering"]
    subprocess.run(command, env=env, check=True, capture_output=True)


def text_symbols(binary):
    """(address, name) of every function, by address."""
    out = subprocess.run(["nm", "--defined-only", binary], check=True,
                         capture_output=True, text=True).stdout
    symbols = []
    for line in out.splitlines():
        address, kind, name = line.split(" ", 2)
        if kind in "tTwW":
            symbols.append((int(address, 16), name))
    return sorted(symbols)


def load_segments(binary):
    """(file offset, virtual address, file size) of each loadable segment."""
    out = subprocess.run(["readelf", "-lW", binary], check=True, capture_output=True,
                         text=True).stdout
    return [(int(f[1], 16), int(f[2], 16), int(f[4], 16))
            for f in (l.split() for l in out.splitlines()) if f and f[0] == "LOAD"]


def idle_start(binary, scratch):
    """Starts `dsh serve` as `cargo bench --bench mcp` does (a plugin directory holding
    the test plugin `echo` when the tests have built it, a workspace of its own),
    initializes, lists tools; the file offsets of the binary's resident pages then."""
    plugins, workspace = os.path.join(scratch, "plugins"), os.path.join(scratch, "workspace")
    for directory in (plugins, workspace):
        os.makedirs(directory, exist_ok=True)
    echo = os.path.join(ROOT, "target", "wasm-plugins", "wasm32-wasip2", "release", "echo.wasm")
    if os.path.exists(echo):
        shutil.copy(echo, os.path.join(plugins, "echo.wasm"))
    server = subprocess.Popen(
        [binary, "--plugins", plugins, "--state-dir", os.path.join(scratch, "state"),
         "--workdir", workspace, "serve"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def send(message):
        server.stdin.write((json.dumps(message) + "\n").encode())
        server.stdin.flush()

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "startup-order", "version": "0"}}})
    server.stdout.readline()
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    server.stdout.readline()
    time.sleep(1)  # as the bench: anything loading in the background settles
    resident = set()
    with open(f"/proc/{server.pid}/pagemap", "rb") as pagemap:
        for line in open(f"/proc/{server.pid}/maps"):
            fields = line.split()
            if len(fields) < 6 or fields[5] != binary:
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            offset = int(fields[2], 16)
            pagemap.seek(low // 4096 * 8)
            entries = pagemap.read((high - low) // 4096 * 8)
            for i in range((high - low) // 4096):
                if struct.unpack_from("<Q", entries, i * 8)[0] >> 63:
                    resident.add(offset + i * 4096)
    server.stdin.close()
    server.wait()
    return resident


def readahead_file(path):
    device = os.stat(path).st_dev
    block = f"/sys/dev/block/{os.major(device)}:{os.minor(device)}"
    if os.path.exists(os.path.join(block, "partition")):
        block = os.path.join(block, "..")
    setting = os.path.join(block, "queue", "read_ahead_kb")
    if not os.path.exists(setting):
        sys.exit(f"{path} is not on a block device's filesystem ({setting} is missing)")
    return setting


def cold_idle_start(binary, scratch):
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as drop:
        drop.write("1")
    setting = readahead_file(binary)
    before = open(setting).read().strip()
    open(setting, "w").write("0")
    try:
        return idle_start(binary, scratch)
    finally:
        open(setting, "w").write(before)


def ran(binary, resident):
    """The functions with a resident page."""
    symbols = text_symbols(binary)
    segments = load_segments(binary)
    found = set()
    for i, (address, name) in enumerate(symbols):
        end = symbols[i + 1][0] if i + 1 < len(symbols) else address + 1
        for offset, vaddr, size in segments:
            if vaddr <= address < vaddr + size:
                first = offset + address - vaddr
                last = first + max(end - address, 1) - 1
                page = first // 4096 * 4096
                while page <= last:
                    if page in resident:
                        found.add(name)
                        break
                    page += 4096
                break
    return found


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    if os.geteuid() != 0:
        sys.exit("needs root: it drops the page cache and sets the disk's readahead")
    env, command = link_command()
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(dir=os.path.join(ROOT, "target")) as scratch:
        unordered = os.path.join(scratch, "dsh-unordered")
        relink(env, command, unordered)
        functions = [name for _, name in text_symbols(unordered)]
        candidates = None
        shuffle = random.Random(1)
        for round_ in range(rounds):
            order = functions[:]
            shuffle.shuffle(order)
            order_file = os.path.join(scratch, "order.txt")
            with open(order_file, "w") as out:
                out.write("\n".join(order) + "\n")
            binary = os.path.join(scratch, f"dsh-round-{round_}")
            relink(env, command, binary, order_file)
            idle_start(binary, scratch)  # fills the compile cache: the probe is a warm start
            found = ran(binary, cold_idle_start(binary, scratch))
            candidates = found if candidates is None else candidates & found
            os.unlink(binary)
            print(f"round {round_ + 1}/{rounds}: {len(candidates)} functions left", flush=True)
        kept = list(dict.fromkeys(
            name for _, name in text_symbols(unordered) if name in candidates))
    with open(ORDER_FILE, "w") as out:
        out.write(
            "# The functions an idle `dsh serve` runs (started, initialized, tools listed), in\n"
            "# address order: release builds link them first and together (see build.rs).\n"
            f"# Written by host/link/generate-startup-order.py ({rounds} rounds) for {rustc}.\n"
            "# Regenerate it when the toolchain or a dependency changes.\n")
        out.write("\n".join(kept) + "\n")
    print(f"wrote {len(kept)} functions to {ORDER_FILE}")


if __name__ == "__main__":
    main()
