//! One running language server: the process (started through the process capability's
//! launcher, in a container of its own, stdin and stdout on pipes, stderr discarded so
//! its logs cannot corrupt the stream), the JSON-RPC framing (`Content-Length` headers),
//! requests matched to responses by id, the server's own requests answered
//! (`workspace/configuration` from the settings, the rest with `null`), the `initialize`
//! handshake, the documents it has open and their versions, and the work it reports in
//! progress (`$/progress` work-done reports: what is indexing now).
//!
//! The framing is ours (a header reader and a writer, ~40 lines) rather than
//! `lsp-server`'s, whose `Message::read` is blocking `std::io` and would need a thread
//! per server, or `async-lsp`, a tower-based framework built around serving rather than
//! a handful of client requests.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use dsh_launch::{containment, find_program, launcher, ExecutorKind, Launch};

/// Why a server could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("its program `{0}` is not found on PATH")]
    Missing(String),
    #[error("cannot start it: {0}")]
    Start(String),
    #[error("it exited")]
    Exited,
    #[error("it answered the request with an error: {0}")]
    Rpc(String),
    #[error("cannot write to it: {0}")]
    Write(std::io::Error),
}

type Pending = Mutex<HashMap<i64, oneshot::Sender<Result<Value, ServerError>>>>;

/// What the reader task shares with the server handle.
struct Shared {
    pending: Pending,
    alive: AtomicBool,
    settings: Value,
    /// The server's work in progress, from its `$/progress` reports.
    progress: Mutex<Progress>,
    /// Woken whenever `progress` changes or the server dies.
    progress_changed: tokio::sync::Notify,
}

/// One piece of work a server reported as begun and not yet ended.
#[derive(Debug, Clone, PartialEq)]
struct Work {
    title: String,
    message: Option<String>,
    percentage: Option<u64>,
}

/// A server's work-done progress (`$/progress` with `begin`, `report`, `end`), by token.
///
/// Everything a server reports counts as indexing (clangd's `indexing`, rust-analyzer's
/// `Indexing` and `Roots Scanned`, gopls' `Loading packages`), but for work whose title
/// names a check (rust-analyzer's `cargo check`): it runs on and does not change what
/// a definition or a reference is.
#[derive(Debug, Default)]
pub(super) struct Progress {
    active: HashMap<String, Work>,
    /// How many pieces of work have begun so far.
    begun: u64,
}

impl Progress {
    /// Applies one `$/progress` notification's params; whether anything changed.
    pub(super) fn apply(&mut self, params: &Value) -> bool {
        let Some(token) = params.get("token") else {
            return false;
        };
        let token = token.to_string();
        let value = params.get("value").unwrap_or(&Value::Null);
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        let percentage = value.get("percentage").and_then(Value::as_u64);
        match value.get("kind").and_then(Value::as_str) {
            Some("begin") => {
                self.begun += 1;
                self.active.insert(
                    token,
                    Work {
                        title: text("title").unwrap_or_default(),
                        message: text("message"),
                        percentage,
                    },
                );
                true
            }
            Some("report") => match self.active.get_mut(&token) {
                Some(work) => {
                    if let Some(message) = text("message") {
                        work.message = Some(message);
                    }
                    if percentage.is_some() {
                        work.percentage = percentage;
                    }
                    true
                }
                None => false,
            },
            Some("end") => self.active.remove(&token).is_some(),
            _ => false,
        }
    }

    /// How many pieces of work have begun so far.
    pub(super) fn begun(&self) -> u64 {
        self.begun
    }

    /// The indexing in progress, described (`indexing 2/3, 66%`); `None` when none is.
    pub(super) fn indexing(&self) -> Option<String> {
        let mut works: Vec<String> = self
            .active
            .values()
            .filter(|work| !work.title.to_ascii_lowercase().contains("check"))
            .map(|work| {
                let mut text = match work.title.is_empty() {
                    true => "work".to_string(),
                    false => work.title.clone(),
                };
                if let Some(message) = &work.message {
                    text = format!("{text} {message}");
                }
                if let Some(percentage) = work.percentage {
                    text = format!("{text}, {percentage}%");
                }
                text
            })
            .collect();
        works.sort();
        (!works.is_empty()).then(|| works.join("; "))
    }

