//! The model-facing terminal tools over the host's terminal service: `terminal_open`,
//! `terminal_send`, `terminal_read`, `terminal_signal`, `terminal_close` and
//! `terminal_list`. The host owns the sessions; this plugin only describes and formats.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool-terminal" });
include!("../../shared/results.rs");

use dsh::plugin::terminal::{self, OpenRequest, ReadRequest, SendRequest, SessionInfo, View};
use dsh::plugin::types::{ErrorCode, ToolError};
use serde::Deserialize;

const ID: &str = r#"{ "type": "string", "pattern": "^term-[0-9]+$", "description": "The session id from terminal_open, e.g. term-1." }"#;

fn schema(properties: &str, required: &[&str]) -> String {
    let required: Vec<String> = required.iter().map(|r| format!("\"{r}\"")).collect();
    format!(
        r#"{{"type":"object","properties":{{{properties}}},"required":[{}],"additionalProperties":false}}"#,
        required.join(",")
    )
}

#[derive(Deserialize)]
struct OpenArgs {
    cwd: Option<String>,
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
    shell: Option<String>,
    cols: Option<u16>,
    rows: Option<u16>,
}

#[derive(Deserialize, Default)]
struct Wait {
    quiet_ms: Option<u32>,
    pattern: Option<String>,
    timeout_ms: Option<u32>,
}

#[derive(Deserialize)]
struct SendArgs {
    id: String,
    input: String,
    #[serde(default)]
    wait: Wait,
    #[serde(default)]
    background: bool,
    enter: Option<bool>,
}

#[derive(Deserialize)]
struct ReadArgs {
    id: String,
    view: Option<String>,
    since: Option<u64>,
    max_bytes: Option<u32>,
}

#[derive(Deserialize)]
struct SignalArgs {
    id: String,
    signal: String,
}

#[derive(Deserialize)]
struct IdArgs {
    id: String,
}

fn parse<T: for<'a> Deserialize<'a>>(args_json: &str) -> Result<T, ToolResult> {
    serde_json::from_str(args_json).map_err(|e| {
        failed(ToolError {
            code: ErrorCode::InvalidArguments,
            message: format!("bad arguments: {e}"),
        })
    })
}

/// `alive`, or `exited (code N)` once the shell has exited.
fn state(alive: bool, exit_code: Option<i32>) -> String {
    match (alive, exit_code) {
        (true, _) => "alive".into(),
        (false, Some(code)) => format!("exited (code {code})"),
        (false, None) => "exited".into(),
    }
}

fn describe_session(info: &SessionInfo) -> String {
    format!(
        "{}\t{}\t{}x{}\t{}\t{}\tcwd={}",
        info.id,
        info.shell,
        info.cols,
        info.rows,
        state(info.alive, info.exit_code),
        info.foreground
            .as_deref()
            .map(|f| format!("foreground={f}"))
            .unwrap_or_default(),
        info.cwd
    )
}

struct Terminal;

