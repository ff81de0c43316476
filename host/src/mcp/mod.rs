//! The MCP front end: `dsh serve` over stdio or streamable HTTP. The only module that
//! knows MCP and JSON-RPC.
//!
//! Each connection (the stdio peer, or one HTTP session) is an [`McpConnection`] with
//! its own owner, set here and passed to every call; when the connection ends, its
//! resources are released after the configured grace period. `tools/list` returns the
//! registry's manuals for the connection's scope; `tools/call` runs the whole pipeline,
//! with progress notifications while it runs when the client asked for them, and
//! `notifications/cancelled` cancels it (killing its processes). Registry changes become
//! `notifications/tools/list_changed`.

pub mod http;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::ElicitationMode;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::call::{
    describe_args, Approval, ApprovalFuture, ApprovalRequest, Approver, CallRequest, CallResult,
};
use crate::error::ErrorCode;
use crate::host::Host;

/// What every connection of one server shares.
pub struct McpServer {
    pub host: Arc<Host>,
    /// The scope connections see tools in.
    pub scope: Arc<str>,
}

/// One MCP connection: one owner.
pub struct McpConnection {
    server: Arc<McpServer>,
    owner: Arc<str>,
    /// Cancelled when the connection ends: stops its list-changed forwarder.
    closed: CancellationToken,
}

impl McpConnection {
    pub fn new(server: Arc<McpServer>, owner: impl Into<Arc<str>>) -> Self {
        let owner = owner.into();
        tracing::info!(owner = %owner, "MCP connection opened");
        McpConnection {
            server,
            owner,
            closed: CancellationToken::new(),
        }
    }
}

impl Drop for McpConnection {
    fn drop(&mut self) {
        self.closed.cancel();
        let grace = Duration::from_millis(self.server.host.config.serve.owner_grace_ms);
        tracing::info!(owner = %self.owner, grace_ms = grace.as_millis() as u64, "MCP connection closed");
        if tokio::runtime::Handle::try_current().is_ok() {
            self.server
                .host
                .services
                .release_owner_after(self.owner.clone(), grace);
        } else {
            self.server.host.services.release_owner(&self.owner);
        }
    }
}

/// Asks the MCP client to approve a call a guard asked about, with a form elicitation
/// (accept = approve; decline, cancel or no answer in time = deny). A client that did
/// not declare elicitation cannot be asked: the call is denied saying approval was
/// required.
#[derive(Debug)]
struct ElicitationApprover {
    peer: rmcp::Peer<RoleServer>,
    timeout: Duration,
}

impl Approver for ElicitationApprover {
    fn channel(&self) -> &'static str {
        "elicitation"
    }

    fn approve<'a>(&'a self, request: ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async move {
            if !self
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
            {
                return Approval::Unavailable("the MCP client does not support elicitation".into());
            }
            let message = format!(
                "Guard {} asks for approval: {}\n\nTool: {}\nArguments: {}\n\nAccept to run it, decline to refuse.",
                request.guard,
                request.reason,
                request.tool,
                describe_args(request.args)
            );
            let params = ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema: ElicitationSchema::new(Default::default()),
            };
            match self
                .peer
                .create_elicitation_with_timeout(params, Some(self.timeout))
                .await
            {
                Ok(answer) if answer.action == ElicitationAction::Accept => Approval::Approved,
                Ok(_) => Approval::Denied,
                Err(error) => Approval::Unavailable(format!("the elicitation failed: {error}")),
            }
        })
    }
}

/// The MCP result of a finished call: text content, `isError`, and the structured
/// error (`{code, message}`) when it failed.
fn to_mcp_result(result: CallResult) -> CallToolResult {
    let text = result.text();
    match &result.error {
        None => CallToolResult::success(vec![ContentBlock::text(text)]),
        Some(error) => {
            let mut mcp = CallToolResult::error(vec![ContentBlock::text(text)]);
            mcp.structured_content = Some(json!({ "code": error.code, "message": error.message }));
            mcp
        }
    }
}

