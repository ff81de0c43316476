//! The control socket: how `dsh plugins`, `dsh stats` and `dsh upgrade` reach a running
//! `dsh serve`. Each server listens on `STATE_DIR/run/PID.sock` (0600, in a 0700
//! directory only its user can enter) and answers one request per connection: a line
//! naming what to show, answered with one JSON document and the connection closed.
//! Most requests only report. Three are refused to a peer that is another user or a
//! process dsh started (`SO_PEERCRED`, then its ancestry and cgroup: what a command an
//! agent runs could otherwise do to other owners): `upgrade [{"binary": PATH}]` asks the
//! server to execute a new binary ([`crate::upgrade`]); `terminals` lists every owner's
//! terminal sessions; and `attach {"owner", "id", "write", "cols", "rows"}` (what
//! `dsh attach` sends) is answered with one JSON line, then turns the connection into a
//! stream: the server writes the session's screen (its redraw bytes) and then its live
//! output, and closes the connection when the session exits or is closed; the client
//! writes newline-delimited `{"input": BASE64}` (typed into the session, with `write`
//! only, which holds the session: an agent's sends are refused meanwhile) and
//! `{"resize": [COLS, ROWS]}`, and ends the attach (the hold released, the session's own
//! size restored) by closing its side.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use crate::services::people::{Frame, PeopleTerminals, TerminalView};

/// The longest request line a server reads.
const MAX_REQUEST_BYTES: u64 = 1024;
/// How long a client waits for a server's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest line an attached client may write (input it types, base64-encoded).
const MAX_ATTACH_LINE_BYTES: u64 = 1 << 20;
/// How often an attached client is sent the session's output, at most.
const ATTACH_FRAME_INTERVAL: Duration = Duration::from_millis(16);

/// Answers a request (`plugins`, ...) with a JSON document, or says why it cannot.
pub type Answer = Arc<dyn Fn(&str) -> Result<Value, String> + Send + Sync>;

/// Why the control socket failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot listen on {path}: {source}")]
    Listen {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot ask the server at {path}: {source}")]
    Ask {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the server at {path} answered: {message}")]
    Refused { path: PathBuf, message: String },
}

/// A server's listening socket; dropping it stops listening and removes the file.
pub struct ControlSocket {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

/// A running server found in the state directory.
#[derive(Debug, Clone)]
pub struct RunningServer {
    pub pid: u32,
    pub socket: PathBuf,
}

fn run_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("run")
}

impl ControlSocket {
    /// Listens on `STATE_DIR/run/PID.sock` (from a tokio context). `upgrades`, when
    /// given, receives the `upgrade` requests of peers allowed to make them;
    /// `terminals`, when given, is what `terminals` lists and `attach` attaches to.
    pub fn listen(
        state_dir: &Path,
        answer: Answer,
        upgrades: Option<tokio::sync::mpsc::Sender<crate::upgrade::UpgradeAsk>>,
        terminals: Option<Arc<dyn PeopleTerminals>>,
    ) -> Result<ControlSocket, ControlError> {
        let dir = run_dir(state_dir);
        let path = dir.join(format!("{}.sock", std::process::id()));
        let listen_error = |source| ControlError::Listen {
            path: path.clone(),
            source,
        };
        let private_dir = std::fs::Permissions::from_mode(crate::private::DIR_MODE);
        crate::private::create_dir_all(&dir)
            .and_then(|()| std::fs::set_permissions(&dir, private_dir))
            .map_err(listen_error)?;
        // bind() applies the umask: the socket is bound under a temporary name, made this
        // user's only, and only then renamed into place, so it is never seen with
        // another mode. A file left by an earlier process with this pid is stale.
        let bound = dir.join(format!("{}.sock.new", std::process::id()));
        let _ = std::fs::remove_file(&bound);
        let listener = tokio::net::UnixListener::bind(&bound).map_err(listen_error)?;
        let private_file = std::fs::Permissions::from_mode(crate::private::FILE_MODE);
        std::fs::set_permissions(&bound, private_file)
            .and_then(|()| std::fs::rename(&bound, &path))
            .map_err(listen_error)?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let answer = answer.clone();
                let upgrades = upgrades.clone();
                let terminals = terminals.clone();
                tokio::spawn(async move {
                    use std::os::fd::AsRawFd;
                    let peer = dsh_launch::peer::Peer::of(stream.as_raw_fd()).ok();
                    let (read, mut write) = stream.into_split();
                    let mut line = String::new();
                    let mut reader = tokio::io::BufReader::new(read).take(MAX_REQUEST_BYTES);
                    if reader.read_line(&mut line).await.is_err() {
                        return;
                    }
                    let request = line.trim();
                    let (verb, arguments) = request.split_once(' ').unwrap_or((request, ""));
                    // An upgrade waits until its answer is written (then the exec).
                    let mut delivered = None;
                    let answered = match verb {
                        "upgrade" => upgrade(arguments.trim(), peer, upgrades.as_ref())
                            .await
                            .map(|(value, written)| {
                                delivered = Some(written);
                                value
                            }),
                        "terminals" => terminals_listed(peer, terminals.as_deref()),
                        "attach" => {
                            let reader = reader.into_inner();
                            let terminals = terminals.as_ref();
                            return attach(arguments.trim(), peer, terminals, reader, write).await;
                        }
                        _ => answer(request),
                    };
                    let _ = write_reply(&mut write, answered).await;
                    if let Some(delivered) = delivered {
                        let _ = delivered.send(());
                    }
                });
            }
        });
        tracing::debug!(socket = %path.display(), "control socket listening");
        Ok(ControlSocket { path, task })
    }
}

