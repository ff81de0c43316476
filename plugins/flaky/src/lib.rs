//! Test plugin `flaky`: one idempotent tool that fails the first time it is called with a
//! marker path and succeeds once the marker exists, so the host's end-to-end tests can
//! prove the retry middleware retries idempotent tools. It needs a filesystem grant for
//! the marker's directory and imports no dsh host interface.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};

use dsh::plugin::types::ErrorCode;
use serde_json::Value;

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool" });
include!("../../shared/results.rs");

struct Flaky;

impl Guest for Flaky {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "flaky".into(),
            description: "Test fixture for the host's retries: fails with `internal` the first time \
                          (creating the file `marker`), succeeds once `marker` exists."
                .into(),
            input_schema: r#"{"type":"object","properties":{"marker":{"type":"string"}},"required":["marker"],"additionalProperties":false}"#.into(),
            idempotent: true,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(_context: CallContext, _name: String, args_json: String) -> ToolResult {
        let args: Value = serde_json::from_str(&args_json).unwrap_or(Value::Null);
        let marker = args
            .get("marker")
            .and_then(Value::as_str)
            .unwrap_or_default();
        // `create_new` checks and creates in one step: exactly one call sees the marker missing.
        match OpenOptions::new().write(true).create_new(true).open(marker) {
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
            Err(e) if e.kind() == ErrorKind::AlreadyExists => ToolResult {
                content: text(format!("flaky: succeeded (marker {marker} was there)")),
                structured_json: None,
                error: None,
                full_output_path: None,
            },
            Err(e) => failure(
                ErrorCode::Denied,
                format!("cannot create marker {marker}: {e}"),
            ),
        }
    }
}

export!(Flaky);
