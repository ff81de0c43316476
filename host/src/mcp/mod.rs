//! The MCP front end: `dsh serve` over stdio or streamable HTTP. The only module that
//! knows MCP and JSON-RPC.
//!
//! Each connection (the stdio peer, or one HTTP session) is an [`McpConnection`] with
//! its own owner, set here and passed to every call; when the connection ends, its
//! resources are released after the configured grace period. `tools/list` returns the
//! registry's manuals for the connection's scope (with `outputSchema` for a tool that
//! declares one); `tools/call` runs the whole pipeline, with progress notifications
//! while it runs when the client asked for them, and `notifications/cancelled` cancels
//! it (killing its processes). Registry changes become
//! `notifications/tools/list_changed`. The connection's terminal screens and job outputs
//! are MCP resources ([`resources`]): listed, read, subscribed to, with their template
//! ids completed.
//!
//! A result's content items become MCP content blocks one for one (text, image and
//! audio as base64, resource links, embedded resources) and its structured output
//! `structuredContent`. While a call runs, its notices ([`crate::call::Notices`]) reach
//! this connection: a plugin's `progress.report` becomes a progress notification for the
//! call's progress token (and stops the host's own elapsed-time notifications for that
//! call), and a plugin's `log` line at or above the level the client set with
//! `logging/setLevel` becomes `notifications/message` (logger: the plugin's name, data:
//! the line). Until the client sets a level, no log line is sent.
//!
//! Two protocol eras: over stdio a request of MCP 2026-07-28 (its version and client
//! capabilities in `_meta`, no `initialize`) is served beside the 2025 handshake (rmcp
//! checks the `_meta` keys and the version); its `tools/call` goes through
//! [`round_trip`], which turns a question for the client (a guard's ask, a plugin's sampling
//! or form, a foreground subagent's model) into `input_required` and resumes the call on the
//! retry. Over HTTP a 2025 session is an owner, and a 2026-07-28 request is owned by its
//! token's principal ([`http`]). The stdio transport (its framing, its handover at an
//! upgrade) is [`stdio`]; the HTTP one [`http`].

// Public only for the fuzz targets (fuzz/): not part of the API.
#[doc(hidden)]
pub mod framing;
pub mod http;
mod logging;
mod resources;
mod round_trip;
mod sampling;
mod stdio;
mod tasks;

pub use round_trip::{GuardAnswer, HandedRoundTrips, RoundTripHandover};
pub use stdio::{serve_stdio, StdioHandover};

/// What the transports handed over at an upgrade, each through
/// [`TransportHandover`](crate::upgrade::TransportHandover): the stdio connection or the
/// HTTP server (whichever served), and the calls parked at a guard's question.
pub struct HandedTransports {
    pub stdio: Option<StdioHandover>,
    pub http: Option<http::HttpHandover>,
    pub round_trips: HandedRoundTrips,
}

/// The transports' entries of `snapshot`, or why one cannot be read (the new binary's
/// check reads them before the `exec`, as it does the capabilities').
pub fn handed_transports(snapshot: &crate::upgrade::Snapshot) -> Result<HandedTransports, String> {
    Ok(HandedTransports {
        stdio: snapshot.transport()?,
        http: snapshot.transport()?,
        round_trips: snapshot.transport()?.unwrap_or_default(),
    })
}

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, EmbeddedResource,
    ErrorData, Implementation, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, Resource,
    ResourceContents as McpResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::ElicitationMode;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::call::{
    describe_args, Approval, ApprovalFuture, ApprovalRequest, Approver, CallRequest, CallResult,
    ContentItem, LogThreshold, Notice, Notices, ResourceContents,
};
use crate::error::ErrorCode;
use crate::host::Host;

/// What every connection of one server shares.
pub struct McpServer {
    pub host: Arc<Host>,
    /// The scope connections see tools in.
    pub scope: Arc<str>,
    /// Calls of the 2026-07-28 revision waiting for the client's retry (one set for the
    /// process: every scope's servers share it).
    round_trips: Arc<round_trip::RoundTrips>,
}

/// The round-trip key's file in the state directory.
const ROUND_TRIP_KEY_FILE: &str = "round-trips.key";

impl McpServer {
    /// The server of `scope` on `host`.
    pub fn new(host: Arc<Host>, scope: &str) -> Self {
        let wait = Duration::from_millis(host.config.serve.approval_timeout_ms);
        let key_file = host
            .pipeline
            .runtime
            .state_dir
            .as_ref()
            .map(|dir| dir.join(ROUND_TRIP_KEY_FILE));
        McpServer {
            round_trips: Arc::new(round_trip::RoundTrips::new(wait, key_file.as_deref())),
            host,
            scope: Arc::from(scope),
        }
    }

    /// A server of `scope` on the same host, sharing this one's calls waiting for retries.
    pub fn for_scope(&self, scope: &str) -> Self {
        McpServer {
            host: self.host.clone(),
            scope: Arc::from(scope),
            round_trips: self.round_trips.clone(),
        }
    }

    /// Calls handed over by the binary before (`dsh upgrade`): their retries run them again.
    pub fn adopt_round_trips(&self, handed: round_trip::HandedRoundTrips) {
        self.round_trips.adopt(handed.0);
    }
}

