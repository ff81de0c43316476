//! The operator's console: a page served by `dsh serve --http` at [`CONSOLE_PATH`] where a
//! person watches every owner's terminals, jobs and calls live, answers the guards'
//! asks, and takes an agent's terminal over.
//!
//! **Who gets in.** The console has a token of its own, `DSH_CONSOLE_TOKEN` (no scope's
//! token, not the metrics token; the console is off when it is unset). It is entered
//! once on the login page and exchanged for a random login id kept in an `HttpOnly`,
//! `SameSite=Strict` cookie scoped to `/console`, which lasts `[serve]
//! http_console_login_ms`. Every request but the login page and the static files needs
//! a live login. Every state-changing request (a `POST`) must come from the page's own
//! origin (`Origin` present and equal to the request's `Host`, `Sec-Fetch-Site`, when
//! sent, `same-origin`), and the API's `POST`s must also carry `X-Dsh-Console: 1`,
//! which no cross-site form can send. A request naming another origin is refused
//! whatever its method. The page's content security policy allows nothing but the page's
//! own origin: no font, script or stylesheet comes from anywhere else.
//!
//! **What it sees.** The operator sees every owner (there is no scoped view: the console
//! token is the operator's). The streams are in [`streams`]; the feed of calls and the
//! figures in [`feed`].

mod feed;
mod streams;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use crate::host::Host;
use crate::services::people::PeopleTerminals;

pub use feed::Feed;

/// Where the console is served.
pub const CONSOLE_PATH: &str = "/console";
/// The cookie that carries a login.
const COOKIE: &str = "dsh_console";
/// The largest body a console request may send (a typed paste, a note).
const MAX_BODY_BYTES: usize = 64 * 1024;
/// The fewest characters a console token may have.
const MIN_TOKEN_CHARS: usize = 16;

/// The console of one server.
pub struct Console {
    token: String,
    /// Live logins: a random id and when it expires.
    logins: Mutex<HashMap<String, Instant>>,
    login_life: Duration,
    host: Arc<Host>,
    /// The terminal sessions a person may watch and take over.
    people: Option<Arc<dyn PeopleTerminals>>,
    feed: Arc<Feed>,
}

/// Why the console cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("$DSH_CONSOLE_TOKEN is shorter than {MIN_TOKEN_CHARS} characters")]
    ShortToken,
    #[error("$DSH_CONSOLE_TOKEN is the token of {0}: the console needs a token of its own")]
    SharedToken(String),
}

impl Console {
    /// The console behind `token`, which must differ from every token in `others` (each
    /// named for the message). Taps the host's event log and samples its figures.
    pub fn open(
        host: Arc<Host>,
        token: String,
        others: &[(String, String)],
    ) -> Result<Arc<Console>, ConsoleError> {
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err(ConsoleError::ShortToken);
        }
        if let Some((what, _)) = others.iter().find(|(_, other)| *other == token) {
            return Err(ConsoleError::SharedToken(what.clone()));
        }
        let feed = Feed::start(&host);
        host.pipeline.approvals.set_open(true);
        Ok(Arc::new(Console {
            token,
            logins: Mutex::default(),
            login_life: Duration::from_millis(host.config.serve.http.console_login_ms),
            people: host.services.for_people().cloned(),
            host,
            feed,
        }))
    }

    /// The console's routes, each behind [`admit`].
    pub fn router(self: &Arc<Console>) -> axum::Router {
        axum::Router::new()
            .route(CONSOLE_PATH, get(page))
            .route("/console/", get(page))
            .route("/console/login", get(login_page).post(login))
            .route("/console/logout", post(logout))
            .route("/console/static/{name}", get(static_file))
            .route("/console/api/state", get(streams::state))
            .route("/console/api/figures", get(feed::figures))
            .route("/console/api/events", get(feed::events))
            .route("/console/api/watch", get(streams::watch))
            .route(
                "/console/api/terminal/{action}",
                post(streams::terminal_action),
            )
            .route("/console/api/approvals/{id}", post(streams::answer))
            .layer(axum::middleware::from_fn_with_state(self.clone(), admit))
            .with_state(self.clone())
    }

    fn logged_in(&self, headers: &HeaderMap) -> bool {
        let Some(id) = cookie(headers, COOKIE) else {
            return false;
        };
        let mut logins = self.logins.lock().unwrap();
        let now = Instant::now();
        logins.retain(|_, expires| *expires > now);
        logins.contains_key(id)
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        self.host.pipeline.approvals.set_open(false);
    }
}

