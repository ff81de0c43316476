//! The model-facing terminal tools over the host's terminal service: `terminal_open`,
//! `terminal_send`, `terminal_read`, `terminal_signal`, `terminal_close` and
//! `terminal_list`. The host owns the sessions; this plugin only describes and formats.

use std::collections::BTreeMap;

use dsh_plugin::tool_terminal::terminal::{
    self, OpenRequest, ReadRequest, SendRequest, SessionInfo, View,
};
use dsh_plugin::{text, CallContext, Tool, ToolError, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

/// The session id from terminal_open, e.g. term-1.
#[derive(Deserialize, JsonSchema)]
#[serde(transparent)]
struct SessionId(#[schemars(regex(pattern = r"^term-[0-9]+$"))] String);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OpenArgs {
    /// Working directory; relative to the session workspace.
    #[schemars(length(min = 1))]
    cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Shell to run (default bash).
    #[schemars(length(min = 1))]
    shell: Option<String>,
    /// Width (default 120).
    #[schemars(range(min = 10, max = 1000))]
    cols: Option<u16>,
    /// Height (default 40).
    #[schemars(range(min = 2, max = 500))]
    rows: Option<u16>,
}

#[derive(Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
struct Wait {
    #[schemars(range(min = 1, max = 600000))]
    quiet_ms: Option<u32>,
    /// A regex looked for in the output after the echo of the input.
    #[schemars(length(min = 1))]
    pattern: Option<String>,
    #[schemars(range(min = 1, max = 600000))]
    timeout_ms: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SendArgs {
    id: SessionId,
    /// What to type.
    input: String,
    /// Press Enter after the input (default true).
    enter: Option<bool>,
    /// When to return.
    #[serde(default)]
    wait: Wait,
    /// Return at once with a job id.
    #[serde(default)]
    background: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ViewArg {
    Screen,
    Plain,
    Raw,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    id: SessionId,
    view: Option<ViewArg>,
    since: Option<u64>,
    #[schemars(range(min = 1, max = 1000000))]
    max_bytes: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
enum Signal {
    Int,
    Term,
    Kill,
    Hup,
    Quit,
    Tstp,
    Cont,
}

impl Signal {
    fn name(&self) -> &'static str {
        match self {
            Signal::Int => "INT",
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::Hup => "HUP",
            Signal::Quit => "QUIT",
            Signal::Tstp => "TSTP",
            Signal::Cont => "CONT",
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SignalArgs {
    id: SessionId,
    signal: Signal,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct IdArgs {
    id: SessionId,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

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

impl Tools for Terminal {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new(
                "terminal_open",
                "Open a persistent terminal session (a shell on a PTY) and return its id. Unlike bash, state lives on between sends: a REPL's variables, cd, exported variables, interactive prompts.",
                open,
            ),
            Tool::new(
                "terminal_send",
                "Type input into a session (Enter is pressed after it unless enter is false) and return the output it produced (the echo of your input first): the call returns when the output has been quiet for wait.quiet_ms (default 300), or when wait.pattern (a regex) appears, or at wait.timeout_ms (default 10000), whichever comes first. wait.pattern is looked for only in what the command printed after the terminal's echo of your input, never in the echo itself: `sleep 5; echo done` with pattern `done` returns when done is printed, 5 s later. A pattern may span lines (e.g. `done\\n\\$ ` for the output then the prompt). With background: true it returns at once with a job id (terminal-N) whose output you read with job_output. Only one send per session at a time (SEND_ACTIVE otherwise).",
                send,
            ),
            Tool::new(
                "terminal_read",
                "Read a session's output: view screen (the current screen, readable even for full-screen programs like top or vim), plain (the scrollback as text, escape sequences and overwrites resolved; default) or raw. since (a cursor from an earlier read or send) returns only what came after it. A session whose shell has exited stays readable until closed (the last line says exited (code N)).",
                read,
            )
            .idempotent(),
            Tool::new(
                "terminal_signal",
                "Send a signal to the session's foreground process group, e.g. INT to stop a running command (like Ctrl-C).",
                |_: &CallContext, args: SignalArgs| terminal::signal(&args.id.0, args.signal.name()).map(text),
            ),
            Tool::new(
                "terminal_close",
                "Close a session and kill every process in it, background ones included.",
                |_: &CallContext, args: IdArgs| terminal::close(&args.id.0).map(text),
            ),
            Tool::new(
                "terminal_list",
                "List your terminal sessions: alive, or exited (code N) for one whose shell has exited. An exited session holds no process and does not count toward the session limit; it stays listed and readable until you close it (the 16 that exited last are kept).",
                list,
            )
            .idempotent(),
        ]
    }
}

fn open(_context: &CallContext, args: OpenArgs) -> Result<ToolResult, ToolError> {
    let request = OpenRequest {
        cwd: args.cwd,
        env: args.env.into_iter().collect(),
        shell: args.shell,
        cols: args.cols,
        rows: args.rows,
    };
    let info = terminal::open(&request)?;
    Ok(text(format!(
        "opened {} ({} in {}, {}x{})",
        info.id, info.shell, info.cwd, info.cols, info.rows
    )))
}

fn send(_context: &CallContext, args: SendArgs) -> Result<ToolResult, ToolError> {
    let request = SendRequest {
        id: args.id.0,
        input: args.input,
        enter: args.enter.unwrap_or(true),
        quiet_ms: args.wait.quiet_ms,
        pattern: args.wait.pattern,
        timeout_ms: args.wait.timeout_ms,
        background: args.background,
    };
    let sent = terminal::send(&request)?;
    Ok(match sent.job {
        Some(job) => text(format!(
            "started background job {job}\nRead its output with job_output {{\"id\":\"{job}\"}}."
        )),
        None => {
            let mut content = sent.output;
            if !content.is_empty() && !content.ends_with('\n') {
                content.push('\n');
            }
            content.push_str(&format!(
                "[settled: {}; cursor: {}",
                sent.settled, sent.next_cursor
            ));
            if !sent.alive {
                content.push_str(&format!("; the shell has {}", state(false, sent.exit_code)));
            }
            content.push(']');
            text(content)
        }
    })
}

fn read(_context: &CallContext, args: ReadArgs) -> Result<ToolResult, ToolError> {
    let view = match args.view {
        Some(ViewArg::Screen) => View::Screen,
        Some(ViewArg::Raw) => View::Raw,
        Some(ViewArg::Plain) | None => View::Plain,
    };
    let request = ReadRequest {
        id: args.id.0,
        view,
        since: args.since,
        max_bytes: args.max_bytes,
    };
    let read = terminal::read(&request)?;
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
    Ok(text(content))
}

fn list(_context: &CallContext, _args: NoArgs) -> ToolResult {
    let sessions = terminal::list();
    if sessions.is_empty() {
        text("no terminal sessions")
    } else {
        text(
            sessions
                .iter()
                .map(describe_session)
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }
}

dsh_plugin::export!(tool_terminal: Terminal);
