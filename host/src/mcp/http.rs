//! MCP over streamable HTTP: one MCP session per client, each its own owner
//! (`http-1`, `http-2`, …), behind a bearer token. A request without the right token
//! gets 401 before it reaches MCP; bodies over the configured size get 413.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{McpConnection, McpServer, ServeError};

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// Serves MCP on `listener` until `shutdown` is cancelled.
pub async fn serve_http(
    server: Arc<McpServer>,
    listener: tokio::net::TcpListener,
    token: String,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let idle = std::time::Duration::from_millis(server.host.config.serve.http_session_idle_ms);
    let mut config = StreamableHttpServerConfig::default();
    config.max_request_body_bytes = server.host.config.serve.max_request_bytes;
    config.cancellation_token = shutdown.child_token();
    let sessions = Arc::new(AtomicU64::new(0));
    let service = StreamableHttpService::new(
        move || {
            let n = sessions.fetch_add(1, Ordering::Relaxed) + 1;
            Ok(McpConnection::new(server.clone(), format!("http-{n}")))
        },
        Arc::new(sessions_closing_after(idle)),
        config,
    );
    let router = axum::Router::new().nest_service(MCP_PATH, service).layer(
        axum::middleware::from_fn_with_state(Arc::<str>::from(token), require_bearer),
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
        .await
        .map_err(ServeError::Io)
}

/// Sessions that close after `idle` without a request.
fn sessions_closing_after(idle: std::time::Duration) -> LocalSessionManager {
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(idle);
    sessions
}

/// Lets a request through only with `Authorization: Bearer TOKEN`.
async fn require_bearer(State(token): State<Arc<str>>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match presented {
        Some(presented) if constant_time_eq(presented.as_bytes(), token.as_bytes()) => {
            next.run(request).await
        }
        // The body is left unread, so the connection is not reused: `Connection: close`
        // tells the client so, instead of it finding a closed socket on its next request.
        _ => (
            StatusCode::UNAUTHORIZED,
            [
                (header::WWW_AUTHENTICATE, "Bearer"),
                (header::CONNECTION, "close"),
            ],
            "401 Unauthorized: a valid `Authorization: Bearer TOKEN` header is required\n",
        )
            .into_response(),
    }
}

/// Compares without stopping at the first difference, so timing does not leak the token.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh random token: 32 bytes from the OS, hex.
pub fn generate_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
