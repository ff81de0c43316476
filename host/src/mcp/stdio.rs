//! The stdio transport: one MCP connection on stdin and stdout, framed by dsh
//! ([`super::framing`]: each line parsed once, refused lines answered), its reading
//! stopped and its connection handed over at an upgrade, and taken back by the next
//! binary (its client's `initialize` replayed, its pending input read on).

use serde::{Deserialize, Serialize};

use super::*;
use crate::upgrade::TransportHandover;

/// Serves one MCP connection on stdin/stdout until the client closes stdin. dsh frames
/// the lines itself ([`framing`]): it parses each line once and hands rmcp the messages,
/// and one task writes rmcp's lines to stdout, with the framing's answers to refused
/// lines (too long, not JSON, no message) between them.
///
/// `upgrades` brings requests to upgrade the host ([`crate::upgrade`]): the framing stops
/// reading stdin (requests sent meanwhile wait in the pipe for the next binary), the
/// connection's calls are drained, and the connection is handed over; an upgrade that
/// does not happen leaves the connection as it was. `resume` is a connection handed over
/// by the binary before: its client's `initialize` is replayed to rmcp (the answer
/// dropped), then its pending input and stdin are read on.
pub async fn serve_stdio(
    server: Arc<McpServer>,
    mut upgrades: Option<tokio::sync::mpsc::Receiver<crate::upgrade::UpgradeAsk>>,
    mut resume: Option<StdioHandover>,
) -> Result<(), ServeError> {
    use tokio::io::AsyncReadExt;
    let (stdin, stdout) = stdio_streams();
    let ended = CancellationToken::new();
    let stdin = CancelOnEof {
        inner: stdin,
        on_eof: [ended.clone()],
    };
    let mut input: StdioInput = std::io::Cursor::new(Vec::new()).chain(stdin);
    let mut stdout = stdout;
    let calls = Arc::new(CallsInFlight::default());
    let kept = Arc::new(std::sync::atomic::AtomicBool::new(false));
    loop {
        let mut connection = McpConnection::new(server.clone(), "stdio");
        connection.calls = calls.clone();
        connection.kept = kept.clone();
        connection.resumed = resume.is_some();
        if let Some(handed) = &resume {
            connection.take_back(handed.log_level, handed.subscriptions.clone());
        }
        // The answer to the replayed `initialize` is not the client's.
        let skip_first_line = resume.as_ref().is_some_and(|h| h.initialize.is_some());
        if let Some(handed) = resume.take() {
            crate::upgrade::reading_again();
            let (_, stdin) = input.into_inner();
            input = std::io::Cursor::new(handed.replay()).chain(stdin);
        }
        let served = serve_stdio_once(
            &server,
            connection,
            &ended,
            input,
            stdout,
            skip_first_line,
            upgrades.as_mut(),
        )
        .await?;
        match served {
            StdioServed::Ended => return Ok(()),
            StdioServed::Resume {
                handed,
                input: back,
                stdout: out,
            } => {
                // The exec failed: this binary takes the connection back.
                kept.store(false, std::sync::atomic::Ordering::Release);
                input = back;
                stdout = out;
                resume = Some(handed);
            }
        }
    }
}

/// stdin as the framing reads it: input to replay first (a resumed connection's), then
/// the pipe.
type StdioInput = tokio::io::Chain<std::io::Cursor<Vec<u8>>, CancelOnEof<Reader>>;

/// How one incarnation of the stdio connection ended.
enum StdioServed {
    /// The client closed stdin (or it failed).
    Ended,
    /// An upgrade handed the connection over and its `exec` failed: serve it again.
    Resume {
        handed: StdioHandover,
        input: StdioInput,
        stdout: Writer,
    },
}

