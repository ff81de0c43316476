//! `dsh serve` driven by a real MCP client: the official Python SDK, in the pytest
//! suite under `tests/mcp/` (stdio and streamable HTTP, owners, progress, cancellation,
//! auth, robustness). This test runs that suite against the binary built here.

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_sdk_suite_passes_against_dsh_serve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let sdk = Command::new("python3")
        .args(["-c", "import mcp, pytest"])
        .output();
    match sdk {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "the MCP client tests need Python 3 with the `mcp` SDK and pytest: \
             pip install -r tests/mcp/requirements.txt (.ci/run does this)"
        ),
    }
    let output = Command::new("python3")
        .args(["-m", "pytest", "tests/mcp", "-q", "-p", "no:cacheprovider"])
        .current_dir(root)
        .env("DSH_BIN", env!("CARGO_BIN_EXE_dsh"))
        .env("DSH_PLUGIN_WASM_DIR", env!("DSH_PLUGIN_WASM_DIR"))
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
    // Echo the suite's own summary so `cargo test -- --nocapture` shows what ran.
    println!("{report}");
}
