//! `[serve]`: how dsh serves MCP. What every transport shares is [`ServeConfig`]'s own;
//! each transport's settings are a struct of their own ([`StdioConfig`], [`HttpConfig`]),
//! so no transport's fields sit among the shared ones. In `dsh.toml` the section stays
//! flat (`stdio_max_message_bytes`, `http_max_sessions`, ...): [`ServeKeys`] is that file
//! form, read and then sorted into the three.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::origin;

/// The MCP front end (`dsh serve`), whatever the transport.
// Each field is the `[serve]` key of its name (a transport's with its prefix, `stdio_` or
// `http_`, but `max_request_bytes`): `ServeKeys` documents each key, once.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(from = "ServeKeys")]
// The file form is `ServeKeys`: schemars reads `from` only with an `into`.
#[schemars(with = "ServeKeys")]
pub struct ServeConfig {
    pub owner_grace_ms: u64,
    pub progress_interval_ms: u64,
    pub resource_update_interval_ms: u64,
    pub reload_debounce_ms: u64,
    pub approval_timeout_ms: u64,
    pub task_after_ms: u64,
    pub upgrade_drain_ms: u64,
    pub upgrade_check_ms: u64,
    pub stdio: StdioConfig,
    pub http: HttpConfig,
}

/// The stdio transport's settings (the `stdio_*` keys of [`ServeKeys`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioConfig {
    pub max_message_bytes: usize,
}

/// The HTTP transport's settings (`dsh serve --http`): the `http_*` keys of [`ServeKeys`]
/// and `max_request_bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpConfig {
    pub max_request_bytes: usize,
    pub session_idle_ms: u64,
    pub max_sessions: usize,
    pub max_connections: usize,
    pub header_timeout_ms: u64,
    pub body_timeout_ms: u64,
    pub console_login_ms: u64,
    pub allowed_origins: Vec<String>,
    pub scope_tokens: BTreeMap<String, String>,
    pub principals: BTreeMap<String, HttpPrincipal>,
}

/// One named principal of `[serve] http_principals`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpPrincipal {
    /// The scope its requests are served in.
    pub scope: String,
    /// The environment variable holding its bearer token (it must be set: a principal's
    /// token is never generated).
    pub token_env: String,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            owner_grace_ms: 30_000,
            progress_interval_ms: 250,
            resource_update_interval_ms: 100,
            reload_debounce_ms: 100,
            approval_timeout_ms: 300_000,
            task_after_ms: 10_000,
            upgrade_drain_ms: 10_000,
            upgrade_check_ms: 10_000,
            stdio: StdioConfig {
                max_message_bytes: 16 << 20,
            },
            http: HttpConfig {
                max_request_bytes: 4 << 20,
                session_idle_ms: 300_000,
                max_sessions: 64,
                max_connections: 256,
                header_timeout_ms: 10_000,
                body_timeout_ms: 30_000,
                console_login_ms: 12 * 3_600_000,
                allowed_origins: Vec::new(),
                scope_tokens: BTreeMap::new(),
                principals: BTreeMap::new(),
            },
        }
    }
}

/// `[serve]` as `dsh.toml` writes it: one flat list of keys, each transport's under its
/// prefix. Its defaults are [`ServeConfig`]'s. Its fields' docs are the keys' only ones (the
/// configuration reference shows them).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct ServeKeys {
    /// How long after a connection ends its processes, jobs and terminals are kept.
    owner_grace_ms: u64,
    /// The largest HTTP request body accepted; bigger ones get 413.
    max_request_bytes: usize,
    /// The longest line (one JSON-RPC message, its newline not counted) read on stdio; a
    /// longer one is answered with an error naming this limit (with the request's id when it
    /// is within the first this many bytes) and the rest of it discarded unread.
    stdio_max_message_bytes: usize,
    /// How often a call with a progress token gets a progress notification.
    progress_interval_ms: u64,
    /// The least time between two `notifications/resources/updated` (or two
    /// `resources/list_changed`) sent to one client: the changes in between are sent
    /// together after it, so a terminal printing fast costs a client a few
    /// notifications a second, not one per chunk of output.
    resource_update_interval_ms: u64,
    /// An HTTP session with no request and no call in flight for this long is closed
    /// (its owner's grace period then starts): the end of a client that vanished
    /// without saying so. The time counts from the end of the session's last call.
    http_session_idle_ms: u64,
    /// MCP sessions open at once over HTTP; a request opening one more gets 503.
    http_max_sessions: usize,
    /// TCP connections open at once (never more than half the file descriptor limit).
    /// At the cap, the oldest connection that has sent no request is closed to make
    /// room; when every one has, the new connection gets 503.
    http_max_connections: usize,
    /// A connection whose request head is not complete this long after it opened (or
    /// after its last response) is closed.
    http_header_timeout_ms: u64,
    /// A request whose body is not complete this long after its head gets 408.
    http_body_timeout_ms: u64,
    /// How long a console login lasts (its cookie's life).
    http_console_login_ms: u64,
    /// Browser origins (`Origin`) allowed besides loopback ones: `scheme://host` (the
    /// scheme's default port), `scheme://host:PORT`, `scheme://host:*` or `null`.
    /// A request with any other `Origin` gets 403; one with no `Origin` passes.
    http_allowed_origins: Vec<String>,
    /// More scopes `dsh serve --http` serves besides `--scope` (whose token is
    /// `DSH_HTTP_TOKEN`): each scope, and the environment variable holding the token that
    /// reaches it (generated and printed when unset). A client's token decides its scope.
    http_scope_tokens: BTreeMap<String, String>,
    /// Named principals over HTTP: several agents in one scope, each with its own token
    /// and its own terminals, jobs and tasks. Under MCP 2026-07-28 (no sessions) a
    /// request's owner is its token's principal (a scope's own token is the principal
    /// named after the scope); a 2025 session keeps an owner of its own whatever token
    /// opened it.
    http_principals: BTreeMap<String, HttpPrincipal>,
    /// A changed plugin file is reloaded once it has had no write for this long.
    reload_debounce_ms: u64,
    /// How long an approval asked of an MCP client may go unanswered (then: denied).
    approval_timeout_ms: u64,
    /// Under MCP 2026-07-28, a call of a client that declared the Tasks extension still
    /// running this long after its request came is answered as a task (a job of kind
    /// `call`), its result read with `tasks/get`.
    task_after_ms: u64,
    /// At an upgrade (`dsh upgrade`), how long calls in flight may take to finish before
    /// they are cancelled (answered `CANCELLED`); new requests wait meanwhile.
    upgrade_drain_ms: u64,
    /// How long the new binary may take to check it can take over (read the snapshot
    /// and the configuration) before the upgrade is refused.
    upgrade_check_ms: u64,
}