impl ServerHandler for McpConnection {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("dsh", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "dsh runs tools on this machine. Every call is validated against the tool's schema \
                 and passes dsh's gates and guards; failures come back as results with isError and \
                 a stable code (e.g. INVALID_ARGUMENTS, DENIED, TIMEOUT).",
        )
    }

    /// Sessions are how dsh tells owners apart over HTTP, so it speaks the protocol
    /// versions that have them (2026-07-28 removed sessions).
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Owned(vec![
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2024_11_05,
        ])
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let mut changes = self.server.host.registry.subscribe();
        let (peer, closed, owner) = (context.peer, self.closed.clone(), self.owner.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = closed.cancelled() => break,
                    change = changes.recv() => {
                        if let Err(tokio::sync::broadcast::error::RecvError::Closed) = change {
                            break;
                        }
                        if peer.notify_tool_list_changed().await.is_err() {
                            break;
                        }
                        tracing::debug!(owner = %owner, "sent tools/list_changed");
                    }
                }
            }
        });
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let registry = &self.server.host.registry;
        let scope = registry
            .scope(&self.server.scope)
            .map_err(|e| ErrorData::internal_error(e.message, None))?;
        let tools = registry
            .schemas(&scope)
            .into_iter()
            .map(|spec| {
                let schema = match spec.input_schema {
                    serde_json::Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                Tool::new(spec.name, spec.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let approval_timeout =
            Duration::from_millis(self.server.host.config.serve.approval_timeout_ms);
        let call = CallRequest {
            tool: request.name.to_string(),
            args: request
                .arguments
                .map(serde_json::Value::Object)
                .unwrap_or_else(|| json!({})),
            owner: self.owner.clone(),
            scope: self.server.scope.clone(),
            approver: Some(Arc::new(ElicitationApprover {
                peer: context.peer.clone(),
                timeout: approval_timeout,
            })),
        };
        // Cancelled by `notifications/cancelled` for this request, or when the
        // connection's input ends.
        let cancel = self.closed.child_token();
        let running = self.server.host.pipeline.call(call, &cancel);
        tokio::pin!(running);
        let progress_token = context.meta.get_progress_token();
        let interval =
            Duration::from_millis(self.server.host.config.serve.progress_interval_ms.max(10));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let started = Instant::now();
        let result = loop {
            tokio::select! {
                result = &mut running => break result,
                _ = context.ct.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                _ = ticks.tick(), if progress_token.is_some() => {
                    let seconds = started.elapsed().as_secs_f64();
                    let token = progress_token.clone().expect("guarded by the branch condition");
                    let progress = ProgressNotificationParam::new(token, seconds)
                        .with_message(format!("running for {seconds:.1} s"));
                    let _ = context.peer.notify_progress(progress).await;
                }
            }
        };
        match &result.error {
            // The spec makes an unknown tool a protocol error, not a tool result.
            Some(error) if error.code == ErrorCode::UnknownTool => Err(ErrorData::invalid_params(
                error.message.clone(),
                Some(json!({ "code": error.code })),
            )),
            _ => Ok(to_mcp_result(result).into()),
        }
    }
}

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP handshake failed: {0}")]
    Initialize(String),
    #[error("the MCP connection task failed: {0}")]
    Join(String),
    #[error(transparent)]
    Io(std::io::Error),
}

/// Serves one MCP connection on stdin/stdout until the client closes stdin.
pub async fn serve_stdio(server: Arc<McpServer>) -> Result<(), ServeError> {
    use rmcp::ServiceExt;
    let connection = McpConnection::new(server, "stdio");
    // rmcp waits up to 5 s for running handlers after its input ends; cancelling the
    // connection's calls at EOF makes them finish (CANCELLED) at once instead.
    let (stdin, stdout) = stdio_streams();
    let stdin = CancelOnEof {
        inner: stdin,
        on_eof: connection.closed.clone(),
    };
    let running = connection
        .serve((stdin, stdout))
        .await
        .map_err(|e| ServeError::Initialize(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| ServeError::Join(e.to_string()))?;
    Ok(())
}

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

/// A reader that cancels a token when it reaches end of input.
struct CancelOnEof<R> {
    inner: R,
    on_eof: CancellationToken,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CancelOnEof<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = polled {
            if buf.filled().len() == before && buf.remaining() > 0 {
                tracing::info!("MCP input closed; cancelling the connection's calls");
                self.on_eof.cancel();
            }
        }
        polled
    }
}
