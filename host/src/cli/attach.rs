//! `dsh attach`: this terminal attached to a terminal session of a running `dsh serve`,
//! through its control socket (see `dsh::control`): the session's screen, then its live
//! output; with `--write` what is typed here goes into the session (which the agent
//! cannot send to meanwhile) and the session follows this terminal's size. Ctrl-]
//! detaches and leaves the session running. `--list` lists every session of every
//! running server. Only this user, from outside dsh, may attach: a command an agent runs
//! is refused.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use dsh::control::{attach_input_line, attach_resize_line, AttachRequest, Attached, RunningServer};

use super::{ask, print, shutdown_signal, Globals};

/// The key that detaches: Ctrl-].
const DETACH_KEY: u8 = 0x1d;

#[derive(clap::Args)]
pub struct Args {
    /// The session: its ID (`term-3`: a server numbers its sessions across owners), or
    /// OWNER/ID (`http-2/term-3`, `stdio/term-1`)
    #[arg(value_name = "ID", required_unless_present = "list")]
    session: Option<String>,
    /// Type into the session too, and resize it to this terminal (its own size is put
    /// back on detach). While attached this way the agent's sends to it are refused
    /// (TERMINAL_HELD)
    #[arg(long, conflicts_with = "list")]
    write: bool,
    /// List every terminal session of every running server (of --pid's only, when given):
    /// SERVER OWNER/ID SHELL COLS×ROWS alive|exited(N) HELD-BY
    #[arg(long, conflicts_with = "session")]
    list: bool,
    /// With --list: print JSON, [{server, owner, id, shell, cwd, cols, rows, alive,
    /// exit_code, foreground, held_by}]
    #[arg(long, conflicts_with_all = ["session", "write"])]
    json: bool,
    /// Which running server, by pid (needed when several are running)
    #[arg(long, visible_alias = "server", value_name = "PID")]
    pid: Option<u32>,
}

pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    if args.list {
        return list(globals, &args).await;
    }
    let wanted = args
        .session
        .as_deref()
        .context("name a session: OWNER/ID")?;
    let server = globals.chosen_server(args.pid)?.with_context(|| {
        format!(
            "no dsh serve is running on {}",
            globals.state_dir().display()
        )
    })?;
    let (owner, id) = match wanted.rsplit_once('/') {
        Some((owner, id)) if !owner.is_empty() && !id.is_empty() => {
            (owner.to_string(), id.to_string())
        }
        _ => only_owner_of(&server, wanted).await?,
    };
    let name = format!("{owner}/{id}");
    let size = terminal_size();
    let request = AttachRequest {
        owner,
        id: id.clone(),
        write: args.write,
        cols: size.map(|s| s.0),
        rows: size.map(|s| s.1),
    };
    let attached = dsh::control::attach_to(&server, &request)
        .await
        .with_context(|| format!("cannot attach to {name}"))?;
    let mode = if args.write { "" } else { ", read-only" };
    eprintln!("[attached to {name}{mode}; Ctrl-] detaches]");
    let raw = match std::io::stdin().is_terminal() {
        true => Some(RawMode::enter().context("cannot put this terminal in raw mode")?),
        false => None,
    };
    let ended = stream(attached, args.write).await;
    // The session's attributes and a hidden cursor are not left behind.
    let mut stdout = tokio::io::stdout();
    let _ = stdout.write_all(b"\x1b[0m\x1b[?25h").await;
    let _ = stdout.flush().await;
    drop(raw);
    match ended? {
        Ended::Detached => eprintln!("\r\n[detached from {name}]"),
        Ended::Closed => eprintln!("\r\n{}", why_closed(&server, &request).await),
    }
    Ok(ExitCode::SUCCESS)
}

/// How an attach ended.
enum Ended {
    /// Here: the detach key, this terminal gone, a signal.
    Detached,
    /// The server closed the stream: the session exited or was closed, or the server ended.
    Closed,
}

