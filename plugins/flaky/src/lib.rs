//! Test plugin `flaky`: one idempotent tool that fails the first time it is called with a
//! marker path and succeeds once the marker exists, so the host's end-to-end tests can
//! prove the retry middleware retries idempotent tools. It needs a filesystem grant for
//! the marker's directory and imports no dsh host interface.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};

use dsh_plugin::{failure, text, CallContext, ErrorCode, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    marker: String,
}

struct Flaky;

impl Tools for Flaky {
    fn tools() -> Vec<Tool> {
        vec![Tool::new(
            "flaky",
            "Test fixture for the host's retries: fails with `internal` the first time \
             (creating the file `marker`), succeeds once `marker` exists.",
            flaky,
        )
        .idempotent()]
    }
}

fn flaky(_context: &CallContext, Args { marker }: Args) -> ToolResult {
    // `create_new` checks and creates in one step: exactly one call sees the marker missing.
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
    {
        Ok(mut file) => match file.write_all(b"1") {
            Ok(()) => failure(
                ErrorCode::Internal,
                format!("flaky: failed on purpose the first time (marker {marker} created)"),
            ),
            Err(e) => failure(
                ErrorCode::Denied,
                format!("cannot write marker {marker}: {e}"),
            ),
        },
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            text(format!("flaky: succeeded (marker {marker} was there)"))
        }
        Err(e) => failure(
            ErrorCode::Denied,
            format!("cannot create marker {marker}: {e}"),
        ),
    }
}

dsh_plugin::export!(tool: Flaky);
