//! `dsh serve` driven by a real MCP client: the official Python SDK, in the pytest
//! suite under `tests/mcp/` (stdio and streamable HTTP, owners, progress, cancellation,
//! auth, robustness). This test runs that suite against the binary built here, in the
//! test's own Python environment (`python_env`).

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_sdk_suite_passes_against_dsh_serve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let output = Command::new(crate::python_env::python())
        .args(["-m", "pytest", "tests/mcp", "-q", "-p", "no:cacheprovider"])
        .current_dir(root)
        .env("DSH_BIN", env!("CARGO_BIN_EXE_dsh"))
        .env("DSH_PLUGIN_WASM_DIR", crate::support::plugin_wasm_dir())
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "pytest tests/mcp failed:\n{report}"
    );
    // Echo the suite's own summary so `cargo test -- --nocapture` shows what ran (a skip
    // under `CI=true` already failed the suite: see its conftest's report hook).
    println!("{report}");
    if let Some(summary) = report.lines().rev().find(|line| line.contains(" passed")) {
        eprintln!(
            "pytest tests/mcp: {}",
            summary.trim_matches(|c| c == '=' || c == ' ')
        );
    }
}
