//! The models the operator configures for subagents (`[subagent.models.NAME]`): one
//! HTTP client per model endpoint, speaking the OpenAI-compatible chat completions API
//! ([`openai`]) or Anthropic's Messages API ([`anthropic`]), with tool calls.
//!
//! A [`Model`] owns its endpoint's key (read once from dsh's own environment, the
//! variable `api_key_env` names; the environment policy withholds that variable from
//! every command, and no plugin may be granted it), its requests in flight (a semaphore
//! of `max_in_flight`), its retries (a 429, a 5xx, a dropped connection or a timeout is
//! tried again after the provider's `Retry-After` or an exponential backoff with
//! jitter, up to `max_retries` times) and its counts. What it gives back is the model's
//! reply with its token use, or a [`ToolError`] (`MODEL_UNAVAILABLE`, with the provider's
//! status and message) that never holds the key or a header: the message is built from
//! the status and the provider's own error text, and any appearance of the key in it is
//! blotted out.

pub mod anthropic;
pub mod openai;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use crate::call::{SampleReply, SampleRequest};
use crate::error::{ErrorCode, ToolError};

/// The most bytes of one answer dsh reads from a model endpoint.
pub const MAX_ANSWER_BYTES: usize = 32 << 20;

/// Which wire format a model endpoint speaks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema, serde::Serialize,
)]
pub enum ModelApi {
    /// `POST {base_url}/chat/completions`, tools as `functions` (OpenAI, vLLM, Ollama,
    /// llama.cpp's server, LiteLLM, OpenRouter).
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// `POST {base_url}/messages`, tools as `tool_use` blocks (Anthropic).
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
}

impl ModelApi {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelApi::OpenAiChat => "openai-chat",
            ModelApi::AnthropicMessages => "anthropic-messages",
        }
    }
}

/// `[subagent.models.NAME]`: one model endpoint.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The wire format the endpoint speaks.
    pub api: ModelApi,
    /// The API's base URL, up to the version (`https://api.openai.com/v1`,
    /// `https://api.anthropic.com/v1`, `http://127.0.0.1:8080/v1`).
    pub base_url: String,
    /// The model's name as the endpoint knows it.
    pub model: String,
    /// The variable of dsh's environment that holds the key; none: requests carry no key
    /// (a local server).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// One request's whole time, its retries aside.
    #[serde(default = "defaults::timeout_ms")]
    pub timeout_ms: u64,
    /// How long a connection may take to open.
    #[serde(default = "defaults::connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Tries after the first, for a 429, a 5xx, a dropped connection or a timeout.
    #[serde(default = "defaults::max_retries")]
    pub max_retries: u32,
    /// The first backoff; it doubles at each retry (with jitter).
    #[serde(default = "defaults::retry_base_ms")]
    pub retry_base_ms: u64,
    /// The longest wait before a retry, `Retry-After` included (a longer one ends the run).
    #[serde(default = "defaults::max_retry_wait_ms")]
    pub max_retry_wait_ms: u64,
    /// Requests to this endpoint in flight at once, across every subagent.
    #[serde(default = "defaults::max_in_flight")]
    pub max_in_flight: usize,
}

mod defaults {
    pub fn timeout_ms() -> u64 {
        120_000
    }
    pub fn connect_timeout_ms() -> u64 {
        10_000
    }
    pub fn max_retries() -> u32 {
        4
    }
    pub fn retry_base_ms() -> u64 {
        500
    }
    pub fn max_retry_wait_ms() -> u64 {
        60_000
    }
    pub fn max_in_flight() -> usize {
        8
    }
}

impl ModelConfig {
    /// What is wrong with it, said as the error to show.
    pub fn check(&self, name: &str) -> Result<(), String> {
        let url: hyper::Uri = self.base_url.parse().map_err(|error| {
            format!(
                "[subagent.models.{name}] base_url `{}` is not a URL: {error}",
                self.base_url
            )
        })?;
        if !matches!(url.scheme_str(), Some("http") | Some("https")) || url.host().is_none() {
            return Err(format!(
                "[subagent.models.{name}] base_url `{}` must be an http:// or https:// URL with a host",
                self.base_url
            ));
        }
        if self.model.trim().is_empty() {
            return Err(format!("[subagent.models.{name}] model is empty"));
        }
        if let Some(variable) = &self.api_key_env {
            if variable.is_empty() || variable.contains(['=', '\0']) {
                return Err(format!(
                    "[subagent.models.{name}] api_key_env `{variable}` is not a variable name"
                ));
            }
        }
        if self.max_in_flight == 0 || self.timeout_ms == 0 {
            return Err(format!(
                "[subagent.models.{name}] max_in_flight and timeout_ms must be at least 1"
            ));
        }
        Ok(())
    }
}

pub use crate::call::TokenUse;

/// What one model has done since the host started.
#[derive(Debug, Default)]
pub struct ModelCounts {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub retries: AtomicU64,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    /// Wall time of the answered requests, in microseconds.
    pub latency_us: AtomicU64,
}