impl Guest for Terminal {
    fn describe() -> Vec<ToolSpec> {
        let spec = |name: &str, description: &str, schema: String, idempotent: bool| ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: schema,
            idempotent,
            output_budget: None,
            output_schema: None,
        };
        vec![
            spec(
                "terminal_open",
                "Open a persistent terminal session (a shell on a PTY) and return its id. Unlike bash, state lives on between sends: a REPL's variables, cd, exported variables, interactive prompts.",
                schema(
                    r#""cwd": { "type": "string", "minLength": 1, "description": "Working directory; relative to the session workspace." },
                    "env": { "type": "object", "additionalProperties": { "type": "string" }, "description": "Extra environment variables." },
                    "shell": { "type": "string", "minLength": 1, "description": "Shell to run (default bash)." },
                    "cols": { "type": "integer", "minimum": 10, "maximum": 1000, "description": "Width (default 120)." },
                    "rows": { "type": "integer", "minimum": 2, "maximum": 500, "description": "Height (default 40)." }"#,
                    &[],
                ),
                false,
            ),
            spec(
                "terminal_send",
                "Type input into a session (Enter is pressed after it unless enter is false) and return the output it produced (the echo of your input first): the call returns when the output has been quiet for wait.quiet_ms (default 300), or when wait.pattern (a regex) appears, or at wait.timeout_ms (default 10000), whichever comes first. wait.pattern is looked for only in what the command printed after the terminal's echo of your input, never in the echo itself: `sleep 5; echo done` with pattern `done` returns when done is printed, 5 s later. A pattern may span lines (e.g. `done\\n\\$ ` for the output then the prompt). With background: true it returns at once with a job id (terminal-N) whose output you read with job_output. Only one send per session at a time (SEND_ACTIVE otherwise).",
                schema(
                    &format!(
                        r#""id": {ID},
                        "input": {{ "type": "string", "description": "What to type." }},
                        "enter": {{ "type": "boolean", "description": "Press Enter after the input (default true)." }},
                        "wait": {{ "type": "object", "additionalProperties": false, "description": "When to return.", "properties": {{
                            "quiet_ms": {{ "type": "integer", "minimum": 1, "maximum": 600000 }},
                            "pattern": {{ "type": "string", "minLength": 1, "description": "A regex looked for in the output after the echo of the input." }},
                            "timeout_ms": {{ "type": "integer", "minimum": 1, "maximum": 600000 }} }} }},
                        "background": {{ "type": "boolean", "description": "Return at once with a job id." }}"#
                    ),
                    &["id", "input"],
                ),
                false,
            ),
            spec(
                "terminal_read",
                "Read a session's output: view screen (the current screen, readable even for full-screen programs like top or vim), plain (the scrollback as text, escape sequences and overwrites resolved; default) or raw. since (a cursor from an earlier read or send) returns only what came after it. A session whose shell has exited stays readable until closed (the last line says exited (code N)).",
                schema(
                    &format!(
                        r#""id": {ID},
                        "view": {{ "type": "string", "enum": ["screen", "plain", "raw"] }},
                        "since": {{ "type": "integer", "minimum": 0 }},
                        "max_bytes": {{ "type": "integer", "minimum": 1, "maximum": 1000000 }}"#
                    ),
                    &["id"],
                ),
                true,
            ),
            spec(
                "terminal_signal",
                "Send a signal to the session's foreground process group, e.g. INT to stop a running command (like Ctrl-C).",
                schema(
                    &format!(
                        r#""id": {ID},
                        "signal": {{ "type": "string", "enum": ["INT", "TERM", "KILL", "HUP", "QUIT", "TSTP", "CONT"] }}"#
                    ),
                    &["id", "signal"],
                ),
                false,
            ),
            spec(
                "terminal_close",
                "Close a session and kill every process in it, background ones included.",
                schema(&format!(r#""id": {ID}"#), &["id"]),
                false,
            ),
            spec(
                "terminal_list",
                "List your terminal sessions: alive, or exited (code N) for one whose shell has exited. An exited session holds no process and does not count toward the session limit; it stays listed and readable until you close it (the 16 that exited last are kept).",
                schema("", &[]),
                true,
            ),
        ]
    }

    fn call(_context: CallContext, name: String, args_json: String) -> ToolResult {
        match run(&name, &args_json) {
            Ok(result) | Err(result) => result,
        }
    }
}

fn run(name: &str, args_json: &str) -> Result<ToolResult, ToolResult> {
    Ok(match name {
        "terminal_open" => {
            let args: OpenArgs = parse(args_json)?;
            let request = OpenRequest {
                cwd: args.cwd,
                env: args.env.into_iter().collect(),
                shell: args.shell,
                cols: args.cols,
                rows: args.rows,
            };
            let info = terminal::open(&request).map_err(failed)?;
            ok(format!(
                "opened {} ({} in {}, {}x{})",
                info.id, info.shell, info.cwd, info.cols, info.rows
            ))
        }
        "terminal_send" => {
            let args: SendArgs = parse(args_json)?;
            let request = SendRequest {
                id: args.id,
                input: args.input,
                enter: args.enter.unwrap_or(true),
                quiet_ms: args.wait.quiet_ms,
                pattern: args.wait.pattern,
                timeout_ms: args.wait.timeout_ms,
                background: args.background,
            };
            let sent = terminal::send(&request).map_err(failed)?;
            match sent.job {
                Some(job) => ok(format!(
                    "started background job {job}\nRead its output with job_output {{\"id\":\"{job}\"}}."
                )),
                None => {
                    let mut content = sent.output;
                    if !content.is_empty() && !content.ends_with('\n') {
                        content.push('\n');
                    }
                    content.push_str(&format!("[settled: {}; cursor: {}", sent.settled, sent.next_cursor));
                    if !sent.alive {
                        content.push_str(&format!("; the shell has {}", state(false, sent.exit_code)));
                    }
                    content.push(']');
                    ok(content)
                }
            }
        }
        "terminal_read" => {
            let args: ReadArgs = parse(args_json)?;
            let view = match args.view.as_deref() {
                Some("screen") => View::Screen,
                Some("raw") => View::Raw,
                _ => View::Plain,
            };
            let request = ReadRequest {
                id: args.id,
                view,
                since: args.since,
                max_bytes: args.max_bytes,
            };
            let read = terminal::read(&request).map_err(failed)?;
            let mut content = String::new();
            if read.omitted_bytes > 0 {
                content.push_str(&format!("… {} bytes omitted …\n", read.omitted_bytes));
            }
            content.push_str(&read.text);
            if !content.is_empty() && !content.ends_with('\n') {
                content.push('\n');
            }
            match read.exit_code {
                Some(code) => content.push_str(&format!(
                    "[cursor: {}; exited (code {code})]",
                    read.next_cursor
                )),
                None => content.push_str(&format!("[cursor: {}]", read.next_cursor)),
            }
            ok(content)
        }
        "terminal_signal" => {
            let args: SignalArgs = parse(args_json)?;
            ok(terminal::signal(&args.id, &args.signal).map_err(failed)?)
        }
        "terminal_close" => {
            let args: IdArgs = parse(args_json)?;
            ok(terminal::close(&args.id).map_err(failed)?)
        }
        "terminal_list" => {
            let sessions = terminal::list();
            if sessions.is_empty() {
                ok("no terminal sessions".into())
            } else {
                ok(sessions
                    .iter()
                    .map(describe_session)
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
        }
        other => failed(ToolError {
            code: ErrorCode::UnknownTool,
            message: format!("no tool named {other:?}"),
        }),
    })
}

export!(Terminal);