/// One MCP connection: one owner.
pub struct McpConnection {
    server: Arc<McpServer>,
    /// Set once at start; an HTTP session restored after an upgrade takes back the owner
    /// it had (its `initialize` replayed).
    owner: std::sync::RwLock<Arc<str>>,
    /// Cancelled when the connection ends: stops its list-changed forwarder.
    closed: CancellationToken,
    /// The lowest level of plugin log lines this client wants (`logging/setLevel`);
    /// none until it sets one.
    log_threshold: Arc<LogThreshold>,
    /// Set when this client was shown a catalog before the plugin set had loaded whole
    /// (it then hears `tools/list_changed` once the rest has come).
    shown_partial: Arc<std::sync::atomic::AtomicBool>,
    /// The resource URIs this client subscribed to.
    subscriptions: resources::Subscriptions,
    /// Counts this connection in `dsh_owners` while it lives.
    _live: crate::metrics::LiveOwner,
    /// The connection's calls in flight, which an upgrade drains.
    calls: Arc<CallsInFlight>,
    /// Set when the connection is handed to the next binary (an upgrade): its owner's
    /// resources are kept, not released, when it ends here.
    kept: Arc<std::sync::atomic::AtomicBool>,
    /// Handed over by the binary before (an upgrade): the client hears
    /// `tools/list_changed` once the plugin set has loaded again.
    resumed: bool,
    /// Over HTTP, what the connection holds of its transport (its session, its principal).
    http: Option<http::HttpPart>,
    /// The owner's resource changes, watched when `initialize` is answered and taken by
    /// the forwarder `on_initialized` starts: rmcp handles a notification on a task of
    /// its own, so the client's next request (a job started) may run before
    /// `on_initialized` does, and its change must not be missed.
    resource_watch: std::sync::Mutex<Option<ResourceWatch>>,
}

/// A receiver of one owner's resource changes.
type ResourceWatch =
    tokio::sync::broadcast::Receiver<crate::services::resource_changes::ResourceChange>;

/// The calls in flight on one connection: counted, and cancelled together when an
/// upgrade's drain runs out of time.
#[derive(Debug)]
pub struct CallsInFlight {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
    /// Cancelled (and replaced) when a drain runs out of time.
    drain: std::sync::Mutex<CancellationToken>,
}

impl Default for CallsInFlight {
    fn default() -> Self {
        CallsInFlight {
            count: Default::default(),
            idle: Default::default(),
            drain: std::sync::Mutex::new(CancellationToken::new()),
        }
    }
}

/// One call counted in flight until dropped.
struct CountedCall(Arc<CallsInFlight>);

impl Drop for CountedCall {
    fn drop(&mut self) {
        if self
            .0
            .count
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            self.0.idle.notify_waiters();
        }
    }
}

impl CallsInFlight {
    /// Counts a call in; returns its count and the token a drain cancels it with.
    fn enter(self: &Arc<Self>) -> (CountedCall, CancellationToken) {
        self.count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let drain = self.drain.lock().unwrap().clone();
        (CountedCall(self.clone()), drain)
    }

    /// How many calls are in flight.
    pub fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until no call is in flight, at most `deadline`; past it, cancels those left
    /// (they end `CANCELLED`, their processes killed) and waits for them to end. Returns
    /// how many were cancelled.
    pub async fn drain(&self, deadline: Duration) -> usize {
        if tokio::time::timeout(deadline, self.idle()).await.is_ok() {
            return 0;
        }
        let left = self.count();
        let token = std::mem::take(&mut *self.drain.lock().unwrap());
        token.cancel();
        self.idle().await;
        left
    }

    async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// How long a first `tools/list` waits, beyond the embedded set, for the plugin
/// directory's plugins (from the compile cache they take milliseconds, and a small one
/// compiles in well under this; a large one still compiling, or one whose `describe()`
/// spins, arrives later with `tools/list_changed`).
const DIRECTORY_PLUGINS_WAIT: Duration = Duration::from_secs(5);

impl McpConnection {
    pub fn new(server: Arc<McpServer>, owner: impl Into<Arc<str>>) -> Self {
        let owner = owner.into();
        tracing::debug!(owner = %owner, "MCP connection opened");
        McpConnection {
            _live: server.host.metrics().owner(),
            server,
            owner: std::sync::RwLock::new(owner),
            closed: CancellationToken::new(),
            log_threshold: Arc::default(),
            shown_partial: Arc::default(),
            subscriptions: Arc::default(),
            calls: Arc::default(),
            kept: Arc::default(),
            resumed: false,
            http: None,
            resource_watch: std::sync::Mutex::new(None),
        }
    }

    /// An HTTP request's connection, owned by `principal` (the request's token's): one
    /// request under MCP 2026-07-28, or a 2025 session, which takes `session_owner` when
    /// its `initialize` comes. Its calls are counted with every HTTP call (an upgrade
    /// drains them), kept with the others at an upgrade; a session is booked in `book`.
    pub fn for_http(
        server: Arc<McpServer>,
        session_owner: impl Into<Arc<str>>,
        principal: Arc<str>,
        calls: Arc<CallsInFlight>,
        kept: Arc<std::sync::atomic::AtomicBool>,
        book: Arc<http::book::SessionBook>,
    ) -> Self {
        let serve = &server.host.config.serve;
        let idle = Duration::from_millis(serve.http.session_idle_ms + serve.owner_grace_ms);
        let hold = server.host.services.hold_owner(principal.clone(), idle);
        let mut connection = McpConnection::new(server, principal.clone());
        connection.calls = calls;
        connection.kept = kept;
        connection.http = Some(http::HttpPart {
            book,
            session_id: std::sync::OnceLock::new(),
            session_owner: session_owner.into(),
            principal,
            principal_hold: std::sync::Mutex::new(Some(hold)),
        });
        connection
    }

    /// What a connection handed over at an upgrade had set: its log level and its
    /// subscriptions.
    fn take_back(&self, log_level: Option<u8>, subscriptions: Vec<String>) {
        if let Some(level) = log_level {
            let level = crate::call::LogLevel::ALL
                .into_iter()
                .find(|l| *l as u8 == level);
            self.log_threshold.set(level);
        }
        self.subscriptions.lock().unwrap().extend(subscriptions);
    }

