//! MCP over streamable HTTP, both eras, behind bearer tokens. A 2025 client opens an MCP
//! session, its own owner (`http-1`, `http-2`, …); a 2026-07-28 request has no session and
//! is owned by its token's principal (`@name`: a scope's own token is the principal named
//! after the scope, `[serve] http_principals` names more), held while the request is served
//! and released after `http_session_idle_ms` plus `owner_grace_ms` without one.
//!
//! Every request passes, in order: the `Origin` check (403, see [`origin`]), the bearer
//! token (`Authorization: Bearer TOKEN`, the scheme in any case; 401), which names the
//! scope the request is served in (its own MCP service; a session opened with one scope's
//! token does not exist for another's, see [`sessions`]) and the principal, the body
//! read, whole, within `http_body_timeout_ms` (408) and `max_request_bytes` (413), and
//! the session cap for an `initialize`, the one request that opens a session (503). Connections are bounded
//! in [`connections`], sessions and their idleness in [`sessions`].
//!
//! The same listener serves the host's Prometheus metrics at [`METRICS_PATH`], behind
//! the `Origin` check and a bearer token of its own: the metrics token opens only
//! `/metrics`, and no MCP token opens it (401 either way).

pub mod book;
pub mod connections;
pub mod sessions;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use serde::{Deserialize, Serialize};