impl Default for ServeKeys {
    fn default() -> Self {
        let ServeConfig {
            owner_grace_ms,
            progress_interval_ms,
            resource_update_interval_ms,
            reload_debounce_ms,
            approval_timeout_ms,
            task_after_ms,
            upgrade_drain_ms,
            upgrade_check_ms,
            stdio,
            http,
        } = ServeConfig::default();
        ServeKeys {
            owner_grace_ms,
            max_request_bytes: http.max_request_bytes,
            stdio_max_message_bytes: stdio.max_message_bytes,
            progress_interval_ms,
            resource_update_interval_ms,
            http_session_idle_ms: http.session_idle_ms,
            http_max_sessions: http.max_sessions,
            http_max_connections: http.max_connections,
            http_header_timeout_ms: http.header_timeout_ms,
            http_body_timeout_ms: http.body_timeout_ms,
            http_console_login_ms: http.console_login_ms,
            http_allowed_origins: http.allowed_origins,
            http_scope_tokens: http.scope_tokens,
            http_principals: http.principals,
            reload_debounce_ms,
            approval_timeout_ms,
            task_after_ms,
            upgrade_drain_ms,
            upgrade_check_ms,
        }
    }
}

impl From<ServeKeys> for ServeConfig {
    fn from(keys: ServeKeys) -> Self {
        ServeConfig {
            owner_grace_ms: keys.owner_grace_ms,
            progress_interval_ms: keys.progress_interval_ms,
            resource_update_interval_ms: keys.resource_update_interval_ms,
            reload_debounce_ms: keys.reload_debounce_ms,
            approval_timeout_ms: keys.approval_timeout_ms,
            task_after_ms: keys.task_after_ms,
            upgrade_drain_ms: keys.upgrade_drain_ms,
            upgrade_check_ms: keys.upgrade_check_ms,
            stdio: StdioConfig {
                max_message_bytes: keys.stdio_max_message_bytes,
            },
            http: HttpConfig {
                max_request_bytes: keys.max_request_bytes,
                session_idle_ms: keys.http_session_idle_ms,
                max_sessions: keys.http_max_sessions,
                max_connections: keys.http_max_connections,
                header_timeout_ms: keys.http_header_timeout_ms,
                body_timeout_ms: keys.http_body_timeout_ms,
                console_login_ms: keys.http_console_login_ms,
                allowed_origins: keys.http_allowed_origins,
                scope_tokens: keys.http_scope_tokens,
                principals: keys.http_principals,
            },
        }
    }
}

impl ServeConfig {
    /// Checks the limits, the HTTP origins, the token variables and the principals' names.
    pub(super) fn check(&self) -> Result<(), String> {
        let http = &self.http;
        for (key, value) in [
            (
                "stdio_max_message_bytes",
                self.stdio.max_message_bytes as u64,
            ),
            ("http_max_sessions", http.max_sessions as u64),
            ("http_max_connections", http.max_connections as u64),
            ("http_header_timeout_ms", http.header_timeout_ms),
            ("http_body_timeout_ms", http.body_timeout_ms),
            ("http_console_login_ms", http.console_login_ms),
        ] {
            if value == 0 {
                return Err(format!("serve.{key} must be at least 1"));
            }
        }
        for entry in &http.allowed_origins {
            origin::AllowedOrigin::parse(entry)
                .map_err(|e| format!("serve.http_allowed_origins: {e}"))?;
        }
        for (scope, variable) in &http.scope_tokens {
            if !is_variable_name(variable) {
                return Err(format!(
                    "serve.http_scope_tokens.{scope}: {variable:?} is not an environment \
                     variable name (letters, digits and _, not starting with a digit)"
                ));
            }
        }
        for (name, principal) in &http.principals {
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid_name {
                return Err(format!(
                    "serve.http_principals: {name:?} is not a principal name (1 to 64 \
                     letters, digits, - and _)"
                ));
            }
            if !is_variable_name(&principal.token_env) {
                return Err(format!(
                    "serve.http_principals.{name}.token_env: {:?} is not an environment \
                     variable name (letters, digits and _, not starting with a digit)",
                    principal.token_env
                ));
            }
        }
        Ok(())
    }
}

/// Whether `name` can name an environment variable: letters, digits and `_`, not
/// starting with a digit.
fn is_variable_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