    /// Forgets all work (the server died).
    fn clear(&mut self) {
        self.active.clear();
    }
}

/// A document the server has open: its version and the text it was last sent.
struct OpenDocument {
    version: i32,
    text: String,
}

/// A started, initialized language server.
pub struct Server {
    pid: i32,
    writer: tokio::sync::Mutex<tokio::net::unix::pipe::Sender>,
    shared: Arc<Shared>,
    next_id: AtomicI64,
    documents: tokio::sync::Mutex<HashMap<PathBuf, OpenDocument>>,
    last_used: Mutex<Instant>,
    /// Requests waiting for their response: a server with any is not idle.
    in_flight: AtomicUsize,
    /// The server's container: killed when the server is dropped.
    run: containment::Run,
    /// A sandboxed server's confinement (its temporary directory lives as long).
    _sandbox: Option<dsh_launch::executor::Prepared>,
    /// Its private temporary directory: a sandboxed server's, handed over at an upgrade.
    private_tmp: Option<PathBuf>,
    /// The task reading the server's messages, which gives the reader back when paused
    /// (an upgrade), and the token that pauses it.
    reading: Mutex<Option<tokio::task::JoinHandle<Option<BufReader<LspReader>>>>>,
    pause: Mutex<tokio_util::sync::CancellationToken>,
    /// The reader while paused.
    paused: Mutex<Option<BufReader<LspReader>>>,
}

/// What the reader task reads: bytes read already by the binary before an upgrade,
/// then the server's stdout.
pub(super) struct LspReader {
    prefix: std::io::Cursor<Vec<u8>>,
    pipe: tokio::net::unix::pipe::Receiver,
}

impl tokio::io::AsyncRead for LspReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let position = this.prefix.position() as usize;
        let left = &this.prefix.get_ref()[position.min(this.prefix.get_ref().len())..];
        if !left.is_empty() {
            let n = left.len().min(buf.remaining());
            buf.put_slice(&left[..n]);
            this.prefix.set_position((position + n) as u64);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.pipe).poll_read(cx, buf)
    }
}

impl LspReader {
    fn new(pipe: tokio::net::unix::pipe::Receiver, prefix: Vec<u8>) -> BufReader<LspReader> {
        BufReader::new(LspReader {
            prefix: std::io::Cursor::new(prefix),
            pipe,
        })
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("pid", &self.pid).finish()
    }
}

/// A language server handed over at an upgrade.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ServerHandover {
    pub pid: i32,
    /// Its stdin's write end and its stdout's read end, open across the `exec`.
    pub writer: i32,
    pub reader: i32,
    /// What was read of its next message already (base64).
    pub pending: String,
    pub next_id: i64,
    /// Its open documents: path, version, the text it last saw.
    pub documents: Vec<(PathBuf, i32, String)>,
    pub settings: Value,
    pub run: containment::RunHandover,
    pub private_tmp: Option<PathBuf>,
}

/// Writes one message with its `Content-Length` header.
fn frame(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut bytes = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// Reads one message; `None` at the end of the stream. Headers other than
/// `Content-Length` are skipped.
async fn read_message<R: AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Value>> {
    let mut length: Option<usize> = None;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let header = line.trim_end();
        if header.is_empty() {
            if length.is_some() {
                break;
            }
            continue;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok();
            }
        }
    }
    let mut body = vec![0; length.unwrap_or(0)];
    reader.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The part of `settings` a `workspace/configuration` item's dotted `section` names.
fn section(settings: &Value, section: Option<&str>) -> Value {
    let Some(section) = section.filter(|s| !s.is_empty()) else {
        return settings.clone();
    };
    section
        .split('.')
        .try_fold(settings, |value, key| value.get(key))
        .cloned()
        .unwrap_or(Value::Null)
}