use self::book::HttpSessionHandover;
use self::connections::ConnectionLimits;
use self::sessions::{ScopedSessions, Sessions};
use super::{McpConnection, McpServer, ServeError};
use crate::config::origin::OriginPolicy;
use crate::metrics::{Metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
use crate::upgrade::TransportHandover;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The path the Prometheus metrics are served at.
pub const METRICS_PATH: &str = "/metrics";

/// The header naming a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// One bearer token served over HTTP: the scope's server it reaches, and the principal
/// it is (a scope's own token is the principal named after the scope; `[serve]
/// http_principals` adds named ones). Several tokens may reach one scope.
pub struct ServedScope {
    pub server: Arc<McpServer>,
    pub token: String,
    pub principal: String,
}

/// What an HTTP request's connection holds of its transport (a stdio connection has
/// none): the session it opens, if it is a 2025 one, and the principal it came as.
#[derive(Debug)]
pub(super) struct HttpPart {
    /// The book of sessions, and this session's id once its `initialize` is answered.
    pub book: Arc<book::SessionBook>,
    pub session_id: std::sync::OnceLock<String>,
    /// The owner a 2025 session gets (`http-N`) when its `initialize` comes; until then
    /// (and for good under 2026-07-28, which has no sessions) the owner is the request's
    /// principal.
    pub session_owner: Arc<str>,
    /// The principal whose token the request (or the session) came with.
    pub principal: Arc<str>,
    /// The principal held while this request is served (MCP 2026-07-28: a connection is
    /// one request): its grace period starts after its last request.
    pub principal_hold: std::sync::Mutex<Option<crate::services::OwnerHold>>,
}

/// The owner a principal's requests have under MCP 2026-07-28 (`@name`: no session's
/// owner, `http-N`, can be one).
pub fn principal_owner(principal: &str) -> Arc<str> {
    Arc::from(format!("@{principal}"))
}

/// The scope a request was admitted to and its principal's owner, as its token named them.
#[derive(Clone)]
struct AdmittedScope(Arc<str>, Arc<str>);

tokio::task_local! {
    /// The owner of the principal whose request is being served: the MCP service's
    /// factory, called within the request, gives it to the connection it makes, and a
    /// session is bound to the principal that opened it ([`sessions`], [`book`]).
    static REQUEST_PRINCIPAL: Arc<str>;
}

/// The principal of the request being served, if this runs within one.
fn request_principal() -> Option<Arc<str>> {
    REQUEST_PRINCIPAL.try_with(Arc::clone).ok()
}

/// Each served scope's MCP service.
type ScopeServices = HashMap<Arc<str>, StreamableHttpService<McpConnection, ScopedSessions>>;

/// What an HTTP server resumes after an upgrade: the sessions handed over and the next
/// owner's number.
#[derive(Debug, Default)]
pub struct HttpResume {
    pub sessions: Vec<HttpSessionHandover>,
    pub next_owner: u64,
}

/// Serves MCP on `listener` until `shutdown` is cancelled, each scope in `scopes` to the
/// clients presenting its token (tokens differ; the first scope's server gives the
/// settings), and the host's metrics to those presenting `metrics_token` (which differs
/// from every scope's).
///
/// `upgrades` brings requests to upgrade the host ([`crate::upgrade`]): no connection is
/// accepted any more (the listener stays open: new ones wait in its queue for the next
/// binary), open connections finish the requests they serve and close, the calls in
/// flight are drained, and the sessions are handed over with the listener and the
/// tokens; clients come back on new connections with their session ids. An upgrade that
/// does not happen goes back to accepting. `resume` holds what the binary before handed
/// over.
#[allow(clippy::too_many_arguments)] // the server's parts, each from its own owner
pub async fn serve_http(
    scopes: Vec<ServedScope>,
    metrics_token: String,
    console: Option<Arc<crate::console::Console>>,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
    mut upgrades: Option<tokio::sync::mpsc::Receiver<crate::upgrade::UpgradeAsk>>,
    resume: HttpResume,
) -> Result<(), ServeError> {
    let Some(first) = scopes.first() else {
        return Ok(());
    };
    let host_server = first.server.clone();
    let serve = first.server.host.config.serve.clone();
    let metrics = first.server.host.metrics().clone();
    let sessions = Arc::new(Sessions::new(
        serve.http.max_sessions,
        Duration::from_millis(serve.http.session_idle_ms),
    ));
    let limits = ConnectionLimits {
        max: connections::effective_max_connections(serve.http.max_connections),
        header_timeout: Duration::from_millis(serve.http.header_timeout_ms),
    };
    if limits.max < serve.http.max_connections {
        tracing::info!(
            configured = serve.http.max_connections,
            max = limits.max,
            "http_max_connections lowered to half the file descriptor limit"
        );
    }
    let book = Arc::new(book::SessionBook::default());
    expire_handed_sessions(&host_server, &book, resume.sessions);
    let calls = Arc::new(super::CallsInFlight::default());
    let kept = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Owners are numbered across scopes: `http-N` names one client whatever its scope.
    let opened = Arc::new(AtomicU64::new(resume.next_owner));
    let tokens_served: Vec<(String, String)> = scopes
        .iter()
        // Named principals are read from the configuration again by the next binary.
        .filter(|s| s.principal == *s.server.scope)
        .map(|s| (s.server.scope.to_string(), s.token.clone()))
        .collect();
    let reaper = tokio::spawn(sessions.clone().reap_until(shutdown.clone()));
    let mut listener = listener;
    loop {
        // The MCP services live until shutdown or an upgrade hands their sessions over.
        let sessions_end = shutdown.child_token();
        let mut config = StreamableHttpServerConfig::default();
        config.max_request_body_bytes = serve.http.max_request_bytes;
        config.cancellation_token = sessions_end.clone();
        let mut services = ScopeServices::new();
        let mut tokens = Vec::new();
        for served in &scopes {
            let (opened, scope, server) = (
                opened.clone(),
                served.server.scope.clone(),
                served.server.clone(),
            );
            tokens.push((
                Arc::<str>::from(served.token.as_str()),
                scope.clone(),
                principal_owner(&served.principal),
            ));
            if services.contains_key(&scope) {
                continue;
            }
            let (calls, kept, owners) = (calls.clone(), kept.clone(), book.clone());
            let mut config = config.clone();
            config.session_store = Some(Arc::new(book.store(scope.clone())));
            let service = StreamableHttpService::new(
                move || {
                    let principal = REQUEST_PRINCIPAL.try_with(Arc::clone).map_err(|_| {
                        std::io::Error::other("an MCP service made outside an admitted request")
                    })?;
                    let n = opened.fetch_add(1, Ordering::Relaxed) + 1;
                    Ok(McpConnection::for_http(
                        server.clone(),
                        format!("http-{n}"),
                        principal,
                        calls.clone(),
                        kept.clone(),
                        owners.clone(),
                    ))
                },
                Arc::new(sessions.scoped(scope.clone())),
                config,
            );
            services.insert(scope.clone(), service);
        }
        let admission = Arc::new(Admission {
            tokens,
            metrics_token: metrics_token.as_str().into(),
            metrics: metrics.clone(),
            origins: OriginPolicy::new(&serve.http.allowed_origins),
            sessions: sessions.clone(),
            max_body_bytes: serve.http.max_request_bytes,
            body_timeout: Duration::from_millis(serve.http.body_timeout_ms),
        });
        let mut router = axum::Router::new()
            .route(MCP_PATH, axum::routing::any(serve_in_scope))
            .with_state(Arc::new(services))
            .layer(axum::middleware::from_fn_with_state(admission, admit));
        if let Some(console) = &console {
            router = router.merge(console.router());
        }
        let stop = CancellationToken::new();
        let serving = connections::serve(listener, router, limits, shutdown.clone(), stop.clone());
        tokio::pin!(serving);
        // Checked while serving: the new binary loads the plugins meanwhile.
        let checked = loop {
            let asked = crate::upgrade::next_ask(upgrades.as_mut());
            let ask = tokio::select! {
                _ = &mut serving => break None,
                Some(ask) = asked => ask,
            };
            match super::precheck_upgrade(&host_server, &ask).await {
                Ok(binary) => break Some((ask, binary)),
                Err(why) => {
                    let _ = ask.reply.send(Err(why));
                }
            }
        };
        let Some((ask, binary)) = checked else {
            break;
        };
        stop.cancel();
        let connections::Served::Stopped {
            listener: back,
            connections: mut open,
        } = serving.await
        else {
            break;
        };
        listener = back;
        let listener_fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
        let handover = || {
            let handed = HttpHandover {
                listener: listener_fd,
                tokens: tokens_served.clone(),
                metrics_token: metrics_token.clone(),
                sessions: book.live(),
                next_owner: opened.load(Ordering::Relaxed),
            };
            crate::upgrade::TransportEntry::of(&handed)
        };
        let prepared = super::prepare_handover(&host_server, binary, &calls, handover).await;
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(why) => {
                let _ = ask.reply.send(Err(why));
                // Back to accepting; the connections that were closing finish meanwhile.
                tokio::spawn(async move { while open.join_next().await.is_some() {} });
                continue;
            }
        };
        // The sessions go to the next binary: their owners' resources stay; their
        // response streams end and their connections close once written.
        kept.store(true, Ordering::Release);
        let handed_sessions = book.live();
        prepared.announce(ask).await;
        sessions_end.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while open.join_next().await.is_some() {}
        })
        .await;
        // Back here only if the exec failed: the sessions are taken back as their
        // clients return.
        prepared.exec(&host_server.host).await;
        kept.store(false, Ordering::Release);
        book.hand_in(handed_sessions);
    }
    reaper.abort();
    Ok(())
}

