//! The model-facing `bash` tool: each call runs one command in a new shell through the
//! host's `process` service and returns its combined output followed by
//! `[exit code: N]`.
//!
//! Settings (`[plugins.bash.settings]` in `dsh.toml`): `default_timeout_ms` (120000)
//! and `max_timeout_ms` (600000). A command may be up to [`MAX_COMMAND_BYTES`] (1 MiB);
//! a longer one is `INVALID_ARGUMENTS` and starts nothing.

use dsh_plugin::tool_process::process::{self, BackgroundRequest, RunRequest};
use dsh_plugin::{text, CallContext, ErrorCode, Tool, ToolError, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

const DEFAULT_TIMEOUT_MS: u64 = 120_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
/// Room kept in the output budget for the exit-code line and notes.
const TRAILER_ROOM: u32 = 200;
/// The longest command, in bytes (1 MiB). Checked here rather than as the schema's
/// `maxLength`, which counts characters and whose violation would quote the whole command.
const MAX_COMMAND_BYTES: usize = 1 << 20;

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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The command, run with `bash -c`; at most 1 MiB (1048576 bytes).
    #[schemars(length(min = 1))]
    command: String,
    /// What the command does, in a few words (shown to the user).
    #[schemars(length(min = 1))]
    description: String,
    /// Kill the command after this many milliseconds (default 120000, at most 600000).
    #[serde(rename = "timeoutMs")]
    #[schemars(range(min = 1))]
    timeout_ms: Option<u64>,
    /// Directory to run in; a relative path resolves against the session workspace.
    #[schemars(length(min = 1))]
    workdir: Option<String>,
    /// Start the command as a background job and return its id at once (no timeout
    /// applies); read its output with job_output, stop it with job_kill.
    #[serde(default)]
    run_in_background: bool,
}

#[derive(Deserialize, Default)]
struct Settings {
    default_timeout_ms: Option<u64>,
    max_timeout_ms: Option<u64>,
}

struct Bash;

impl Tools for Bash {
    fn tools() -> Vec<Tool> {
        vec![Tool::new("bash", DESCRIPTION, bash)]
    }
}

fn bash(context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    if args.command.len() > MAX_COMMAND_BYTES {
        return Err(dsh_plugin::error(
            ErrorCode::InvalidArguments,
            format!(
                "command is {} bytes, more than the bash tool's limit of {MAX_COMMAND_BYTES} (1 MiB); \
                 nothing was run: write long content to a file in several calls, or with a file tool",
                args.command.len()
            ),
        ));
    }
    if args.run_in_background {
        let request = BackgroundRequest {
            command: args.command,
            workdir: args.workdir,
            description: args.description,
            env: Vec::new(),
        };
        let id = process::start(&request)?;
        return Ok(text(format!(
            "started background job {id}\nRead its output with job_output {{\"id\":\"{id}\"}}; stop it with job_kill."
        )));
    }
    let settings: Settings = context.settings();
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
    let outcome = process::run(&request)?;

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
        Some(dsh_plugin::error(
            ErrorCode::Timeout,
            format!("command timed out after {timeout_ms} ms; everything it started was killed"),
        ))
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
    Ok(text(content)
        .with_error(error)
        .with_full_output_path(outcome.full_output_path))
}

dsh_plugin::export!(tool_process: Bash);