    /// A receiver of the owner's resource changes from now on.
    fn watch_resources(&self) -> ResourceWatch {
        let services = &self.server.host.services;
        services.resource_changes().watch(&self.owner())
    }

    /// The connection's owner.
    fn owner(&self) -> Arc<str> {
        self.owner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for McpConnection {
    fn drop(&mut self) {
        self.closed.cancel();
        if let Some(http) = &self.http {
            if let Some(id) = http.session_id.get() {
                http.book.closed(id);
            }
        }
        if self.kept.load(std::sync::atomic::Ordering::Acquire) {
            tracing::info!(owner = %self.owner(), "MCP connection handed over; its resources are kept");
            return;
        }
        if self
            .http
            .as_ref()
            .is_some_and(|http| http.principal_hold.lock().unwrap().is_some())
        {
            // One request of a principal: its hold, dropped with it, starts the grace
            // period if it was the principal's last request in flight.
            return;
        }
        let grace = Duration::from_millis(self.server.host.config.serve.owner_grace_ms);
        let owner = self.owner();
        tracing::info!(owner = %owner, grace_ms = grace.as_millis() as u64, "MCP connection closed");
        if tokio::runtime::Handle::try_current().is_ok() {
            self.server.host.services.release_owner_after(owner, grace);
        } else {
            self.server.host.services.release_owner(&owner);
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

/// The client's trace, when it sent one (`_meta.traceparent`, SEP-414), as a call's parent.
fn trace_parent(context: &RequestContext<RoleServer>) -> crate::traces::CallParent {
    match crate::traces::TraceContext::from_meta(&context.meta) {
        Some(remote) => crate::traces::CallParent::Remote(remote),
        None => crate::traces::CallParent::None,
    }
}

/// The MCP result of a finished call: its content items as content blocks (the error
/// line first when it failed), its structured output as `structuredContent`, and when
/// it failed `isError` and the structured error (`{code, message}`) as
/// `structuredContent` too, unless the tool declares an output schema (`has_schema`):
/// the error does not match it, and clients check `structuredContent` against the
/// schema even on errors (the TypeScript SDK 1.x, so Claude Code, turns the whole result
/// into a protocol error), so such a tool's error is its `CODE: message` text alone.
fn to_mcp_result(result: CallResult, has_schema: bool) -> CallToolResult {
    match &result.error {
        None => {
            let mut mcp =
                CallToolResult::success(result.content.into_iter().map(to_mcp_content).collect());
            mcp.structured_content = result.structured;
            mcp
        }
        Some(error) => {
            let mut mcp = CallToolResult::error(vec![ContentBlock::text(result.text())]);
            mcp.content.extend(
                result
                    .content
                    .into_iter()
                    .filter(|item| !matches!(item, ContentItem::Text(_)))
                    .map(to_mcp_content),
            );
            if !has_schema {
                mcp.structured_content =
                    Some(json!({ "code": error.code, "message": error.message }));
            }
            mcp
        }
    }
}

/// One content item as an MCP content block; bytes go as base64.
fn to_mcp_content(item: ContentItem) -> ContentBlock {
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    match item {
        ContentItem::Text(text) => ContentBlock::text(text),
        ContentItem::Image(image) => ContentBlock::image(base64(&image.data), image.mime_type),
        ContentItem::Audio(audio) => ContentBlock::audio(base64(&audio.data), audio.mime_type),
        ContentItem::ResourceLink(link) => {
            let mut resource = Resource::new(link.uri, link.name);
            resource.description = link.description;
            resource.mime_type = link.mime_type;
            ContentBlock::resource_link(resource)
        }
        ContentItem::Resource(embedded) => {
            let contents = match embedded.contents {
                ResourceContents::Text(text) => McpResourceContents::TextResourceContents {
                    uri: embedded.uri,
                    mime_type: embedded.mime_type,
                    text,
                    meta: None,
                },
                ResourceContents::Blob(blob) => McpResourceContents::BlobResourceContents {
                    uri: embedded.uri,
                    mime_type: embedded.mime_type,
                    blob: base64(&blob),
                    meta: None,
                },
            };
            ContentBlock::Resource(EmbeddedResource::new(contents))
        }
    }
}

/// The values of one call's progress notifications. Until a plugin reports, the host
/// sends the seconds elapsed (no total); from its first report on, the plugin's fraction
/// as a percentage (total 100) and the host stops guessing. MCP wants every value
/// greater than the last, so a report that would not raise it (no fraction, or a
/// smaller one) goes with the last value plus 0.001, carrying its message.
#[derive(Debug, Default)]
struct ProgressTrack {
    last: f64,
    reported: bool,
}

impl ProgressTrack {
    /// The host's elapsed-time notification, while no plugin has reported.
    fn host_guess(&mut self, seconds: f64) -> Option<f64> {
        if self.reported || seconds <= self.last {
            return None;
        }
        self.last = seconds;
        Some(seconds)
    }

    /// A plugin's report: the value and the total to send.
    fn plugin(&mut self, fraction: Option<f64>) -> (f64, Option<f64>) {
        self.reported = true;
        let percent = fraction.map(|f| f * 100.0);
        self.last = match percent {
            Some(percent) if percent > self.last => percent,
            _ => self.last + 0.001,
        };
        (self.last, percent.map(|_| 100.0))
    }
}

/// Sends one notice of the running call `request` to the client: progress (when the
/// call has a progress token) or a log line (tied to the call, so over HTTP it goes on
/// the call's response stream: see [`logging`]).
async fn forward(
    peer: &rmcp::Peer<RoleServer>,
    request: &rmcp::model::RequestId,
    token: Option<&ProgressToken>,
    track: &mut ProgressTrack,
    notice: Notice,
) {
    match notice {
        Notice::Progress { fraction, message } => {
            let Some(token) = token else { return };
            let (value, total) = track.plugin(fraction);
            let mut progress = ProgressNotificationParam::new(token.clone(), value);
            if let Some(total) = total {
                progress = progress.with_total(total);
            }
            if let Some(message) = message {
                progress = progress.with_message(message);
            }
            let _ = peer.notify_progress(progress).await;
        }
        Notice::Log {
            level,
            logger,
            message,
        } => {
            logging::send(peer, request, level, logger, message).await;
        }
    }
}

impl ServerHandler for McpConnection {
    #[allow(deprecated)] // `enable_logging`: see `logging`
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_completions()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("dsh", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "dsh runs tools on this machine. Every call is validated against the tool's schema \
                 and passes dsh's gates and guards; failures come back as results with isError and \
                 a stable code (e.g. INVALID_ARGUMENTS, DENIED, TIMEOUT).",
        )
    }

    /// Both eras, on stdio and HTTP: 2026-07-28's stateless requests beside the 2025
    /// handshake. Over stdio the connection is the owner whatever the version; over HTTP
    /// a 2025 session is one, and a 2026 request's owner is its token's principal.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[
            ProtocolVersion::V_2026_07_28,
            ProtocolVersion::V_2025_11_25,
            ProtocolVersion::V_2025_06_18,
            ProtocolVersion::V_2025_03_26,
            ProtocolVersion::V_2024_11_05,
        ])
    }

    /// `initialize`: rmcp's negotiation; an HTTP session's connection also books its
    /// session (and one restored after an upgrade takes back the owner it had).
    async fn initialize(
        &self,
        request: rmcp::model::InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::InitializeResult, ErrorData> {
        if let Some(http) = &self.http {
            let book = &http.book;
            // A 2025 session: an owner of its own, not its token's principal's.
            *self.owner.write().unwrap_or_else(|e| e.into_inner()) = http.session_owner.clone();
            drop(http.principal_hold.lock().unwrap().take());
            let restored = context
                .extensions
                .get::<rmcp::transport::streamable_http_server::SessionRestoreMarker>()
                .and_then(|marker| book.restored_owner(marker.id.as_ref()));
            if let Some(owner) = restored {
                tracing::info!(owner = %owner, "HTTP session taken back after an upgrade");
                *self.owner.write().unwrap_or_else(|e| e.into_inner()) = owner;
            }
            if let Some(http::book::SessionIdOf(id)) = context.extensions.get() {
                let _ = http.session_id.set(id.clone());
                let before = book.opened(
                    http::book::HttpSessionHandover {
                        id: id.clone(),
                        scope: self.server.scope.to_string(),
                        owner: self.owner().to_string(),
                        initialize: serde_json::to_value(&request).unwrap_or_default(),
                        log_level: None,
                        subscriptions: Vec::new(),
                        principal: Some(http.principal.to_string()),
                    },
                    http::book::ConnectionState {
                        log_threshold: self.log_threshold.clone(),
                        subscriptions: self.subscriptions.clone(),
                    },
                );
                // Taken back after an upgrade: its log level and subscriptions too.
                if let Some(before) = before {
                    self.take_back(before.log_level, before.subscriptions);
                }
            }
        }
        context.peer.set_peer_info(request.clone());
        *self.resource_watch.lock().unwrap() = Some(self.watch_resources());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self.resumed {
            // The new binary reloaded the plugins: the client lists the tools again.
            let (host, peer) = (self.server.host.clone(), context.peer.clone());
            tokio::spawn(async move {
                host.loaded().await;
                let _ = peer.notify_tool_list_changed().await;
            });
        }
        let owner_changes = self
            .resource_watch
            .lock()
            .unwrap()
            .take()
            .unwrap_or_else(|| self.watch_resources());
        tokio::spawn(resources::forward_changes(
            self.server.host.clone(),
            self.owner(),
            owner_changes,
            context.peer.clone(),
            self.subscriptions.clone(),
            true,
            self.closed.clone(),
        ));
        let mut changes = self.server.host.registry.subscribe();
        let (peer, closed, owner) = (context.peer, self.closed.clone(), self.owner());
        let host = self.server.host.clone();
        let shown_partial = self.shown_partial.clone();
        tokio::spawn(async move {
            // While the plugin set still loads, its registrations are not news: the
            // client's first tools/list waits for the embedded set (and a while for the
            // rest), and a client shown less hears once, when the rest has come too.
            if !host.is_loaded() {
                tokio::select! {
                    _ = closed.cancelled() => return,
                    _ = host.loaded() => {}
                }
                changes = changes.resubscribe();
                if shown_partial.load(std::sync::atomic::Ordering::Acquire)
                    && peer.notify_tool_list_changed().await.is_err()
                {
                    return;
                }
            }
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
        // Never without the embedded set; the plugin directory's plugins are waited for a
        // while, and one still loading then comes with tools/list_changed.
        let host = &self.server.host;
        host.ready().await;
        let _ = tokio::time::timeout(DIRECTORY_PLUGINS_WAIT, host.loaded()).await;
        if !host.is_loaded() {
            self.shown_partial
                .store(true, std::sync::atomic::Ordering::Release);
        }
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
                let output = spec.output_schema;
                let tool = Tool::new(spec.name, spec.description, Arc::new(schema));
                match output {
                    Some(serde_json::Value::Object(output)) => {
                        tool.with_raw_output_schema(Arc::new(output))
                    }
                    _ => tool,
                }
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// `resources/list`: this connection's terminal screens and job outputs.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(resources::list(&self.server.host, &self.owner()))
    }

    /// `resources/templates/list`: `terminal://{id}/screen` and `job://{id}/output`.
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(resources::templates(&self.server.host))
    }

    /// `resources/read`: one of this connection's resources as it is now.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(&self.server.host, &self.owner(), &request.uri)
            .await
            .map(Into::into)
    }

    /// `resources/subscribe`: this connection hears `resources/updated` when the
    /// resource changes.
    #[allow(deprecated)] // legacy-only from protocol 2026-07-28, which dsh does not speak
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        resources::subscribe(
            &self.server.host,
            &self.owner(),
            &self.subscriptions,
            &request.uri,
        )
    }

    /// `subscriptions/listen` (2026-07-28): the tool and resource list changes, and
    /// updates of the owner's resources named; the owner's changes are watched from here
    /// on, before the acknowledgment is sent.
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        *self.resource_watch.lock().unwrap() = Some(self.watch_resources());
        Some(resources::accepted_filter(
            &self.server.host,
            &self.owner(),
            requested,
        ))
    }