/// One configured model endpoint.
pub struct Model {
    pub name: Arc<str>,
    pub config: ModelConfig,
    /// The key, when `api_key_env` names a variable that is set (read at start).
    key: Option<String>,
    http: reqwest::Client,
    in_flight: tokio::sync::Semaphore,
    pub counts: ModelCounts,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key never goes into a log line.
        f.debug_struct("Model")
            .field("name", &self.name)
            .field("api", &self.config.api)
            .field("base_url", &self.config.base_url)
            .field("model", &self.config.model)
            .field("has_key", &self.key.is_some())
            .finish_non_exhaustive()
    }
}

/// How one try of a request ended.
enum Attempt {
    Answered(SampleReply),
    /// Worth another try, after at least this long (the provider's `Retry-After`).
    Retry {
        why: String,
        after: Option<Duration>,
    },
    Failed(ToolError),
}

/// A request as sent: the URL, the headers that are not the key, and the body.
pub(crate) struct WireRequest {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: serde_json::Value,
}

impl Model {
    /// The model `name` of `config`, its key read from dsh's environment.
    pub fn new(name: &str, config: ModelConfig) -> Model {
        crate::tls::install_provider();
        let key = config
            .api_key_env
            .as_deref()
            .and_then(|variable| std::env::var(variable).ok())
            .filter(|key| !key.is_empty());
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(config.connect_timeout_ms))
            .timeout(Duration::from_millis(config.timeout_ms))
            .user_agent(concat!("dsh/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .build()
            .unwrap_or_default();
        Model {
            name: name.into(),
            in_flight: tokio::sync::Semaphore::new(config.max_in_flight),
            config,
            key,
            http,
            counts: ModelCounts::default(),
        }
    }

    /// Asks the model `request`: its reply and token use, after the retries its
    /// configuration allows.
    pub async fn ask(&self, request: &SampleRequest) -> Result<(SampleReply, TokenUse), ToolError> {
        if let (Some(variable), None) = (&self.config.api_key_env, &self.key) {
            return Err(ToolError::new(
                ErrorCode::ModelUnavailable,
                format!(
                    "model {} has no key: `{variable}` ([subagent.models.{}] api_key_env) is not set in dsh's environment",
                    self.name, self.name
                ),
            ));
        }
        let _permit = self.in_flight.acquire().await.map_err(|_| {
            ToolError::new(ErrorCode::ModelUnavailable, "the host is shutting down")
        })?;
        let wire = match self.config.api {
            ModelApi::OpenAiChat => openai::request(&self.config, request),
            ModelApi::AnthropicMessages => anthropic::request(&self.config, request),
        };
        let mut tries = 0;
        loop {
            let span = crate::traces::host_call_span("model.request");
            let started = Instant::now();
            self.counts.requests.fetch_add(1, Ordering::Relaxed);
            let attempt = tracing::Instrument::instrument(self.attempt(&wire), span).await;
            match attempt {
                Attempt::Answered(reply) => {
                    let used = reply.usage.unwrap_or_default();
                    self.counts
                        .input_tokens
                        .fetch_add(used.input, Ordering::Relaxed);
                    self.counts
                        .output_tokens
                        .fetch_add(used.output, Ordering::Relaxed);
                    self.counts
                        .latency_us
                        .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    return Ok((reply, used));
                }
                Attempt::Failed(error) => {
                    self.counts.errors.fetch_add(1, Ordering::Relaxed);
                    return Err(self.blot(error));
                }
                Attempt::Retry { why, after } => {
                    self.counts.errors.fetch_add(1, Ordering::Relaxed);
                    if tries >= self.config.max_retries {
                        return Err(self.blot(ToolError::new(
                            ErrorCode::ModelUnavailable,
                            format!(
                                "model {} did not answer after {} tries: {why}",
                                self.name,
                                tries + 1
                            ),
                        )));
                    }
                    let wait = after.unwrap_or_else(|| self.backoff(tries));
                    let longest = Duration::from_millis(self.config.max_retry_wait_ms);
                    if wait > longest {
                        return Err(self.blot(ToolError::new(
                            ErrorCode::ModelUnavailable,
                            format!(
                                "model {}: {why}; it asks to wait {} s, past max_retry_wait_ms ({} ms)",
                                self.name,
                                wait.as_secs(),
                                self.config.max_retry_wait_ms
                            ),
                        )));
                    }
                    tracing::info!(model = %self.name, %why, wait_ms = wait.as_millis() as u64, "retrying a model request");
                    self.counts.retries.fetch_add(1, Ordering::Relaxed);
                    tries += 1;
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// One try.
    async fn attempt(&self, wire: &WireRequest) -> Attempt {
        let mut request = self
            .http
            .post(&wire.url)
            .header("content-type", "application/json");
        for (name, value) in &wire.headers {
            request = request.header(*name, value);
        }
        if let Some(key) = &self.key {
            request = match self.config.api {
                ModelApi::OpenAiChat => request.bearer_auth(key),
                ModelApi::AnthropicMessages => request.header("x-api-key", key),
            };
        }
        let response = match request.body(wire.body.to_string()).send().await {
            Ok(response) => response,
            Err(error) => {
                // reqwest's message names the URL and the cause, never a header.
                let why = if error.is_timeout() {
                    format!("no answer within {} ms", self.config.timeout_ms)
                } else if error.is_connect() {
                    format!("cannot connect to {}", self.config.base_url)
                } else {
                    format!("the connection failed: {}", source_chain(&error))
                };
                return Attempt::Retry { why, after: None };
            }
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .and_then(retry_after);
        // Read in chunks up to a cap: an endpoint that answers without end cannot fill
        // dsh's memory.
        let mut response = response;
        let mut body = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                        return Attempt::Failed(ToolError::new(
                            ErrorCode::ModelUnavailable,
                            format!(
                                "model {} answered more than {} MiB; nothing of it was used",
                                self.name,
                                MAX_ANSWER_BYTES >> 20
                            ),
                        ));
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(error) => {
                    return Attempt::Retry {
                        why: format!("the answer was cut off: {}", source_chain(&error)),
                        after: None,
                    }
                }
            }
        }
        if status.is_success() {
            let parsed = serde_json::from_slice::<serde_json::Value>(&body)
                .map_err(|error| error.to_string())
                .and_then(|value| match self.config.api {
                    ModelApi::OpenAiChat => openai::reply(&value),
                    ModelApi::AnthropicMessages => anthropic::reply(&value),
                });
            return match parsed {
                Ok(reply) => Attempt::Answered(reply),
                Err(why) => Attempt::Failed(ToolError::new(
                    ErrorCode::ModelUnavailable,
                    format!(
                        "model {} answered what is not a {} reply: {why}",
                        self.name,
                        self.config.api.as_str()
                    ),
                )),
            };
        }
        let message = provider_message(&body);
        let why = format!("HTTP {}: {message}", status.as_u16());
        if status.as_u16() == 429 || status.as_u16() == 529 || status.is_server_error() {
            return Attempt::Retry {
                why,
                after: retry_after,
            };
        }
        Attempt::Failed(ToolError::new(
            ErrorCode::ModelUnavailable,
            format!("model {} refused the request: {why}", self.name),
        ))
    }

    /// The wait before retry `tries + 1`: the base doubled each time, with up to half
    /// again of jitter.
    fn backoff(&self, tries: u32) -> Duration {
        let base = self.config.retry_base_ms.saturating_mul(1 << tries.min(16));
        let jitter = fastrand::u64(0..=base / 2);
        Duration::from_millis(base + jitter)
    }

    /// `error` with the key, should the provider have echoed it, blotted out.
    fn blot(&self, mut error: ToolError) -> ToolError {
        if let Some(key) = self.key.as_deref().filter(|key| key.len() >= 4) {
            error.message = error.message.replace(key, "[key withheld]");
        }
        error
    }
}

/// A `Retry-After` value: seconds, or an HTTP date.
fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

/// The provider's own error text (`{"error": {"message": …}}` in both APIs), cut short;
/// else the body's first line.
fn provider_message(body: &[u8]) -> String {
    let text = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|value| {
            let error = value.get("error")?;
            error
                .get("message")
                .and_then(|m| m.as_str())
                .or_else(|| error.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| {
            String::from_utf8_lossy(body)
                .lines()
                .next()
                .unwrap_or("(no body)")
                .to_string()
        });
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// An error and its causes, one line.
fn source_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `base_url` and `path` joined with one slash.
pub(crate) fn endpoint(base_url: &str, path: &str) -> String {
    format!("{}/{path}", base_url.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        assert_eq!(retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0.5 "), Some(Duration::from_millis(500)));
        assert_eq!(retry_after("-1"), None);
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(30));
        let wait = retry_after(&later).unwrap();
        assert!(
            wait > Duration::from_secs(27) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn the_provider_message_is_its_error_text_or_the_first_line() {
        assert_eq!(
            provider_message(br#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}"#),
            "Incorrect API key provided"
        );
        assert_eq!(
            provider_message(
                br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            "Overloaded"
        );
        assert_eq!(provider_message(b"Bad Gateway\n<html>"), "Bad Gateway");
    }

    #[test]
    fn a_model_without_its_key_says_which_variable_and_holds_no_value() {
        let config: ModelConfig = toml::from_str(
            "api = \"openai-chat\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"DSH_TEST_UNSET_MODEL_KEY\"\n",
        )
        .unwrap();
        let model = Model::new("local", config);
        let request = SampleRequest {
            system: None,
            messages: Vec::new(),
            tools: Vec::new(),
            max_tokens: 10,
            wait: Duration::from_secs(1),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let error = runtime.block_on(model.ask(&request)).unwrap_err();
        assert_eq!(error.code, ErrorCode::ModelUnavailable);
        assert!(
            error.message.contains("DSH_TEST_UNSET_MODEL_KEY"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_bad_base_url_is_refused() {
        let config: ModelConfig =
            toml::from_str("api = \"anthropic-messages\"\nbase_url = \"ftp://x\"\nmodel = \"m\"\n")
                .unwrap();
        assert!(config
            .check("m")
            .unwrap_err()
            .contains("http:// or https://"));
    }
}