/// Shows the session's bytes and sends what is typed (with `write`) and this terminal's
/// new sizes, until the detach key or the server's end of the stream.
async fn stream(attached: Attached, write: bool) -> anyhow::Result<Ended> {
    use tokio::signal::unix::{signal, SignalKind};
    let Attached {
        mut output,
        mut input,
        ..
    } = attached;
    let (keys_sender, mut keys) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    // Stdin is read on a thread of its own, blocking: it is this terminal's (shared with
    // the shell that started dsh), so it is never made non-blocking.
    std::thread::Builder::new()
        .name("dsh-attach-keys".into())
        .spawn(move || read_keys(&keys_sender))
        .context("cannot start reading the keyboard")?;
    let mut resized = match write {
        true => Some(signal(SignalKind::window_change()).context("cannot watch SIGWINCH")?),
        false => None,
    };
    let ended_by_signal = shutdown_signal();
    tokio::pin!(ended_by_signal);
    let mut stdout = tokio::io::stdout();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut keys_open = true;
    loop {
        tokio::select! {
            read = output.read(&mut chunk) => {
                let n = match read {
                    Ok(0) | Err(_) => return Ok(Ended::Closed),
                    Ok(n) => n,
                };
                if stdout.write_all(&chunk[..n]).await.is_err() || stdout.flush().await.is_err() {
                    return Ok(Ended::Detached);
                }
            }
            typed = keys.recv(), if keys_open => {
                let Some(typed) = typed else {
                    // Stdin ended: a writer has nothing more to type; a watcher watches on.
                    if write {
                        return Ok(Ended::Detached);
                    }
                    keys_open = false;
                    continue;
                };
                let detach = typed.iter().position(|&byte| byte == DETACH_KEY);
                let typed = &typed[..detach.unwrap_or(typed.len())];
                if write && !typed.is_empty() {
                    let line = attach_input_line(typed);
                    if input.write_all(line.as_bytes()).await.is_err() {
                        return Ok(Ended::Closed);
                    }
                }
                if detach.is_some() {
                    return Ok(Ended::Detached);
                }
            }
            () = window_changed(&mut resized) => {
                if let Some((cols, rows)) = terminal_size() {
                    let line = attach_resize_line(cols, rows);
                    if input.write_all(line.as_bytes()).await.is_err() {
                        return Ok(Ended::Closed);
                    }
                }
            }
            _ = &mut ended_by_signal => return Ok(Ended::Detached),
        }
    }
}