    /// One `subscriptions/listen` request, until the client cancels it (or the
    /// connection ends).
    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        let accepted = context.accepted().clone();
        let changes = self
            .resource_watch
            .lock()
            .unwrap()
            .take()
            .unwrap_or_else(|| self.watch_resources());
        let uris = accepted.resource_subscriptions.clone().unwrap_or_default();
        let subscriptions: resources::Subscriptions =
            Arc::new(std::sync::Mutex::new(uris.into_iter().collect()));
        let done = self.closed.child_token();
        let resources = resources::forward_changes(
            self.server.host.clone(),
            self.owner(),
            changes,
            context.sink().clone(),
            subscriptions,
            accepted.resources_list_changed == Some(true),
            done.clone(),
        );
        let mut registry = self.server.host.registry.subscribe();
        let sink = context.sink().clone();
        let tools = async move {
            if accepted.tools_list_changed != Some(true) {
                return std::future::pending().await;
            }
            loop {
                match registry.recv().await {
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    _ if sink.notify_tool_list_changed().await.is_err() => return,
                    _ => {}
                }
            }
        };
        tokio::select! {
            _ = context.cancelled() => {}
            _ = resources => {}
            _ = tools => {}
            _ = done.cancelled() => {}
        }
        done.cancel();
        Ok(())
    }