/// Writes a request's answer: one JSON line, `{"ok": ...}` or `{"error": ...}`.
async fn write_reply(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    answered: Result<Value, String>,
) -> std::io::Result<()> {
    let reply = match answered {
        Ok(value) => serde_json::json!({ "ok": value }),
        Err(message) => serde_json::json!({ "error": message }),
    };
    let mut line = reply.to_string();
    line.push('\n');
    write.write_all(line.as_bytes()).await?;
    write.flush().await
}

/// Checks that `peer` may make a request that reaches every owner's terminals or the
/// server itself (`what`: `upgrade`, `attach`, ...): this user, not a process dsh
/// started. Returns its pid.
fn peer_allowed(peer: Option<&dsh_launch::peer::Peer>, what: &str) -> Result<i32, String> {
    let peer =
        peer.ok_or_else(|| format!("{what} refused: the asking process cannot be identified"))?;
    crate::upgrade::peer_may_upgrade(peer.pid, peer.uid).map_err(|why| match what {
        "upgrade" => format!("upgrade refused: {why}"),
        // The check's own words are an upgrade's.
        _ => format!(
            "{what} refused: {}",
            why.replace("may not upgrade it", "may not reach its terminals")
        ),
    })?;
    // The checks above read /proc by pid: they were about the peer only if it still
    // runs (its pid not yet another process's).
    if !peer.still_running() {
        return Err(format!(
            "{what} refused: the asking process ended before it could be checked"
        ));
    }
    peer.pid
        .ok_or_else(|| format!("{what} refused: the asking process cannot be identified"))
}

/// Answers a `terminals` request: every owner's terminal sessions, to a peer that may
/// see them.
fn terminals_listed(
    peer: Option<dsh_launch::peer::Peer>,
    terminals: Option<&dyn PeopleTerminals>,
) -> Result<Value, String> {
    let terminals = terminals.ok_or("this server has no terminals (not `dsh serve`)")?;
    peer_allowed(peer.as_ref(), "terminals")?;
    serde_json::to_value(terminals.terminals()).map_err(|e| e.to_string())
}

/// What an `attach` request asks for.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
pub struct AttachRequest {
    pub owner: String,
    pub id: String,
    /// Type into the session (holding it) and resize it, not only watch it.
    #[serde(default)]
    pub write: bool,
    /// The attaching terminal's size (a writer's session is resized to it).
    #[serde(default)]
    pub cols: Option<u16>,
    #[serde(default)]
    pub rows: Option<u16>,
}

/// What an attached client writes, one JSON object a line.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum AttachInput {
    /// Bytes typed, base64.
    Input(String),
    /// The attaching terminal's new size.
    Resize([u16; 2]),
}

/// A session held by an attached writer: released (its own size restored) however the
/// attach ends.
struct Hold {
    terminals: Arc<dyn PeopleTerminals>,
    owner: String,
    id: String,
    by: String,
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Err(error) = self.terminals.release(&self.owner, &self.id, &self.by) {
            tracing::debug!(%error, id = %self.id, "attach: release");
        }
    }
}