/// The origin checks, then the login check, for every console request.
async fn admit(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let path = request.uri().path();
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    let own_origin = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(|host| format!("http://{host}"));
    let same_origin = origin.is_some_and(|origin| Some(origin) == own_origin.as_deref());
    if origin.is_some() && !same_origin {
        tracing::warn!(?origin, path, "console request refused: another origin");
        return json_refusal(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "the console answers only its own page's origin",
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let fetch_site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("same-origin");
        if !same_origin || fetch_site != "same-origin" {
            tracing::warn!(?origin, path, "console request refused: not from its page");
            return json_refusal(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                "a console request that changes something must come from the console's page (its Origin)",
            );
        }
        if path.starts_with("/console/api/") && headers.get("x-dsh-console").is_none() {
            return json_refusal(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                "a console API request must carry `X-Dsh-Console: 1`",
            );
        }
    }
    let open = path == "/console/login" || path.starts_with("/console/static/");
    if !open && !console.logged_in(headers) {
        if path.starts_with("/console/api/") || request.method() != Method::GET {
            return json_refusal(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "log in to the console first (POST /console/login)",
            );
        }
        return see_other("/console/login");
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
             frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn page() -> Response {
    html(include_str!("../../console/index.html"))
}

async fn login_page() -> Response {
    html(include_str!("../../console/login.html"))
}

/// `POST /console/login` with `token=…`: a login cookie and the page, or the login page
/// again saying it failed.
async fn login(State(console): State<Arc<Console>>, request: Request) -> Response {
    let body = match read_body(request.into_body()).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let presented = form_urlencoded::parse(&body)
        .find(|(key, _)| key == "token")
        .map(|(_, value)| value.into_owned())
        .unwrap_or_default();
    if !crate::mcp::http::constant_time_eq(presented.as_bytes(), console.token.as_bytes()) {
        tracing::warn!("console login refused: wrong token");
        return see_other("/console/login?failed=1");
    }
    let Ok(id) = crate::mcp::http::generate_token() else {
        return plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "500: cannot make a login id\n",
        );
    };
    let life = console.login_life;
    console
        .logins
        .lock()
        .unwrap()
        .insert(id.clone(), Instant::now() + life);
    tracing::info!("console login");
    let mut response = see_other(CONSOLE_PATH);
    let cookie = format!(
        "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
        life.as_secs().max(1)
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Some(id) = cookie(&headers, COOKIE) {
        console.logins.lock().unwrap().remove(id);
    }
    let mut response = see_other("/console/login");
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "dsh_console=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0",
        ),
    );
    response
}

/// The page's files, embedded in the binary.
async fn static_file(Path(name): Path<String>) -> Response {
    let (body, kind): (&'static [u8], &str) = match name.as_str() {
        "console.js" => (
            include_bytes!("../../console/console.js"),
            "text/javascript; charset=utf-8",
        ),
        "console.css" => (
            include_bytes!("../../console/console.css"),
            "text/css; charset=utf-8",
        ),
        "xterm.js" => (
            include_bytes!("../../console/vendor/xterm.js"),
            "text/javascript; charset=utf-8",
        ),
        "xterm.css" => (
            include_bytes!("../../console/vendor/xterm.css"),
            "text/css; charset=utf-8",
        ),
        _ => return plain(StatusCode::NOT_FOUND, "404 Not Found\n"),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "private, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Reads a request body of at most [`MAX_BODY_BYTES`].
async fn read_body(body: Body) -> Result<Vec<u8>, Response> {
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map(|bytes| bytes.to_vec())
        .map_err(|_| {
            json_refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "LIMIT_EXCEEDED",
                &format!("a console request's body is at most {MAX_BODY_BYTES} bytes"),
            )
        })
}

fn html(text: &'static str) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], text).into_response()
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// A JSON answer.
fn json_ok(value: serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// A refusal the page can read: `{"code", "message"}`.
fn json_refusal(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"code": code, "message": message}).to_string(),
    )
        .into_response()
}

/// A tool error as a refusal the page can read.
fn tool_refusal(error: crate::error::ToolError) -> Response {
    use crate::error::ErrorCode;
    let status = match error.code {
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::TerminalHeld | ErrorCode::SessionClosing => StatusCode::CONFLICT,
        ErrorCode::InvalidArguments => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    json_refusal(status, error.code.as_str(), &error.message)
}