impl Server {
    /// Starts `command` in `root` through `launch` and does the `initialize`
    /// handshake.
    pub async fn start(
        launch: &Launch,
        command: &[String],
        root: &Path,
        executor: ExecutorKind,
        settings: Value,
        initialization_options: Value,
    ) -> Result<Arc<Server>, ServerError> {
        let program = command.first().map(String::as_str).unwrap_or("");
        let program_path =
            find_program(program).ok_or_else(|| ServerError::Missing(program.to_string()))?;
        let bash = find_program("bash").unwrap_or_else(|| PathBuf::from("/bin/bash"));
        let start = |e: &dyn std::fmt::Display| ServerError::Start(e.to_string());
        // bash execs the server with stderr on /dev/null: the launcher gives the child one
        // output for stdout and stderr, and the protocol stream must be stdout alone.
        let mut args: Vec<&[u8]> = vec![
            b"bash",
            b"-c",
            b"exec \"$@\" 2>/dev/null",
            b"dsh-lsp",
            program_path.as_os_str().as_bytes(),
        ];
        args.extend(command[1..].iter().map(|arg| arg.as_bytes()));
        let (to_server, server_stdin) = tokio::net::unix::pipe::pipe().map_err(|e| start(&e))?;
        let (server_stdout, from_server) = tokio::net::unix::pipe::pipe().map_err(|e| start(&e))?;
        let stdin_fd: OwnedFd = server_stdin.into_blocking_fd().map_err(|e| start(&e))?;
        let stdout_fd: OwnedFd = server_stdout.into_blocking_fd().map_err(|e| start(&e))?;
        // A sandboxed scope's server is sandboxed like its commands: it reads and runs
        // what they may have written (a build script, a compile_commands.json).
        let launcher::Contained {
            mut child,
            run,
            sandbox,
            ..
        } = launch
            .start(&launcher::Command {
                program: &bash,
                args: &args,
                env: &[],
                cwd: root,
                stdio: launcher::Stdio::Pipes {
                    input: stdin_fd.as_fd(),
                    output: stdout_fd.as_fd(),
                },
                executor,
                fd3: None,
                // A language server reads the workspace; it gets no network.
                network: None,
            })
            .map_err(|e| start(&e))?;
        drop((stdin_fd, stdout_fd));
        let pid = child.pid();
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            settings,
            progress: Mutex::new(Progress::default()),
            progress_changed: tokio::sync::Notify::new(),
        });
        let server = Arc::new(Server {
            pid,
            writer: tokio::sync::Mutex::new(to_server),
            shared: shared.clone(),
            next_id: AtomicI64::new(1),
            documents: tokio::sync::Mutex::new(HashMap::new()),
            last_used: Mutex::new(Instant::now()),
            in_flight: AtomicUsize::new(0),
            run,
            private_tmp: sandbox.as_ref().map(|s| s.tmp().to_path_buf()),
            _sandbox: sandbox,
            reading: Mutex::new(None),
            pause: Mutex::new(tokio_util::sync::CancellationToken::new()),
            paused: Mutex::new(None),
        });
        // The reaper: the server is dead once its process is.
        let watched = shared.clone();
        tokio::spawn(async move {
            let _ = child.wait().await;
            fail_all(&watched);
        });
        server.read_from(LspReader::new(from_server, Vec::new()));
        server.initialize(root, initialization_options).await?;
        tracing::info!(pid, program, root = %root.display(), "language server started");
        Ok(server)
    }

    async fn initialize(&self, root: &Path, options: Value) -> Result<(), ServerError> {
        let root_uri = lsp_types::Url::from_directory_path(root)
            .map(|u| u.to_string())
            .unwrap_or_default();
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let params = json!({
            "processId": std::process::id(),
            "clientInfo": { "name": "dsh", "version": env!("CARGO_PKG_VERSION") },
            "rootPath": root.display().to_string(),
            "rootUri": root_uri,
            "workspaceFolders": [{ "uri": root_uri, "name": name }],
            "capabilities": client_capabilities(),
            "initializationOptions": options,
        });
        self.request("initialize", params).await?;
        self.notify("initialized", json!({})).await?;
        if !self.shared.settings.is_null() {
            self.notify(
                "workspace/didChangeConfiguration",
                json!({ "settings": self.shared.settings.clone() }),
            )
            .await?;
        }
        Ok(())
    }

    /// Starts the task reading the server's messages from `reader`.
    fn read_from(self: &Arc<Self>, reader: BufReader<LspReader>) {
        let pause = tokio_util::sync::CancellationToken::new();
        *self.pause.lock().unwrap_or_else(|e| e.into_inner()) = pause.clone();
        let task = tokio::spawn(read_loop(
            reader,
            self.shared.clone(),
            Arc::downgrade(self),
            pause,
        ));
        *self.reading.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Stops reading the server's messages between two of them (an upgrade); false when
    /// its reader had ended (the server is gone).
    pub(super) async fn pause_reading(&self) -> bool {
        self.pause
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancel();
        let task = self
            .reading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(task) = task else {
            return self
                .paused
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some();
        };
        match task.await {
            Ok(Some(reader)) => {
                *self.paused.lock().unwrap_or_else(|e| e.into_inner()) = Some(reader);
                true
            }
            _ => false,
        }
    }

    /// Reads the server's messages again (an upgrade that did not happen); its pipes
    /// close on `exec` again.
    pub(super) async fn resume_reading(self: &Arc<Self>) {
        containment::close_on_exec(&self.writer.lock().await.as_raw_fd());
        let paused = self.paused.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(reader) = paused {
            containment::close_on_exec(&reader.get_ref().pipe.as_raw_fd());
            self.read_from(reader);
        }
    }

    /// The paused server as the next binary takes it back (its pipes named by number).
    pub(super) async fn hand_over(&self) -> std::io::Result<ServerHandover> {
        use base64::Engine as _;
        let writer = self.writer.lock().await.as_raw_fd();
        let (reader, pending) = {
            let paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
            let reader = paused.as_ref().ok_or_else(|| {
                std::io::Error::other("the language server's reader is not paused")
            })?;
            let mut pending = reader.buffer().to_vec();
            let prefix = &reader.get_ref().prefix;
            let at = (prefix.position() as usize).min(prefix.get_ref().len());
            pending.extend_from_slice(&prefix.get_ref()[at..]);
            (reader.get_ref().pipe.as_raw_fd(), pending)
        };
        let documents = self
            .documents
            .lock()
            .await
            .iter()
            .map(|(path, document)| (path.clone(), document.version, document.text.clone()))
            .collect();
        Ok(ServerHandover {
            pid: self.pid,
            writer,
            reader,
            pending: base64::engine::general_purpose::STANDARD.encode(pending),
            next_id: self.next_id.load(Ordering::Relaxed),
            documents,
            settings: self.shared.settings.clone(),
            run: self.run.hand_over(),
            private_tmp: self.private_tmp.clone(),
        })
    }

    /// A server the binary before handed over (from a tokio context): its process
    /// (`child`, adopted before the orphan reaper started), pipes and open documents.
    pub(super) fn restore(
        launch: &Launch,
        handed: ServerHandover,
        child: Option<dsh_launch::Child>,
    ) -> Result<Arc<Server>, String> {
        use base64::Engine as _;
        // Both taken before either is checked: neither is left open.
        let (writer, reader) = (
            containment::inherited_fd(handed.writer),
            containment::inherited_fd(handed.reader),
        );
        let writer = writer.ok_or("its stdin pipe was not open")?;
        let reader = reader.ok_or("its stdout pipe was not open")?;
        let writer = tokio::net::unix::pipe::Sender::from_owned_fd(writer)
            .map_err(|e| format!("its stdin pipe: {e}"))?;
        let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(reader)
            .map_err(|e| format!("its stdout pipe: {e}"))?;
        let mut child = child.ok_or("its process was not adopted")?;
        child.watch();
        let run = launch
            .containment()
            .adopt_run(&handed.run)
            .map_err(|e| e.to_string())?;
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
            settings: handed.settings,
            progress: Mutex::new(Progress::default()),
            progress_changed: tokio::sync::Notify::new(),
        });
        let documents = handed
            .documents
            .into_iter()
            .map(|(path, version, text)| (path, OpenDocument { version, text }))
            .collect();
        let server = Arc::new(Server {
            pid: handed.pid,
            writer: tokio::sync::Mutex::new(writer),
            shared: shared.clone(),
            next_id: AtomicI64::new(handed.next_id),
            documents: tokio::sync::Mutex::new(documents),
            last_used: Mutex::new(Instant::now()),
            in_flight: AtomicUsize::new(0),
            run,
            _sandbox: None,
            private_tmp: handed.private_tmp.clone(),
            reading: Mutex::new(None),
            pause: Mutex::new(tokio_util::sync::CancellationToken::new()),
            paused: Mutex::new(None),
        });
        let private_tmp = handed.private_tmp;
        tokio::spawn(async move {
            let _ = child.wait().await;
            fail_all(&shared);
            if let Some(tmp) = private_tmp {
                let _ = std::fs::remove_dir_all(tmp);
            }
        });
        let pending = base64::engine::general_purpose::STANDARD
            .decode(&handed.pending)
            .unwrap_or_default();
        server.read_from(LspReader::new(reader, pending));
        Ok(server)
    }

    /// The server's process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether its process is still running.
    pub fn alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Whether it has had no request in flight for `idle`.
    pub fn idle_for(&self, idle: std::time::Duration) -> bool {
        self.in_flight.load(Ordering::SeqCst) == 0
            && self
                .last_used
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed()
                >= idle
    }

    /// How many pieces of work the server has begun so far, and the indexing it has in
    /// progress now (described), from its `$/progress` reports.
    pub fn indexing(&self) -> (u64, Option<String>) {
        let progress = self
            .shared
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        (progress.begun(), progress.indexing())
    }

    /// Waits until the server has no indexing in progress, for at most `bound`: `None`
    /// once it has none (or died), else the indexing still in progress at the bound.
    pub async fn wait_indexed(&self, bound: std::time::Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let changed = self.shared.progress_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (_, indexing) = self.indexing();
            let indexing = indexing.filter(|_| self.alive())?;
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Some(indexing);
            }
        }
    }

    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    async fn write(&self, message: &Value) -> Result<(), ServerError> {
        if !self.alive() {
            return Err(ServerError::Exited);
        }
        let bytes = frame(message);
        let mut writer = self.writer.lock().await;
        writer.write_all(&bytes).await.map_err(ServerError::Write)
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), ServerError> {
        self.write(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await
    }

    /// Sends a request and waits for its response (no timeout here: the caller bounds
    /// it; a dropped wait leaves the response to be discarded).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ServerError> {
        /// Counts the request in flight until it is answered or dropped.
        struct InFlight<'a>(&'a Server);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
                self.0.touch();
            }
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _in_flight = InFlight(self);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, sender);
        let sent = self
            .write(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        if let Err(error) = sent {
            self.shared
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            return Err(error);
        }
        receiver.await.unwrap_or(Err(ServerError::Exited))
    }

    /// Makes the server see `text` as the content of `path`: opened the first time,
    /// changed (full text) when it differs from what it last saw.
    pub async fn sync_document(
        &self,
        path: &Path,
        uri: &str,
        language: &str,
        text: &str,
    ) -> Result<(), ServerError> {
        let mut documents = self.documents.lock().await;
        match documents.get_mut(path) {
            None => {
                self.notify(
                    "textDocument/didOpen",
                    json!({ "textDocument": {
                        "uri": uri, "languageId": language, "version": 1, "text": text
                    }}),
                )
                .await?;
                documents.insert(
                    path.to_path_buf(),
                    OpenDocument {
                        version: 1,
                        text: text.to_string(),
                    },
                );
            }
            Some(document) if document.text != text => {
                document.version += 1;
                document.text = text.to_string();
                self.notify(
                    "textDocument/didChange",
                    json!({
                        "textDocument": { "uri": uri, "version": document.version },
                        "contentChanges": [{ "text": text }]
                    }),
                )
                .await?;
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// Asks the server to shut down and exit, for at most `grace`; then kills it.
    pub async fn shutdown(&self, grace: std::time::Duration) {
        let polite = async {
            let _ = self.request("shutdown", Value::Null).await;
            let _ = self.notify("exit", Value::Null).await;
        };
        let _ = tokio::time::timeout(grace, polite).await;
        self.kill();
    }

    /// Kills the server's whole container.
    pub fn kill(&self) {
        self.run.kill();
        fail_all(&self.shared);
    }
}

/// Marks the server dead and fails every request waiting on it.
fn fail_all(shared: &Shared) {
    shared.alive.store(false, Ordering::SeqCst);
    shared
        .progress
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    shared.progress_changed.notify_waiters();
    let pending: Vec<_> = shared
        .pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .drain()
        .collect();
    for (_, sender) in pending {
        let _ = sender.send(Err(ServerError::Exited));
    }
}

/// Reads the server's messages until its stdout closes: responses go to their waiting
/// requests, the server's requests are answered (`window/workDoneProgress/create` with
/// `null`: a token needs nothing kept before its `begin`), its `$/progress` reports are
/// tracked, other notifications are dropped.
async fn read_loop(
    mut reader: BufReader<LspReader>,
    shared: Arc<Shared>,
    server: std::sync::Weak<Server>,
    pause: tokio_util::sync::CancellationToken,
) -> Option<BufReader<LspReader>> {
    loop {
        // Paused only between two messages: the reader goes back whole, what it holds
        // of the next one in its buffer.
        let ended = tokio::select! {
            biased;
            _ = pause.cancelled() => return Some(reader),
            filled = reader.fill_buf() => filled.map_or(true, |bytes| bytes.is_empty()),
        };
        if ended {
            break;
        }
        let message = match read_message(&mut reader).await {
            Ok(Some(message)) => message,
            Ok(None) => break,
            Err(error) => {
                tracing::warn!(%error, "unreadable message from a language server");
                break;
            }
        };
        let method = message.get("method").and_then(Value::as_str);
        let id = message.get("id").cloned();
        match (method, id) {
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { continue };
                let sender = shared
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&id);
                if let Some(sender) = sender {
                    let outcome = match message.get("error") {
                        Some(error) => Err(ServerError::Rpc(
                            error
                                .get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("unknown error")
                                .to_string(),
                        )),
                        None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                    };
                    let _ = sender.send(outcome);
                }
            }
            (Some(method), Some(id)) => {
                let result = match method {
                    "workspace/configuration" => {
                        let items = message
                            .pointer("/params/items")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default();
                        Value::Array(
                            items
                                .iter()
                                .map(|item| {
                                    section(
                                        &shared.settings,
                                        item.get("section").and_then(Value::as_str),
                                    )
                                })
                                .collect(),
                        )
                    }
                    "workspace/workspaceFolders" => Value::Null,
                    _ => Value::Null,
                };
                let Some(server) = server.upgrade() else {
                    break;
                };
                let _ = server
                    .write(&json!({ "jsonrpc": "2.0", "id": id, "result": result }))
                    .await;
            }
            (Some("$/progress"), None) => {
                let params = message.get("params").unwrap_or(&Value::Null);
                let changed = shared
                    .progress
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .apply(params);
                if changed {
                    shared.progress_changed.notify_waiters();
                }
            }
            _ => {}
        }
    }
    fail_all(&shared);
    None
}