/// Serves an `attach` request: checks the peer, holds the session when it writes,
/// answers, then streams the session's screen and output to it and what it types into
/// the session, until either side ends.
async fn attach(
    arguments: &str,
    peer: Option<dsh_launch::peer::Peer>,
    terminals: Option<&Arc<dyn PeopleTerminals>>,
    mut reader: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    mut write: tokio::net::unix::OwnedWriteHalf,
) {
    let started = begin_attach(arguments, peer.as_ref(), terminals);
    let (request, hold, mut viewer, answer) = match started {
        Ok(started) => started,
        Err(message) => {
            let _ = write_reply(&mut write, Err(message)).await;
            return;
        }
    };
    if write_reply(&mut write, Ok(answer)).await.is_err() {
        return;
    }
    tracing::info!(owner = %request.owner, id = %request.id, write = request.write, "attached");
    let frames = async {
        loop {
            match viewer.next(ATTACH_FRAME_INTERVAL).await {
                Some(Frame::Screen(bytes) | Frame::Output(bytes)) => {
                    if write.write_all(&bytes).await.is_err() || write.flush().await.is_err() {
                        return;
                    }
                }
                Some(Frame::Held(_)) => {}
                Some(Frame::Exited(_)) | None => return,
            }
        }
    };
    let input = async {
        let Some(hold) = &hold else {
            // A watcher's lines are read (and dropped) only to see it leave.
            let mut sink = [0u8; 4096];
            while matches!(reader.read(&mut sink).await, Ok(n) if n > 0) {}
            return;
        };
        loop {
            let mut line = String::new();
            match (&mut reader)
                .take(MAX_ATTACH_LINE_BYTES)
                .read_line(&mut line)
                .await
            {
                Ok(0) | Err(_) => return,
                Ok(_) if !line.ends_with('\n') => return,
                Ok(_) => {}
            }
            let outcome = match serde_json::from_str::<AttachInput>(&line) {
                Ok(AttachInput::Input(text)) => {
                    use base64::Engine as _;
                    match base64::engine::general_purpose::STANDARD.decode(text.trim()) {
                        Ok(bytes) => hold
                            .terminals
                            .type_in(&hold.owner, &hold.id, &hold.by, &bytes)
                            .await
                            .map_err(|e| e.to_string()),
                        Err(error) => Err(format!("input that is not base64: {error}")),
                    }
                }
                Ok(AttachInput::Resize([cols, rows])) => hold
                    .terminals
                    .resize(&hold.owner, &hold.id, &hold.by, cols, rows)
                    .map_err(|e| e.to_string()),
                Err(error) => Err(format!("not an attach message: {error}")),
            };
            if let Err(error) = outcome {
                tracing::debug!(%error, id = %hold.id, "attach: input");
            }
        }
    };
    tokio::select! {
        () = frames => {}
        () = input => {}
    }
    drop(hold);
    let _ = write.shutdown().await;
    tracing::info!(owner = %request.owner, id = %request.id, "detached");
}

/// An attach as far as its answer: the peer checked, the session held and resized (a
/// writer), a viewer of it made.
#[allow(clippy::type_complexity)]
fn begin_attach(
    arguments: &str,
    peer: Option<&dsh_launch::peer::Peer>,
    terminals: Option<&Arc<dyn PeopleTerminals>>,
) -> Result<(AttachRequest, Option<Hold>, Box<dyn TerminalView>, Value), String> {
    let terminals =
        terminals.ok_or("this server has no terminals to attach to (not `dsh serve`)")?;
    let pid = peer_allowed(peer, "attach")?;
    let request: AttachRequest = serde_json::from_str(arguments).map_err(|e| {
        format!("attach takes {{\"owner\", \"id\", \"write\", \"cols\", \"rows\"}}: {e}")
    })?;
    let by = format!("attach (pid {pid})");
    let hold = match request.write {
        false => None,
        true => {
            terminals
                .take_over(&request.owner, &request.id, &by)
                .map_err(|e| e.to_string())?;
            let hold = Hold {
                terminals: terminals.clone(),
                owner: request.owner.clone(),
                id: request.id.clone(),
                by,
            };
            if let (Some(cols), Some(rows)) = (request.cols, request.rows) {
                if cols > 0 && rows > 0 {
                    terminals
                        .resize(&request.owner, &request.id, &hold.by, cols, rows)
                        .map_err(|e| e.to_string())?;
                }
            }
            Some(hold)
        }
    };
    let viewer = terminals
        .view(&request.owner, &request.id, true)
        .map_err(|e| e.to_string())?;
    let size = terminals
        .terminals()
        .into_iter()
        .find(|info| *info.owner == *request.owner && info.id == request.id)
        .map(|info| (info.cols, info.rows));
    let answer = serde_json::json!({
        "owner": request.owner,
        "id": request.id,
        "cols": size.map(|s| s.0),
        "rows": size.map(|s| s.1),
    });
    Ok((request, hold, viewer, answer))
}

