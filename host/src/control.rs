//! The control socket: how `dsh plugins`, `dsh stats` and `dsh upgrade` reach a running
//! `dsh serve`. Each server listens on `STATE_DIR/run/PID.sock` (0600, in a 0700
//! directory only its user can enter) and answers one request per connection: a line
//! naming what to show, answered with one JSON document and the connection closed.
//! Every request but one only reports: `upgrade [{"binary": PATH}]` asks the server to
//! execute a new binary ([`crate::upgrade`]), and is refused to a peer that is another
//! user or a process dsh started (`SO_PEERCRED`, then its ancestry and cgroup).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// The longest request line a server reads.
const MAX_REQUEST_BYTES: u64 = 1024;
/// How long a client waits for a server's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// given, receives the `upgrade` requests of peers allowed to make them.
    pub fn listen(
        state_dir: &Path,
        answer: Answer,
        upgrades: Option<tokio::sync::mpsc::Sender<crate::upgrade::UpgradeAsk>>,
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
                    // An upgrade waits until its answer is written (then the exec).
                    let mut delivered = None;
                    let answered = match request.strip_prefix("upgrade") {
                        Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
                            upgrade(rest.trim(), peer, upgrades.as_ref()).await.map(
                                |(value, written)| {
                                    delivered = Some(written);
                                    value
                                },
                            )
                        }
                        _ => answer(request),
                    };
                    let reply = match answered {
                        Ok(value) => serde_json::json!({ "ok": value }),
                        Err(message) => serde_json::json!({ "error": message }),
                    };
                    let _ = write.write_all(reply.to_string().as_bytes()).await;
                    let _ = write.write_all(b"\n").await;
                    let _ = write.flush().await;
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

/// Answers an `upgrade` request: the peer is checked, then the server asked.
async fn upgrade(
    arguments: &str,
    peer: Option<dsh_launch::peer::Peer>,
    upgrades: Option<&tokio::sync::mpsc::Sender<crate::upgrade::UpgradeAsk>>,
) -> Result<(Value, tokio::sync::oneshot::Sender<()>), String> {
    let upgrades = upgrades.ok_or("this server cannot be upgraded (not `dsh serve`)")?;
    let peer = peer.ok_or("the asking process cannot be identified")?;
    crate::upgrade::peer_may_upgrade(peer.pid, peer.uid)
        .map_err(|why| format!("upgrade refused: {why}"))?;
    // The checks above read /proc by pid: they were about the peer only if it still
    // runs (its pid not yet another process's).
    if !peer.still_running() {
        return Err("upgrade refused: the asking process ended before it could be checked".into());
    }
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
        other => Err(ControlError::Refused {
            path: server.socket.clone(),
            message: other
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("an answer that is not JSON")
                .to_string(),
        }),
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
        let socket = ControlSocket::listen(state.path(), answer, None).unwrap();
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
    fn a_stale_socket_is_removed() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(run_dir(state.path())).unwrap();
        let stale = run_dir(state.path()).join("99999.sock");
        drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
        assert!(running_servers(state.path()).is_empty());
        assert!(!stale.exists());
    }
}