    /// `tasks/get` (2026-07-28's Tasks extension): the state of one of the owner's jobs.
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        tasks::get(&self.server.host, &self.owner(), &request.task_id).await
    }

    /// `tasks/cancel`: kills one of the owner's jobs, its process tree with it.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        tasks::cancel(&self.server.host, &self.owner(), &request.task_id).await
    }

    /// `resources/unsubscribe`.
    #[allow(deprecated)] // as `subscribe`
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        resources::unsubscribe(&self.subscriptions, &request.uri);
        Ok(())
    }

    /// `completion/complete`: the resource templates' `id`, from this connection's ids.
    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, ErrorData> {
        resources::complete(&self.server.host, &self.owner(), &request)
    }

    /// `logging/setLevel`: from now on, this connection's calls send plugin log lines at
    /// `level` and above as `notifications/message`.
    #[allow(deprecated)] // see `logging`
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = logging::host_level(request.level);
        tracing::debug!(owner = %self.owner(), ?level, "logging/setLevel");
        self.log_threshold.set(Some(level));
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.tool_ready(&request.name).await;
        let modern = context
            .meta
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        if modern {
            return self.call_tool_by_round_trips(request, context).await;
        }
        let request_name = request.name.to_string();
        let approval_timeout =
            Duration::from_millis(self.server.host.config.serve.approval_timeout_ms);
        let (notices, mut notes) = Notices::channel(self.log_threshold.clone());
        let call = CallRequest {
            tool: request.name.to_string(),
            args: request
                .arguments
                .map(serde_json::Value::Object)
                .unwrap_or_else(|| json!({})),
            owner: self.owner(),
            scope: self.server.scope.clone(),
            approver: Some(Arc::new(ElicitationApprover {
                peer: context.peer.clone(),
                timeout: approval_timeout,
            })),
            notices,
            sampler: Some(Arc::new(sampling::McpSampler::new(
                context.peer.clone(),
                context.id.clone(),
                approval_timeout,
            ))),
            step: None,
            trace_parent: trace_parent(&context),
        };
        // Cancelled by `notifications/cancelled` for this request, when the connection's
        // input ends, or when an upgrade's drain runs out of time.
        let cancel = self.closed.child_token();
        let (_counted, drained) = self.calls.enter();
        let running = self.server.host.pipeline.call(call, &cancel);
        tokio::pin!(running);
        let progress_token = context.meta.get_progress_token();
        let interval =
            Duration::from_millis(self.server.host.config.serve.progress_interval_ms.max(10));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let started = Instant::now();
        let mut track = ProgressTrack::default();
        let result = loop {
            tokio::select! {
                biased;
                Some(notice) = notes.recv() => {
                    forward(&context.peer, &context.id, progress_token.as_ref(), &mut track, notice).await;
                }
                result = &mut running => break result,
                _ = context.ct.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                _ = drained.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                _ = ticks.tick(), if progress_token.is_some() && !track.reported => {
                    let seconds = started.elapsed().as_secs_f64();
                    let token = progress_token.clone().expect("guarded by the branch condition");
                    if let Some(value) = track.host_guess(seconds) {
                        let progress = ProgressNotificationParam::new(token, value)
                            .with_message(format!("running for {seconds:.1} s"));
                        let _ = context.peer.notify_progress(progress).await;
                    }
                }
            }
        };
        // What the plugins said before the call ended goes before its result.
        while let Ok(notice) = notes.try_recv() {
            forward(
                &context.peer,
                &context.id,
                progress_token.as_ref(),
                &mut track,
                notice,
            )
            .await;
        }
        self.finish(&request_name, result)
    }
}