/// The client capabilities dsh declares in `initialize`: what the four queries need
/// (plain-text hover first, location links, hierarchical symbols, UTF-16 positions), every
/// symbol kind (1 to 26: without a value set a server falls back to LSP 1.0's, which end
/// before `struct`; clangd 14 reads the set of `workspace.symbol`, others that of
/// `documentSymbol`) and work-done progress (how dsh knows the server is indexing).
pub fn client_capabilities() -> Value {
    let kinds = json!({ "valueSet": (1..=26).collect::<Vec<u32>>() });
    json!({
        "workspace": {
            "configuration": true,
            "workspaceFolders": true,
            "symbol": { "symbolKind": kinds }
        },
        "textDocument": {
            "synchronization": { "didSave": false },
            "hover": { "contentFormat": ["plaintext", "markdown"] },
            "definition": { "linkSupport": true },
            "references": {},
            "documentSymbol": {
                "hierarchicalDocumentSymbolSupport": true,
                "symbolKind": kinds
            }
        },
        "window": { "workDoneProgress": true },
        "general": { "positionEncodings": ["utf-16"] }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn messages_are_read_back_from_their_frames_with_other_headers_skipped() {
        let first = json!({ "jsonrpc": "2.0", "id": 1, "result": { "é": [1, 2] } });
        let mut bytes = b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n".to_vec();
        bytes.extend(frame(&first));
        bytes.extend(frame(&json!({ "method": "x" })));
        let mut reader = BufReader::new(&bytes[..]);
        assert_eq!(read_message(&mut reader).await.unwrap(), Some(first));
        assert_eq!(
            read_message(&mut reader).await.unwrap(),
            Some(json!({ "method": "x" }))
        );
        assert_eq!(read_message(&mut reader).await.unwrap(), None);
    }

    #[test]
    fn progress_is_indexing_from_its_begin_to_its_end_and_checks_are_not() {
        let mut progress = Progress::default();
        let report = |token: Value, value: Value| json!({ "token": token, "value": value });
        assert_eq!(progress.indexing(), None);
        assert!(progress.apply(&report(
            json!("backgroundIndexProgress"),
            json!({ "kind": "begin", "title": "indexing", "percentage": 0 })
        )));
        assert!(progress.apply(&report(
            json!("backgroundIndexProgress"),
            json!({ "kind": "report", "message": "2/3", "percentage": 66 })
        )));
        assert_eq!(progress.indexing().as_deref(), Some("indexing 2/3, 66%"));
        // A check is work but not indexing; a report for an unknown token changes nothing.
        assert!(progress.apply(&report(
            json!(7),
            json!({ "kind": "begin", "title": "cargo check" })
        )));
        assert!(!progress.apply(&report(json!(8), json!({ "kind": "report" }))));
        assert_eq!(progress.begun(), 2);
        assert!(progress.apply(&report(
            json!("backgroundIndexProgress"),
            json!({ "kind": "end" })
        )));
        assert_eq!(progress.indexing(), None);
        assert!(!progress.active.is_empty(), "the check is still going");
    }

    #[test]
    fn every_symbol_kind_and_work_done_progress_are_declared() {
        let capabilities = client_capabilities();
        let kinds: Vec<u64> = (1..=26).collect();
        for pointer in [
            "/textDocument/documentSymbol/symbolKind/valueSet",
            "/workspace/symbol/symbolKind/valueSet",
        ] {
            assert_eq!(
                capabilities.pointer(pointer),
                Some(&json!(kinds)),
                "{pointer}"
            );
        }
        assert_eq!(
            capabilities.pointer("/window/workDoneProgress"),
            Some(&json!(true))
        );
    }

    #[test]
    fn a_configuration_section_is_found_by_its_dotted_path() {
        let settings = json!({ "pylsp": { "plugins": { "a": 1 } } });
        assert_eq!(section(&settings, Some("pylsp.plugins")), json!({ "a": 1 }));
        assert_eq!(section(&settings, Some("nope")), Value::Null);
        assert_eq!(section(&settings, None), settings);
    }
}
