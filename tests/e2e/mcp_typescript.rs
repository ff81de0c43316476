//! `dsh serve` driven by the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`),
//! in the `node:test` suite under `tests/mcp-ts/`: the handshake and tools, progress,
//! plugin logging, resources (listed, read, templates, owners), and resource change
//! notifications and completions, over stdio and streamable HTTP; and its v2 client
//! (`@modelcontextprotocol/client`) negotiating MCP 2026-07-28 over stdio and HTTP (tools
//! with cache hints, a REPL, a job, `subscriptions/listen`, `input_required` round trips,
//! tasks). The SDK is installed with `npm ci` from `tests/mcp-ts/package-lock.json` into
//! `target/tmp/mcp-ts-node` (once, and again when the lock file or package.json changes),
//! never into the source tree; the suite runs with `node --test` against the binary built
//! here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The suite's directory.
fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("tests/mcp-ts")
}

/// The suite's packages, installed with `npm ci` under the target directory the first
/// time and whenever package.json or package-lock.json changes (a lock serialises test
/// processes; a stamp holds the two files as installed). Returns the install directory.
fn packages() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-ts-node");
    let manifest = std::fs::read_to_string(suite().join("package.json")).unwrap();
    let lock_file = std::fs::read_to_string(suite().join("package-lock.json")).unwrap();
    let wanted = format!("{manifest}\n{lock_file}");
    let stamp = dir.join("dsh-installed.txt");
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
    if sdk.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("package.json"), &manifest).unwrap();
    std::fs::write(dir.join("package-lock.json"), &lock_file).unwrap();
    let output = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--silent"])
        .current_dir(&dir)
        .output()
        .expect("cannot run npm (install Node.js 20 or later and npm)");
    assert!(
        output.status.success(),
        "npm ci (tests/mcp-ts/package-lock.json) failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(&stamp, wanted).unwrap();
    dir
}

/// The suite's test files (`*.test.mjs`), named one by one: `node --test DIR` is a
/// directory search in Node 20 but a glob from Node 21 on.
fn test_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(suite())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".test.mjs"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.test.mjs in tests/mcp-ts");
    files
}

/// Panics unless `node` is 20.14 or later, for `--test-force-exit`: SDK 1.x schedules an
/// SSE reconnection after every HTTP request answered with a JSON-RPC error, and its
/// timers outlive the client, holding each test process open for seconds.
fn check_node_version() {
    let output = Command::new("node")
        .arg("--version")
        .output()
        .expect("cannot run node (install Node.js 20.14 or later)");
    let version = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let numbers: Vec<u32> = version
        .trim_start_matches('v')
        .split('.')
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    assert!(
        numbers.len() >= 2 && (numbers[0], numbers[1]) >= (20, 14),
        "node {version}: the TypeScript SDK suite needs Node.js 20.14 or later"
    );
}

#[test]
fn the_typescript_sdk_suite_passes_against_dsh_serve() {
    check_node_version();
    let packages = packages();
    let plugins = crate::support::plugin_wasm_dir();
    // One state directory for every server of the run: its compile cache, filled here
    // once, spares each server compiling the embedded plugins (the suite starts dozens
    // at once).
    let state = tempfile::tempdir().unwrap();
    let warm = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["tools", "--json"])
        .env("DSH_STATE_DIR", state.path())
        .env_remove("DSH_CONFIG")
        .env_remove("DSH_PLUGINS")
        .current_dir(state.path())
        .output()
        .unwrap();
    assert!(
        warm.status.success(),
        "dsh tools failed:\n{}",
        String::from_utf8_lossy(&warm.stderr)
    );

    let root = suite().parent().unwrap().parent().unwrap().to_path_buf();
    let started = Instant::now();
    let output = Command::new("node")
        .arg("--import")
        .arg(suite().join("resolve-packages.mjs"))
        .args([
            "--test",
            "--test-force-exit",
            "--test-concurrency=4",
            "--test-timeout=120000",
            "--test-reporter=spec",
        ])
        .args(test_files())
        .current_dir(&root)
        .env("DSH_BIN", env!("CARGO_BIN_EXE_dsh"))
        .env("DSH_PLUGIN_WASM_DIR", plugins)
        .env("DSH_MCP_TS_PACKAGES", &packages)
        .env("DSH_MCP_TS_STATE_DIR", state.path())
        .env_remove("DSH_CONFIG")
        .env_remove("DSH_PLUGINS")
        .output()
        .expect("cannot run node (install Node.js 20.14 or later)");
    let took = started.elapsed();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "node --test tests/mcp-ts failed ({took:.1?}):\n{report}"
    );
    // The suite's own counts: a skip is a failure under `CI=true`, todos are shown.
    let count = |name: &str| {
        report
            .lines()
            // The spec reporter's summary (`ℹ pass 41`), or TAP's (`# pass 41`).
            .find_map(|line| {
                let line = line.trim_start_matches(['ℹ', '#', ' ']);
                line.strip_prefix(name)?.strip_prefix(' ')
            })
            .and_then(|n| n.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    let (passed, skipped, todo) = (count("pass"), count("skipped"), count("todo"));
    if skipped > 0 {
        crate::support::skipped(&format!("{skipped} tests of tests/mcp-ts"));
    }
    // Echo the suite's own report so `cargo test -- --nocapture` shows what ran.
    println!("{report}\nnode --test tests/mcp-ts: {took:.1?}");
    eprintln!("node --test tests/mcp-ts: {passed} passed, {todo} todo, {skipped} skipped");
}