/// The next SIGWINCH, when they are watched (never otherwise).
async fn window_changed(resized: &mut Option<tokio::signal::unix::Signal>) {
    match resized {
        Some(signal) => {
            if signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Reads this terminal's keys and hands them on, until stdin ends or nobody listens.
fn read_keys(keys: &tokio::sync::mpsc::Sender<Vec<u8>>) {
    use std::io::Read;
    let mut stdin = std::io::stdin().lock();
    let mut chunk = [0u8; 4096];
    loop {
        match stdin.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                if keys.blocking_send(chunk[..n].to_vec()).is_err() {
                    return;
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// This terminal's size (columns, rows), when stdout or stdin is a terminal.
fn terminal_size() -> Option<(u16, u16)> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout())
        .or_else(|_| rustix::termios::tcgetwinsize(std::io::stdin()))
        .ok()?;
    (size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col, size.ws_row))
}

/// This terminal in raw mode (every key passed on as it is typed, nothing echoed, no
/// signal keys), put back as it was when dropped: on every way out, an error or a panic
/// included.
struct RawMode {
    saved: rustix::termios::Termios,
}

impl RawMode {
    fn enter() -> std::io::Result<RawMode> {
        let stdin = std::io::stdin();
        let saved = rustix::termios::tcgetattr(&stdin)?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw)?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(
            std::io::stdin(),
            rustix::termios::OptionalActions::Now,
            &self.saved,
        );
    }
}

/// The line saying why the server ended the attach: the session exited (its code), was
/// closed, or the server itself ended.
async fn why_closed(server: &RunningServer, request: &AttachRequest) -> String {
    let id = &request.id;
    let name = format!("{}/{id}", request.owner);
    let Ok(Value::Array(sessions)) = ask(server.clone(), "terminals").await else {
        return format!("[{name}: the server ended]");
    };
    let session = sessions
        .iter()
        .find(|s| s["owner"] == request.owner.as_str() && s["id"] == id.as_str());
    match session {
        None => format!("[{name} was closed]"),
        Some(s) if s["alive"] == false => match s["exit_code"].as_i64() {
            Some(code) => format!("[{id} exited with code {code}]"),
            None => format!("[{id} exited]"),
        },
        Some(_) => format!("[{name}: the server ended the attach]"),
    }
}

/// The one owner with a session `id`: an error naming every candidate when there are
/// several, and the sessions there are when there is none.
async fn only_owner_of(server: &RunningServer, id: &str) -> anyhow::Result<(String, String)> {
    let sessions = sessions_of(server).await?;
    let named = |s: &Value| format!("{}/{}", text(&s["owner"]), text(&s["id"]));
    let owners: Vec<&Value> = sessions.iter().filter(|s| s["id"] == id).collect();
    match owners.as_slice() {
        [only] => Ok((text(&only["owner"]).to_string(), id.to_string())),
        [] => {
            let all: Vec<String> = sessions.iter().map(named).collect();
            anyhow::bail!(
                "no terminal session {id} on dsh serve {} (sessions: {})",
                server.pid,
                if all.is_empty() {
                    "none".to_string()
                } else {
                    all.join(", ")
                }
            )
        }
        several => {
            let all: Vec<String> = several.iter().map(|s| named(s)).collect();
            anyhow::bail!(
                "{} owners have a terminal session {id} on dsh serve {}: name one as \
                 OWNER/ID ({})",
                several.len(),
                server.pid,
                all.join(", ")
            )
        }
    }
}

/// A server's terminal sessions, as its `terminals` answer lists them.
async fn sessions_of(server: &RunningServer) -> anyhow::Result<Vec<Value>> {
    match ask(server.clone(), "terminals").await? {
        Value::Array(sessions) => Ok(sessions),
        other => anyhow::bail!("dsh serve {} listed its terminals as {other}", server.pid),
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or("?")
}

/// `dsh attach --list`.
async fn list(globals: &Globals, args: &Args) -> anyhow::Result<ExitCode> {
    let servers = match args.pid {
        Some(pid) => globals.chosen_server(Some(pid))?.into_iter().collect(),
        None => dsh::control::running_servers(&globals.state_dir()),
    };
    if servers.is_empty() {
        eprintln!(
            "dsh: no dsh serve is running on {}",
            globals.state_dir().display()
        );
    }
    let mut listed = Vec::new();
    let mut failed = false;
    for server in &servers {
        match sessions_of(server).await {
            Ok(sessions) => listed.extend(sessions.into_iter().map(|mut session| {
                session["server"] = server.pid.into();
                session
            })),
            Err(error) => {
                eprintln!("dsh: server {}: {error:#}", server.pid);
                failed = true;
            }
        }
    }
    if args.json {
        print::json(&listed)?;
    } else {
        let row =
            |server: &str, session: &str, shell: &str, size: &str, state: &str, held: &str| {
                println!("{server:<8} {session:<24} {shell:<10} {size:<9} {state:<12} {held}");
            };
        if !listed.is_empty() {
            row("SERVER", "OWNER/ID", "SHELL", "SIZE", "STATE", "HELD-BY");
        }
        for s in &listed {
            let state = match (s["alive"].as_bool(), s["exit_code"].as_i64()) {
                (Some(true), _) => "alive".to_string(),
                (_, Some(code)) => format!("exited({code})"),
                _ => "exited".to_string(),
            };
            row(
                &s["server"].to_string(),
                &format!("{}/{}", text(&s["owner"]), text(&s["id"])),
                text(&s["shell"]),
                &format!("{}×{}", s["cols"], s["rows"]),
                &state,
                s["held_by"].as_str().unwrap_or("-"),
            );
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn a_session_or_the_list_is_named_and_not_both() {
        let parsed = |line: &[&str]| Command::try_parse_from(line).map(|c| c.args);
        let attach = parsed(&["attach", "stdio/term-1", "--write", "--pid", "7"]).unwrap();
        assert_eq!(attach.session.as_deref(), Some("stdio/term-1"));
        assert!(attach.write && attach.pid == Some(7));
        assert!(parsed(&["attach", "--list", "--json", "--server", "7"]).is_ok());
        assert!(parsed(&["attach"]).is_err(), "neither");
        assert!(parsed(&["attach", "term-1", "--list"]).is_err(), "both");
        assert!(parsed(&["attach", "term-1", "--json"]).is_err());
        assert!(parsed(&["attach", "--list", "--write"]).is_err());
    }
}