/// Serves the stdio connection until its input ends or an upgrade hands it over.
async fn serve_stdio_once(
    server: &Arc<McpServer>,
    connection: McpConnection,
    ended: &CancellationToken,
    input: StdioInput,
    stdout: Writer,
    skip_first_line: bool,
    mut upgrades: Option<&mut tokio::sync::mpsc::Receiver<crate::upgrade::UpgradeAsk>>,
) -> Result<StdioServed, ServeError> {
    use rmcp::ServiceExt;
    use tokio::io::AsyncReadExt;
    let max_message_bytes = server.host.config.serve.stdio.max_message_bytes;
    let (calls, kept) = (connection.calls.clone(), connection.kept.clone());
    let (log_threshold, subscriptions) = (
        connection.log_threshold.clone(),
        connection.subscriptions.clone(),
    );
    // rmcp waits up to 5 s for running handlers after its input ends; cancelling the
    // connection's calls at EOF makes them finish (CANCELLED) at once instead.
    let eof_closes = {
        let (ended, closed) = (ended.clone(), connection.closed.clone());
        tokio::spawn(async move {
            ended.cancelled().await;
            closed.cancel();
        })
    };
    let (framed, rmcp_in) = tokio::sync::mpsc::channel(STDIO_MESSAGES_QUEUED);
    let (rmcp_out, rmcp_written) = tokio::sync::mpsc::channel(STDIO_LINES_QUEUED);
    let (answers, answered) = tokio::sync::mpsc::channel(STDIO_ANSWERS_QUEUED);
    let framing = Framing {
        answers,
        max_message_bytes,
    };
    let mut reading = framing.start(input, framed);
    let writer = tokio::spawn(async move {
        let mut stdout = stdout;
        framing::write_output_skipping(rmcp_written, answered, &mut stdout, skip_first_line).await;
        stdout
    });
    let running = match connection
        .serve(framing::StdioTransport::new(rmcp_in, rmcp_out))
        .await
    {
        Ok(running) => running,
        // The input ended before a client said anything: nothing to serve, no error.
        Err(_) if ended.is_cancelled() => {
            reading.task.abort();
            eof_closes.abort();
            return Ok(StdioServed::Ended);
        }
        Err(error) => return Err(ServeError::Initialize(error.to_string())),
    };
    let peer = running.peer().clone();
    let stop_rmcp = running.cancellation_token();
    let mut service = tokio::spawn(running.waiting());
    let (ask, handed, input) = loop {
        let asked = crate::upgrade::next_ask(upgrades.as_deref_mut());
        tokio::select! {
            served = &mut service => {
                served
                    .map_err(|e| ServeError::Join(e.to_string()))?
                    .map_err(|e| ServeError::Join(e.to_string()))?;
                // rmcp has dropped its end of the output pipe: the writer ends once what
                // is queued is on stdout (bounded, should a stuck stdout hold it).
                reading.task.abort();
                eof_closes.abort();
                drop(framing);
                let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
                return Ok(StdioServed::Ended);
            }
            Some(ask) = asked => {
                // Checked while serving: the new binary loads the plugins meanwhile.
                let binary = match precheck_upgrade(server, &ask).await {
                    Ok(binary) => binary,
                    Err(why) => {
                        let _ = ask.reply.send(Err(why));
                        continue;
                    }
                };
                let stopped = reading.stop().await;
                let Some((stdin, framed, pending)) = stopped else {
                    let _ = ask.reply.send(Err("the client closed stdin: the connection is ending".into()));
                    continue;
                };
                match prepare_stdio_handover(server, binary, &calls, &peer, (&log_threshold, &subscriptions), &pending).await {
                    Ok(handed) => break (ask, handed, stdin),
                    Err(why) => {
                        let _ = ask.reply.send(Err(why));
                        reading = framing.start(std::io::Cursor::new(pending).chain(stdin), framed);
                    }
                }
            }
        }
    };
    let (prepared, handed) = handed;
    // The connection goes to the next binary: its owner's resources stay, and what rmcp
    // has written reaches stdout before the exec.
    kept.store(true, std::sync::atomic::Ordering::Release);
    prepared.announce(ask).await;
    stop_rmcp.cancel();
    let _ = service.await;
    eof_closes.abort();
    drop(framing);
    let input = std::io::Cursor::new(Vec::new()).chain(input);
    let stdout = match tokio::time::timeout(Duration::from_secs(5), writer).await {
        Ok(Ok(stdout)) => stdout,
        _ => {
            tracing::error!("the stdio writer did not finish; the upgrade goes on");
            Box::new(tokio::io::stdout())
        }
    };
    prepared.exec(&server.host).await;
    Ok(StdioServed::Resume {
        handed,
        input,
        stdout,
    })
}

/// What the framing of one incarnation needs to start (again).
struct Framing {
    answers: tokio::sync::mpsc::Sender<Vec<u8>>,
    max_message_bytes: usize,
}

/// The framing reading stdin, stoppable.
struct Reading {
    stop: CancellationToken,
    /// Ends with the way to rmcp only when told to stop: at the input's end it is dropped,
    /// which is rmcp's end of input.
    task: tokio::task::JoinHandle<(StdioInput, Option<MessagesToRmcp>, framing::Stopped)>,
}

impl Framing {
    fn start(&self, mut input: StdioInput, mut framed: MessagesToRmcp) -> Reading {
        let stop = CancellationToken::new();
        let (answers, max, told) = (self.answers.clone(), self.max_message_bytes, stop.clone());
        let task = tokio::spawn(async move {
            let stopped =
                framing::frame_input_until(&mut input, &mut framed, answers, max, &told).await;
            let framed = stopped.told.then_some(framed);
            (input, framed, stopped)
        });
        Reading { stop, task }
    }
}

impl Reading {
    /// Stops reading stdin; returns stdin, the way to rmcp and the bytes read and not
    /// yet passed on (a line begun, input to replay not read yet), or `None` when the
    /// input had ended.
    async fn stop(&mut self) -> Option<(CancelOnEof<Reader>, MessagesToRmcp, Vec<u8>)> {
        self.stop.cancel();
        let (input, framed, stopped) = (&mut self.task).await.ok()?;
        let framed = framed?;
        let (replay, stdin) = input.into_inner();
        let mut pending = stopped.pending;
        let position = (replay.position() as usize).min(replay.get_ref().len());
        pending.extend_from_slice(&replay.get_ref()[position..]);
        Some((stdin, framed, pending))
    }
}