impl McpConnection {
    /// Returns once the tool `name` can be called: every call passes the pipeline's guards
    /// and filters, so they are loaded first; a call of a tool not there yet waits for it to
    /// come, or for the plugin set to finish loading without it (only it waits: its plugin
    /// may be one still loading).
    async fn tool_ready(&self, name: &str) {
        let host = &self.server.host;
        host.ready().await;
        let mut changes = host.registry.subscribe();
        while !host.is_loaded() {
            let known = host
                .registry
                .scope(&self.server.scope)
                .is_ok_and(|scope| host.registry.snapshot().resolve(name, &scope).is_ok());
            if known {
                break;
            }
            tokio::select! {
                _ = changes.recv() => {}
                _ = host.loaded() => {}
            }
        }
    }

    /// A finished call as MCP answers it: an unknown tool is a protocol error (the spec's
    /// rule), anything else a tool result.
    fn finish(&self, name: &str, result: CallResult) -> Result<CallToolResponse, ErrorData> {
        let host = &self.server.host;
        match &result.error {
            Some(error) if error.code == ErrorCode::UnknownTool => Err(ErrorData::invalid_params(
                error.message.clone(),
                Some(json!({ "code": error.code })),
            )),
            _ => {
                let has_schema = host.registry.scope(&self.server.scope).is_ok_and(|scope| {
                    host.registry
                        .snapshot()
                        .resolve(name, &scope)
                        .is_ok_and(|tool| tool.output_schema().is_some())
                });
                Ok(to_mcp_result(result, has_schema).into())
            }
        }
    }

    /// A `tools/call` of the 2026-07-28 revision ([`round_trip`]): a first request starts
    /// the call in a task of its own; a question for the client (a guard's ask, a plugin's
    /// sampling or form, a subagent's model) answers `input_required` with it and a sealed
    /// `requestState`; the retry carrying the answer resumes the call.
    async fn call_tool_by_round_trips(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request
            .arguments
            .map(serde_json::Value::Object)
            .unwrap_or_else(|| json!({}));
        // What a round trip's state is bound to: made only when the call asks, or resumes.
        let bound_args = args.clone();
        let args_text = || bound_args.to_string();
        let owner = self.owner();
        let refused =
            |error: round_trip::StateError| ErrorData::invalid_params(error.to_string(), None);
        let capabilities = context.meta.client_capabilities();
        // A client that speaks tasks gets a call still running after `task_after_ms` as one.
        let speaks_tasks = capabilities.as_ref().is_some_and(|c| c.supports_tasks());
        let mut running = match &request.request_state {
            Some(state) => {
                let answer =
                    round_trip::answer_of(request.input_responses.as_ref()).map_err(refused)?;
                let resumed = self
                    .server
                    .round_trips
                    .resume(state, &owner, &name, &args_text(), answer)
                    .map_err(refused)?;
                match resumed {
                    round_trip::Resumed::Waiting(running) => running,
                    round_trip::Resumed::Again(answers) => {
                        let declared = round_trip::Declared::of(capabilities.as_ref());
                        self.start_running(name.clone(), args, declared, &context, answers)
                    }
                }
            }
            None => {
                let declared = round_trip::Declared::of(capabilities.as_ref());
                self.start_running(name.clone(), args, declared, &context, Vec::new())
            }
        };
        let progress_token = context.meta.get_progress_token();
        let mut track = ProgressTrack::default();
        let task_after = Duration::from_millis(self.server.host.config.serve.task_after_ms);
        let mut task_timer = std::pin::pin!(tokio::time::sleep(task_after));
        let mut timer_due = speaks_tasks;
        loop {
            let event = tokio::select! {
                biased;
                event = running.events.recv() => event,
                _ = &mut task_timer, if timer_due => {
                    timer_due = false;
                    let mut slot = Some(running);
                    let task = tasks::adopt(&self.server.host, &owner, &name, &args_text(), &mut slot);
                    match (task, slot) {
                        (Some(task), _) => return Ok(CallToolResponse::Task(task)),
                        (None, Some(back)) => running = back,
                        (None, None) => {
                            return Err(ErrorData::internal_error("the call was lost", None))
                        }
                    }
                    continue;
                }
                result = async { running.driver.as_mut().expect("checked").call.as_mut().await },
                    if running.driver.is_some() => {
                    running.driver = None;
                    Some(round_trip::CallEvent::Done(result))
                }
                _ = context.ct.cancelled() => {
                    running.cancel.cancel();
                    running.detach();
                    running.events.recv().await
                }
            };
            match event {
                Some(round_trip::CallEvent::Notice(notice)) => {
                    forward(
                        &context.peer,
                        &context.id,
                        progress_token.as_ref(),
                        &mut track,
                        notice,
                    )
                    .await;
                }
                Some(round_trip::CallEvent::Ask {
                    question,
                    answer,
                    before_running,
                }) => {
                    running.detach();
                    let state = self.server.round_trips.park(
                        &owner,
                        &name,
                        &args_text(),
                        running,
                        answer,
                        before_running,
                    );
                    let asks = rmcp::model::InputRequests::from([(
                        round_trip::INPUT.to_string(),
                        question,
                    )]);
                    return Ok(
                        rmcp::model::InputRequiredResult::new(Some(asks), Some(state)).into(),
                    );
                }
                Some(round_trip::CallEvent::Done(result)) => {
                    // Notices the call sent just before it ended come first.
                    while let Ok(round_trip::CallEvent::Notice(notice)) = running.events.try_recv()
                    {
                        forward(
                            &context.peer,
                            &context.id,
                            progress_token.as_ref(),
                            &mut track,
                            notice,
                        )
                        .await;
                    }
                    let response = self.finish(&name, result)?;
                    // A job started for a client that speaks tasks is answered as its task.
                    if let (true, CallToolResponse::Complete(result)) = (speaks_tasks, &response) {
                        if let Some(task) = tasks::started(&self.server.host, &owner, result) {
                            return Ok(CallToolResponse::Task(task));
                        }
                    }
                    return Ok(response);
                }
                None => {
                    return Err(ErrorData::internal_error(
                        "the call's task ended without a result",
                        None,
                    ))
                }
            }
        }
    }

