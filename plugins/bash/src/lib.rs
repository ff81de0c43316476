//! The model-facing `bash` tool: each call runs one command in a new shell through the
//! host's `process` service and returns its combined output followed by
//! `[exit code: N]`.
//!
//! Settings (`[plugins.bash.settings]` in `dsh.toml`): `default_timeout_ms` (120000)
//! and `max_timeout_ms` (600000).

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool-process" });
include!("../../shared/results.rs");

use dsh::plugin::process::{self, BackgroundRequest, RunRequest};
use dsh::plugin::types::{ErrorCode, ToolError};
use serde::Deserialize;

const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
/// Room kept in the output budget for the exit-code line and notes.
const TRAILER_ROOM: u32 = 200;

const DESCRIPTION: &str = "Run a bash command and return its combined stdout and stderr, \
followed by `[exit code: N]`. Each call is a new shell: `cd`, variables and background \
processes do not carry over to the next call, and every process the command starts is \
killed when it returns. Long output is cut to its head and tail; the full output is kept \
in a file whose path is given. Use `timeoutMs` for commands that may run long, and \
`run_in_background` for servers, watchers and long test suites. Commands may run \
sandboxed: then the result ends with a `[sandbox: ...]` line before the exit code, and \
the command can write only the workspace and `$TMPDIR` (a private directory removed \
afterwards), has no network unless the line names TCP ports (`net=tcp:443`), holds \
no privileges, and cannot signal or trace processes it did not start; a denied operation fails with the \
command's own error (`Permission denied`, `Operation not permitted`).";

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "command": { "type": "string", "minLength": 1, "description": "The command, run with `bash -c`." },
    "description": { "type": "string", "minLength": 1, "description": "What the command does, in a few words (shown to the user)." },
    "timeoutMs": { "type": "integer", "minimum": 1, "description": "Kill the command after this many milliseconds (default 120000, at most 600000)." },
    "workdir": { "type": "string", "minLength": 1, "description": "Directory to run in; a relative path resolves against the session workspace." },
    "run_in_background": { "type": "boolean", "description": "Start the command as a background job and return its id at once (no timeout applies); read its output with job_output, stop it with job_kill." }
  },
  "required": ["command", "description"],
  "additionalProperties": false
}"#;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Args {
    command: String,
    description: String,
    #[serde(rename = "timeoutMs")]
    timeout_ms: Option<u64>,
    workdir: Option<String>,
    #[serde(default, rename = "run_in_background")]
    run_in_background: bool,
}

#[derive(Deserialize, Default)]
struct Settings {
    default_timeout_ms: Option<u64>,
    max_timeout_ms: Option<u64>,
}

struct Bash;

impl Guest for Bash {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "bash".into(),
            description: DESCRIPTION.into(),
            input_schema: SCHEMA.into(),
            idempotent: false,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(context: CallContext, _name: String, args_json: String) -> ToolResult {
        let args: Args = match serde_json::from_str(&args_json) {
            Ok(args) => args,
            Err(e) => return failure(ErrorCode::InvalidArguments, format!("bad arguments: {e}")),
        };
        if args.run_in_background {
            let request = BackgroundRequest {
                command: args.command,
                workdir: args.workdir,
                description: args.description,
                env: Vec::new(),
            };
            return match process::start(&request) {
                Ok(id) => ToolResult {
                    content: text(format!(
                        "started background job {id}\nRead its output with job_output {{\"id\":\"{id}\"}}; stop it with job_kill."
                    )),
                    structured_json: None,
                    error: None,
                    full_output_path: None,
                },
                Err(error) => failed(error),
            };
        }
        let settings: Settings = serde_json::from_str(&context.settings_json).unwrap_or_default();
        let max = settings.max_timeout_ms.unwrap_or(MAX_TIMEOUT_MS);
        let requested = args
            .timeout_ms
            .unwrap_or(settings.default_timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS));
        let timeout_ms = requested.min(max);

        let request = RunRequest {
            command: args.command,
            workdir: args.workdir,
            timeout_ms,
            capture_bytes: context.output_budget.saturating_sub(TRAILER_ROOM).max(1),
            env: Vec::new(),
        };
        let outcome = match process::run(&request) {
            Ok(outcome) => outcome,
            Err(error) => return failed(error),
        };

        let mut content = outcome.output;
        if !content.is_empty() && !content.ends_with('\n') {
            content.push('\n');
        }
        if requested > max {
            content.push_str(&format!(
                "[timeoutMs {requested} capped at the maximum {max}]\n"
            ));
        }
        let error = if outcome.timed_out {
            content.push_str(&format!(
                "[exit code: 124 (timed out after {timeout_ms} ms)]"
            ));
            Some(ToolError {
                code: ErrorCode::Timeout,
                message: format!(
                    "command timed out after {timeout_ms} ms; everything it started was killed"
                ),
            })
        } else {
            match (outcome.exit_code, outcome.signal) {
                (Some(code), _) => content.push_str(&format!("[exit code: {code}]")),
                (None, Some(signal)) => content.push_str(&format!(
                    "[exit code: {} (killed by signal {signal})]",
                    128 + signal
                )),
                (None, None) => content.push_str("[exit code: unknown]"),
            }
            None
        };
        ToolResult {
            content: text(content),
            structured_json: None,
            error,
            full_output_path: outcome.full_output_path,
        }
    }
}

export!(Bash);