/// Answers an `upgrade` request: the peer is checked, then the server asked.
async fn upgrade(
    arguments: &str,
    peer: Option<dsh_launch::peer::Peer>,
    upgrades: Option<&tokio::sync::mpsc::Sender<crate::upgrade::UpgradeAsk>>,
) -> Result<(Value, tokio::sync::oneshot::Sender<()>), String> {
    let upgrades = upgrades.ok_or("this server cannot be upgraded (not `dsh serve`)")?;
    peer_allowed(peer.as_ref(), "upgrade")?;
    let binary = match arguments {
        "" => None,
        json => {
            let value: Value = serde_json::from_str(json)
                .map_err(|e| format!("upgrade takes {{\"binary\": PATH}}: {e}"))?;
            match value.get("binary") {
                Some(Value::String(path)) => Some(PathBuf::from(path)),
                Some(Value::Null) | None => None,
                Some(other) => return Err(format!("binary must be a path, not {other}")),
            }
        }
    };
    let (reply, answered) = tokio::sync::oneshot::channel();
    let (delivered, delivery) = tokio::sync::oneshot::channel();
    upgrades
        .send(crate::upgrade::UpgradeAsk {
            binary,
            reply,
            delivered: delivery,
        })
        .await
        .map_err(|_| "the server is shutting down".to_string())?;
    let said = answered
        .await
        .map_err(|_| "the server did not answer the upgrade".to_string())??;
    Ok((serde_json::json!({ "upgrading": said }), delivered))
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The servers listening under `state_dir`, by pid. Sockets nobody listens on any more
/// (a server that was killed) are removed. A state directory that is not this user's
/// own (see [`crate::session::check_state_dir`]) has none worth asking.
pub fn running_servers(state_dir: &Path) -> Vec<RunningServer> {
    if let Err(error) = crate::session::check_state_dir(state_dir) {
        tracing::debug!(%error, "not looking for running servers");
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(run_dir(state_dir)) else {
        return Vec::new();
    };
    let mut servers: Vec<RunningServer> = entries
        .flatten()
        .filter_map(|entry| {
            let socket = entry.path();
            let pid = socket
                .file_name()?
                .to_str()?
                .strip_suffix(".sock")?
                .parse()
                .ok()?;
            match std::os::unix::net::UnixStream::connect(&socket) {
                Ok(_) => Some(RunningServer { pid, socket }),
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                    let _ = std::fs::remove_file(&socket);
                    None
                }
                Err(_) => None,
            }
        })
        .collect();
    servers.sort_by_key(|server| server.pid);
    servers
}

/// Asks a running server `request` and returns its answer.
pub fn ask(server: &RunningServer, request: &str) -> Result<Value, ControlError> {
    ask_within(server, request, ANSWER_TIMEOUT)
}

/// Asks a running server `request`, waiting at most `timeout` for its answer.
pub fn ask_within(
    server: &RunningServer,
    request: &str,
    timeout: Duration,
) -> Result<Value, ControlError> {
    let ask_error = |source| ControlError::Ask {
        path: server.socket.clone(),
        source,
    };
    let mut stream = std::os::unix::net::UnixStream::connect(&server.socket).map_err(ask_error)?;
    stream.set_read_timeout(Some(timeout)).map_err(ask_error)?;
    stream
        .write_all(format!("{request}\n").as_bytes())
        .map_err(ask_error)?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(ask_error)?;
    let reply: Value = serde_json::from_str(&line).map_err(|e| ask_error(e.into()))?;
    match reply {
        Value::Object(mut fields) if fields.contains_key("ok") => {
            Ok(fields.remove("ok").unwrap_or_default())
        }
        other => Err(refused(server, &other)),
    }
}

/// An attach a running server accepted: its answer (`owner`, `id`, `cols`, `rows`), the
/// session's bytes to read and the side to write input and resizes to.
pub struct Attached {
    pub answer: Value,
    pub output: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    pub input: tokio::net::unix::OwnedWriteHalf,
}

/// Asks a running server to attach to a terminal session (from a tokio context).
pub async fn attach_to(
    server: &RunningServer,
    request: &AttachRequest,
) -> Result<Attached, ControlError> {
    let ask_error = |source| ControlError::Ask {
        path: server.socket.clone(),
        source,
    };
    let stream = tokio::net::UnixStream::connect(&server.socket)
        .await
        .map_err(ask_error)?;
    let (read, mut input) = stream.into_split();
    let line = serde_json::to_string(request).map_err(|e| ask_error(e.into()))?;
    input
        .write_all(format!("attach {line}\n").as_bytes())
        .await
        .map_err(ask_error)?;
    let mut output = tokio::io::BufReader::new(read);
    let mut line = String::new();
    match tokio::time::timeout(ANSWER_TIMEOUT, output.read_line(&mut line)).await {
        Ok(read) => read.map_err(ask_error)?,
        Err(_) => {
            return Err(ask_error(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer",
            )))
        }
    };
    let reply: Value = serde_json::from_str(&line).map_err(|e| ask_error(e.into()))?;
    match reply {
        Value::Object(mut fields) if fields.contains_key("ok") => Ok(Attached {
            answer: fields.remove("ok").unwrap_or_default(),
            output,
            input,
        }),
        other => Err(refused(server, &other)),
    }
}