/// Sessions handed over by the binary before are restorable for as long as an idle
/// session lives (`[serve] http_session_idle_ms`); one its client did not bring back by
/// then is forgotten and its owner released after the grace period.
fn expire_handed_sessions(
    server: &Arc<McpServer>,
    book: &Arc<book::SessionBook>,
    sessions: Vec<HttpSessionHandover>,
) {
    if sessions.is_empty() {
        return;
    }
    let ids: Vec<String> = sessions.iter().map(|s| s.id.clone()).collect();
    book.hand_in(sessions);
    let (book, host) = (book.clone(), server.host.clone());
    let idle = Duration::from_millis(host.config.serve.http.session_idle_ms);
    let grace = Duration::from_millis(host.config.serve.owner_grace_ms);
    tokio::spawn(async move {
        tokio::time::sleep(idle).await;
        for id in ids {
            if let Some(owner) = book.expire(&id) {
                tracing::info!(session = %id, owner = %owner, "a handed-over HTTP session was not taken back; its owner is released");
                host.services.release_owner_after(owner, grace);
            }
        }
    });
}

/// Hands an admitted request to its scope's MCP service.
async fn serve_in_scope(
    State(services): State<Arc<ScopeServices>>,
    Extension(AdmittedScope(scope, principal)): Extension<AdmittedScope>,
    request: Request,
) -> Response {
    match services.get(&scope) {
        Some(service) => REQUEST_PRINCIPAL
            .scope(principal, service.handle(request))
            .await
            .into_response(),
        None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// What a request must pass before it reaches MCP.
struct Admission {
    /// Each token, the scope it reaches and its principal's owner.
    tokens: Vec<(Arc<str>, Arc<str>, Arc<str>)>,
    /// The token that opens [`METRICS_PATH`], and only it.
    metrics_token: Arc<str>,
    metrics: Arc<Metrics>,
    origins: OriginPolicy,
    sessions: Arc<Sessions>,
    max_body_bytes: usize,
    body_timeout: Duration,
}

/// Checks a request (origin, token, session cap) and reads its body, or answers it.
async fn admit(State(admission): State<Arc<Admission>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let origin = headers
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if !admission.origins.allows(origin) {
        tracing::warn!(origin = ?origin, "HTTP request refused: Origin not allowed");
        return refusal(
            StatusCode::FORBIDDEN,
            format!(
                "403 Forbidden: Origin {} is not allowed; loopback origins are, and those \
                 listed in `[serve] http_allowed_origins`\n",
                origin.unwrap_or_default()
            ),
        );
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token);
    if request.uri().path() == METRICS_PATH {
        return serve_metrics(&admission, presented, request.method());
    }
    let scope = presented.and_then(|presented| {
        // Every token is compared, so timing tells nothing of which one came close.
        admission.tokens.iter().fold(
            None,
            |found, (token, scope, principal)| match constant_time_eq(
                presented.as_bytes(),
                token.as_bytes(),
            ) {
                true => Some((scope.clone(), principal.clone())),
                false => found,
            },
        )
    });
    let Some((scope, principal)) = scope else {
        return unauthorized();
    };
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(AdmittedScope(scope, principal));
    let read = Limited::new(body, admission.max_body_bytes).collect();
    let bytes = match tokio::time::timeout(admission.body_timeout, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "413 Payload Too Large: the request body is over {} bytes \
                     (`[serve] max_request_bytes`)\n",
                    admission.max_body_bytes
                ),
            );
        }
        Ok(Err(error)) => {
            tracing::debug!(%error, "reading an HTTP request body failed");
            return refusal(
                StatusCode::BAD_REQUEST,
                format!("400 Bad Request: the request body could not be read: {error}\n"),
            );
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = admission.body_timeout.as_millis() as u64,
                "HTTP request refused: its body did not arrive in time"
            );
            return refusal(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "408 Request Timeout: the request body did not arrive within {} ms \
                     (`[serve] http_body_timeout_ms`)\n",
                    admission.body_timeout.as_millis()
                ),
            );
        }
    };
    // Only a 2025 handshake opens a session; a 2026-07-28 request has none to open.
    if parts.method == Method::POST
        && !parts.headers.contains_key(SESSION_HEADER)
        && admission.sessions.is_full()
        && opens_session(&bytes)
    {
        let max = admission.sessions.max();
        tracing::warn!(max, "HTTP session refused: at http_max_sessions");
        let mut response = refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "503 Service Unavailable: the server has its maximum of {max} MCP sessions \
                 (`[serve] http_max_sessions`); close one (DELETE) or wait for an idle one to end\n"
            ),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return response;
    }
    // The revision's requests name it in a header (rmcp checks it against the body).
    let modern = parts
        .headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= "2026-07-28");
    admission.metrics.http_request(modern);
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether a POST body is an `initialize` request (the one that opens a session).
fn opens_session(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method>(body).is_ok_and(|m| m.method.as_deref() == Some("initialize"))
}