/// The stdio connection's part of an upgrade: what its client sent in `initialize` (if it
/// sent one), its
/// log level and the input read and not yet passed on; then [`prepare_handover`].
async fn prepare_stdio_handover(
    server: &Arc<McpServer>,
    binary: std::path::PathBuf,
    calls: &CallsInFlight,
    peer: &rmcp::Peer<RoleServer>,
    (log_threshold, subscriptions): (&LogThreshold, &resources::Subscriptions),
    pending: &[u8],
) -> Result<(crate::upgrade::Prepared, StdioHandover), String> {
    use base64::Engine as _;
    // A client of 2026-07-28 sends no `initialize`: nothing to replay for it.
    let initialize = peer
        .peer_info()
        .map(|info| serde_json::to_value(&*info).unwrap_or_default());
    let handed = StdioHandover {
        initialize,
        log_level: log_threshold.get().map(|level| level as u8),
        pending_input: base64::engine::general_purpose::STANDARD.encode(pending),
        subscriptions: subscriptions.lock().unwrap().iter().cloned().collect(),
    };
    let prepared = prepare_handover(server, binary, calls, || {
        crate::upgrade::TransportEntry::of(&handed)
    })
    .await?;
    Ok((prepared, handed))
}

/// The messages the stdio framing has parsed and rmcp not yet taken (each at most
/// `[serve] stdio_max_message_bytes`): the framing stops reading stdin while it is full.
const STDIO_MESSAGES_QUEUED: usize = 4;
/// rmcp's lines waiting for stdout: its handlers wait while it is full.
const STDIO_LINES_QUEUED: usize = 16;
/// The framing's messages on their way to rmcp.
type MessagesToRmcp = tokio::sync::mpsc::Sender<rmcp::model::ClientJsonRpcMessage>;
/// The framing's answers waiting for stdout before it stops reading stdin.
const STDIO_ANSWERS_QUEUED: usize = 64;

type Reader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// stdin and stdout for the MCP stream. Pipes (how MCP clients start servers) are
/// read and written directly on the event loop; anything else (a terminal, a file)
/// goes through tokio's stdio, which hands every read and write to a blocking thread.
fn stdio_streams() -> (Reader, Writer) {
    use std::os::fd::AsFd;
    let pipe_in = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(tokio::net::unix::pipe::Receiver::from_file);
    let pipe_out = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(tokio::net::unix::pipe::Sender::from_file);
    let reader: Reader = match pipe_in {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let writer: Writer = match pipe_out {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    };
    (reader, writer)
}

/// A reader that cancels a token when it reaches end of input. A read error is the end of
/// input too (a terminal whose other side closed answers `EIO` from then on).
struct CancelOnEof<R> {
    inner: R,
    /// The connection's calls, and the end of input as such.
    on_eof: [CancellationToken; 1],
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CancelOnEof<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        match polled {
            std::task::Poll::Ready(Ok(()))
                if buf.filled().len() == before && buf.remaining() > 0 =>
            {
                tracing::info!("MCP input closed; cancelling the connection's calls");
                self.on_eof.iter().for_each(CancellationToken::cancel);
                polled
            }
            std::task::Poll::Ready(Err(error)) => {
                tracing::info!(%error, "MCP input failed; taken as its end, cancelling the connection's calls");
                self.on_eof.iter().for_each(CancellationToken::cancel);
                std::task::Poll::Ready(Ok(()))
            }
            _ => polled,
        }
    }
}

/// The stdio MCP connection, handed over between two of its requests.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StdioHandover {
    /// The params of the client's `initialize`, as it sent them (`None`: a client of MCP
    /// 2026-07-28, which never sends one).
    pub initialize: Option<serde_json::Value>,
    /// The level set with `logging/setLevel` (its number), if any.
    pub log_level: Option<u8>,
    /// Input read from stdin and not yet a whole line (base64).
    pub pending_input: String,
    /// The resources it subscribed to.
    #[serde(default)]
    pub subscriptions: Vec<String>,
}

impl StdioHandover {
    /// What a resumed connection's framing reads before stdin: the client's `initialize`
    /// replayed (its answer is dropped) and `notifications/initialized`, if it sent one,
    /// then the input that was pending.
    pub fn replay(&self) -> Vec<u8> {
        use base64::Engine as _;
        let mut bytes = Vec::new();
        if let Some(params) = &self.initialize {
            let initialize = serde_json::json!({
                "jsonrpc": "2.0",
                "id": REPLAYED_INITIALIZE_ID,
                "method": "initialize",
                "params": params,
            });
            bytes = initialize.to_string().into_bytes();
            bytes.extend_from_slice(
                b"\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            );
        }
        bytes.extend(
            base64::engine::general_purpose::STANDARD
                .decode(&self.pending_input)
                .unwrap_or_default(),
        );
        bytes
    }
}

/// The id of the replayed `initialize` (its answer is not the client's).
pub const REPLAYED_INITIALIZE_ID: &str = "dsh-upgrade-replay";

impl TransportHandover for StdioHandover {
    const KEY: &'static str = "stdio";
}