    /// Starts a call, reporting on the events of [`round_trip::Running`]: driven by the
    /// request serving it until it asks the client something, then in a task of its own.
    /// Starts a 2026-07-28 call, its guards' questions answered by `answers` where one
    /// is there for the guard (a call run again after `dsh upgrade`), else asked.
    fn start_running(
        &self,
        tool: String,
        args: serde_json::Value,
        declared: round_trip::Declared,
        context: &RequestContext<RoleServer>,
        answers: Vec<round_trip::GuardAnswer>,
    ) -> round_trip::Running {
        let (events, received) = tokio::sync::mpsc::unbounded_channel();
        let events_for_result = events.clone();
        // 2026-07-28 has no `logging/setLevel`: a request opts in to log lines with
        // `io.modelcontextprotocol/logLevel` in its `_meta`, for itself alone.
        let threshold = match context.meta.log_level() {
            Some(level) => {
                let threshold = Arc::new(LogThreshold::default());
                threshold.set(Some(logging::host_level(level)));
                threshold
            }
            None => self.log_threshold.clone(),
        };
        let (notices, mut notes) = Notices::channel(threshold);
        let config = &self.server.host.config;
        let sampler = round_trip::RoundTripSampler {
            events: events.clone(),
            declared,
            ask_wait: Duration::from_millis(config.serve.approval_timeout_ms),
            asked: Arc::new(round_trip::Asked {
                preset: std::sync::Mutex::new(answers),
                ..Default::default()
            }),
        };
        let call = CallRequest {
            tool,
            args,
            owner: self.owner(),
            scope: self.server.scope.clone(),
            approver: crate::call::Sampler::approver(&sampler),
            notices,
            sampler: Some(Arc::new(sampler)),
            step: None,
            trace_parent: trace_parent(context),
        };
        // Cancelled by the client (its request's cancellation), when the connection ends,
        // or when an upgrade's drain runs out of time. A principal's request (HTTP) is a
        // connection of its own that ends with its answer: the call goes on, holding the
        // principal, until it ends or nobody retries it.
        let principal = self
            .http
            .as_ref()
            .and_then(|http| http.principal_hold.lock().unwrap().clone());
        let cancel = match principal {
            Some(_) => CancellationToken::new(),
            None => self.closed.child_token(),
        };
        let (counted, drained) = self.calls.enter();
        let host = self.server.host.clone();
        let stop = cancel.clone();
        let driver = Box::pin(async move {
            let _counted = counted;
            let _principal = principal;
            let running = host.pipeline.call(call, &stop);
            tokio::pin!(running);
            let result = loop {
                tokio::select! {
                    biased;
                    Some(notice) = notes.recv() => {
                        let _ = events.send(round_trip::CallEvent::Notice(notice));
                    }
                    result = &mut running => break result,
                    _ = drained.cancelled(), if !stop.is_cancelled() => stop.cancel(),
                }
            };
            while let Ok(notice) = notes.try_recv() {
                let _ = events.send(round_trip::CallEvent::Notice(notice));
            }
            result
        });
        round_trip::Running {
            events: received,
            cancel,
            driver: Some(round_trip::Driver {
                call: driver,
                events: events_for_result,
            }),
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

/// What an upgrade checks while the server still serves: nothing live that is not handed
/// over, the binary, and the new binary's own check of the configuration and of the
/// plugins serving now (its slow part: it loads them). Returns the binary.
pub(crate) async fn precheck_upgrade(
    server: &Arc<McpServer>,
    ask: &crate::upgrade::UpgradeAsk,
) -> Result<std::path::PathBuf, String> {
    let host = &server.host;
    crate::upgrade::unblocked(host)?;
    let binary =
        crate::upgrade::binary_to_execute(ask.binary.as_deref()).map_err(|e| e.to_string())?;
    let limit = Duration::from_millis(host.config.serve.upgrade_check_ms);
    let serving = crate::upgrade::serving_plugins(host);
    crate::upgrade::check_plugins(&binary, &serving, limit)
        .await
        .map_err(|e| e.to_string())?;
    Ok(binary)
}

/// What every upgrade does before its `exec`, once requests wait: refuses while
/// something not handed over is live (again: a call may have started one), drains the
/// calls in flight (`[serve] upgrade_drain_ms`, then cancels them), writes the snapshot
/// with the transport's part (`connection`, asked once the calls are drained) and the
/// calls parked between two requests of MCP 2026-07-28, and has the new binary read it. On `Err`, the host is as it was and the reason goes to the
/// asker.
pub(crate) async fn prepare_handover(
    server: &Arc<McpServer>,
    binary: std::path::PathBuf,
    calls: &CallsInFlight,
    connection: impl FnOnce() -> Result<crate::upgrade::TransportEntry, crate::upgrade::UpgradeError>,
) -> Result<crate::upgrade::Prepared, String> {
    let host = &server.host;
    let drain = Duration::from_millis(host.config.serve.upgrade_drain_ms);
    let paused_at = std::time::SystemTime::now();
    let draining = Instant::now();
    // Calls waiting at a guard's question go to the next binary (their retries run them
    // there), so the drain does not wait for retries that cannot come while it runs.
    let round_trips = server.round_trips.hand_over();
    let take_back = |round_trips| server.round_trips.adopt(round_trips);
    let cancelled = calls.drain(drain).await;
    let drained = draining.elapsed();
    if let Err(why) = crate::upgrade::unblocked(host) {
        take_back(round_trips);
        return Err(why);
    }
    if cancelled > 0 {
        tracing::warn!(
            cancelled,
            "calls still running at the upgrade's drain deadline were cancelled"
        );
    }
    let parked = round_trip::HandedRoundTrips(round_trips.clone());
    let transports = connection().and_then(|connection| {
        Ok(vec![
            connection,
            crate::upgrade::TransportEntry::of(&parked)?,
        ])
    });
    let snapshot = match transports {
        Ok(transports) => {
            crate::upgrade::Snapshot::take(host, transports, paused_at, drained).await
        }
        Err(error) => Err(error),
    };
    let limit = Duration::from_millis(host.config.serve.upgrade_check_ms);
    crate::upgrade::prepare(host, snapshot, binary, limit)
        .await
        .inspect_err(|_| take_back(round_trips))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Binary, EmbeddedResource, ResourceLink};

    #[test]
    fn the_transports_read_their_entries_of_a_snapshot_and_name_a_bad_one() {
        let text = include_str!("../../../tests/fixtures/upgrade-snapshot-v1.json");
        let snapshot = crate::upgrade::Snapshot::read(text.as_bytes(), "test").unwrap();
        let handed = handed_transports(&snapshot).unwrap();
        let stdio = handed.stdio.expect("the fixture served stdio");
        assert!(stdio.initialize.is_some());
        assert!(handed.http.is_none() && handed.round_trips.0.is_empty());
        // Written back through the one interface, the entry says the same (and the
        // fields this fixture predates at their defaults).
        let written = entry_value(crate::upgrade::TransportEntry::of(&stdio).unwrap());
        for field in ["initialize", "log_level", "pending_input"] {
            assert_eq!(written[field], snapshot.entries["stdio"][field], "{field}");
        }
        assert_eq!(written["subscriptions"], json!([]));

        let mut broken = snapshot.clone();
        broken
            .entries
            .insert("http".into(), json!({"listener": "not a number"}));
        let why = handed_transports(&broken).err().unwrap();
        assert!(why.starts_with("its `http`"), "{why}");
    }

    fn entry_value(entry: crate::upgrade::TransportEntry) -> serde_json::Value {
        let mut entries = crate::services::handover::Handed::new();
        entry.insert_into(&mut entries);
        entries.remove("stdio").unwrap()
    }

    #[test]
    fn progress_values_always_increase_and_a_report_ends_the_hosts_guesses() {
        let mut track = ProgressTrack::default();
        assert_eq!(track.host_guess(0.25), Some(0.25));
        assert_eq!(track.host_guess(0.5), Some(0.5));
        assert_eq!(track.plugin(Some(0.5)), (50.0, Some(100.0)));
        assert_eq!(
            track.host_guess(60.0),
            None,
            "the plugin's reports replace the guess"
        );
        let (value, total) = track.plugin(Some(0.25));
        assert!(
            value > 50.0 && value < 50.01,
            "a smaller fraction still increases: {value}"
        );
        assert_eq!(total, Some(100.0));
        let (value, total) = track.plugin(None);
        assert!(value > 50.0, "{value}");
        assert_eq!(total, None, "no fraction: no total");
        let mut late = ProgressTrack::default();
        late.host_guess(80.0);
        assert!(
            late.plugin(Some(0.1)).0 > 80.0,
            "never below a guess already sent"
        );
    }

    #[test]
    fn content_items_become_mcp_content_blocks_and_structured_content() {
        let mut result = CallResult::ok("words");
        result.content.extend([
            ContentItem::Image(Binary {
                data: b"png".to_vec(),
                mime_type: "image/png".into(),
            }),
            ContentItem::ResourceLink(ResourceLink {
                uri: "file:///x".into(),
                name: "x".into(),
                description: None,
                mime_type: Some("text/plain".into()),
            }),
            ContentItem::Resource(EmbeddedResource {
                uri: "file:///b".into(),
                mime_type: None,
                contents: ResourceContents::Blob(vec![0, 1, 2]),
            }),
        ]);
        result.structured = Some(json!({"n": 1}));
        let mcp = serde_json::to_value(to_mcp_result(result, false)).unwrap();
        assert_eq!(mcp["content"][0], json!({"type": "text", "text": "words"}));
        assert_eq!(
            mcp["content"][1],
            json!({"type": "image", "data": "cG5n", "mimeType": "image/png"})
        );
        assert_eq!(mcp["content"][2]["type"], "resource_link");
        assert_eq!(mcp["content"][2]["mimeType"], "text/plain");
        assert_eq!(mcp["content"][3]["resource"]["blob"], "AAEC");
        assert_eq!(mcp["structuredContent"], json!({"n": 1}));
        assert_eq!(mcp["isError"], false);
    }

    #[test]
    fn an_error_has_structured_content_unless_the_tool_declares_an_output_schema() {
        let failed = || CallResult::failed(crate::error::ToolError::new(ErrorCode::Denied, "no"));
        let plain = serde_json::to_value(to_mcp_result(failed(), false)).unwrap();
        assert_eq!(
            plain["structuredContent"],
            json!({"code": "DENIED", "message": "no"})
        );
        let schema = serde_json::to_value(to_mcp_result(failed(), true)).unwrap();
        assert_eq!(schema["isError"], true);
        assert!(schema.get("structuredContent").is_none(), "{schema}");
        assert!(schema["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("DENIED: no"));
    }
}