/// Answers a request for [`METRICS_PATH`]: the metrics, to a `GET` with the metrics
/// token.
fn serve_metrics(admission: &Admission, presented: Option<&str>, method: &Method) -> Response {
    let allowed = presented.is_some_and(|presented| {
        constant_time_eq(presented.as_bytes(), admission.metrics_token.as_bytes())
    });
    if !allowed {
        return unauthorized();
    }
    if method != Method::GET {
        let mut response = refusal(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("405 Method Not Allowed: {METRICS_PATH} answers GET\n"),
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    match admission.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot serve /metrics");
            refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("500 Internal Server Error: {error}\n"),
            )
        }
    }
}

/// 401, asking for a bearer token.
fn unauthorized() -> Response {
    let mut response = refusal(
        StatusCode::UNAUTHORIZED,
        "401 Unauthorized: a valid `Authorization: Bearer TOKEN` header is required\n".into(),
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// A refusal: plain text, and `Connection: close`, because the request's body may be
/// left unread (the client then learns the connection is not reused, instead of
/// finding it closed on its next request).
fn refusal(status: StatusCode, message: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CONNECTION, "close"),
        ],
        message,
    )
        .into_response()
}

/// The token of an `Authorization` value in the Bearer scheme, the scheme's name
/// matched in any case (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start_matches(' ').split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_matches(' '))
}

/// Compares without stopping at the first difference, so timing does not leak the token.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh random token: 32 bytes from the OS, hex.
pub fn generate_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The HTTP server, handed over: its listener (never closed, so no connection is
/// refused), its tokens (generated ones too: clients keep theirs), its sessions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HttpHandover {
    /// The listening socket, open across the `exec`.
    pub listener: i32,
    /// Each served scope and its token.
    pub tokens: Vec<(String, String)>,
    pub metrics_token: String,
    pub sessions: Vec<HttpSessionHandover>,
    /// The number the next owner (`http-N`) gets.
    pub next_owner: u64,
}

impl TransportHandover for HttpHandover {
    const KEY: &'static str = "http";

    fn descriptors(&self) -> Vec<i32> {
        vec![self.listener]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_matched_in_any_case() {
        for value in ["Bearer abc", "bearer abc", "BEARER abc", "BeArEr  abc "] {
            assert_eq!(bearer_token(value), Some("abc"), "{value:?}");
        }
        for value in ["Basic abc", "Bearerabc", "Bearer", "Token abc"] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn generated_tokens_are_long_and_differ() {
        let (a, b) = (generate_token().unwrap(), generate_token().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