/// The line an attached client writes to type `bytes` into the session.
pub fn attach_input_line(bytes: &[u8]) -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("{}\n", serde_json::json!({ "input": encoded }))
}

/// The line an attached client writes when its terminal's size changes.
pub fn attach_resize_line(cols: u16, rows: u16) -> String {
    format!("{}\n", serde_json::json!({ "resize": [cols, rows] }))
}

/// A server's refusal: the `error` of its answer.
fn refused(server: &RunningServer, answer: &Value) -> ControlError {
    ControlError::Refused {
        path: server.socket.clone(),
        message: answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("an answer that is not JSON")
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_answers_and_its_socket_goes_with_it() {
        let state = tempfile::tempdir().unwrap();
        let answer: Answer = Arc::new(|request| match request {
            "plugins" => Ok(serde_json::json!(["bash"])),
            other => Err(format!("unknown request {other:?}")),
        });
        let socket = ControlSocket::listen(state.path(), answer, None, None).unwrap();
        let mode = |path: &Path| crate::private::mode_of(path).unwrap();
        assert_eq!(mode(&run_dir(state.path())), 0o700);
        assert_eq!(mode(&socket.path), 0o600);
        let servers = tokio::task::spawn_blocking({
            let dir = state.path().to_path_buf();
            move || running_servers(&dir)
        })
        .await
        .unwrap();
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0].pid, std::process::id());
        let server = servers[0].clone();
        let (plugins, unknown) =
            tokio::task::spawn_blocking(move || (ask(&server, "plugins"), ask(&server, "nope")))
                .await
                .unwrap();
        assert_eq!(plugins.unwrap(), serde_json::json!(["bash"]));
        assert!(unknown.unwrap_err().to_string().contains("unknown request"));
        drop(socket);
        assert!(running_servers(state.path()).is_empty());
    }

    #[test]
    fn attach_lines_are_what_the_server_reads() {
        let typed = attach_input_line(b"ls\r");
        let parsed: AttachInput = serde_json::from_str(&typed).unwrap();
        assert!(matches!(parsed, AttachInput::Input(text) if text == "bHMN"));
        let resized: AttachInput = serde_json::from_str(&attach_resize_line(80, 24)).unwrap();
        assert!(matches!(resized, AttachInput::Resize([80, 24])));
        assert!(serde_json::from_str::<AttachInput>(r#"{"nope":1}"#).is_err());
    }

    #[test]
    fn a_stale_socket_is_removed() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(run_dir(state.path())).unwrap();
        let stale = run_dir(state.path()).join("99999.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(running_servers(state.path()).is_empty());
        assert!(!stale.exists());
    }
}
