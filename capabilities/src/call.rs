//! The shapes of one call as it passes through the host: who asked ([`CallContext`]),
//! what they asked for ([`CallRequest`]), who can approve it when a guard asks
//! ([`Approver`]), what the plugins tell the caller while it runs ([`Notices`]: progress
//! and log lines), who can be asked for a model's answer ([`Sampler`]: the MCP client's
//! sampling, which subagents use; [`JobStep`] marks a call a job's loop made, a subagent's step) and what
//! came back ([`CallResult`]: content items and structured output).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::error::ToolError;

/// Who is calling and where. Set by the host, never by a plugin.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The agent or MCP connection that made the call.
    pub owner: Arc<str>,
    pub session: Arc<str>,
    /// Unique within the session: `call-N`.
    pub call_id: String,
    /// The session workspace (absolute).
    pub workdir: PathBuf,
    pub scope: Arc<str>,
    /// The tool called (what `[process.executor] tools` names).
    pub tool: Arc<str>,
    /// Where this session's spill files go.
    pub spill_dir: PathBuf,
    /// The budget of this call's content, in bytes.
    pub output_budget: u32,
    /// The most bytes a spill file of this call holds (`[limits] max_spill_bytes`).
    pub spill_cap: u64,
    /// Where the plugins' progress reports and log lines for the caller go.
    pub notices: Notices,
    /// The caller's client, when it can be asked for a model's answer during the call.
    pub sampler: Option<Arc<dyn Sampler>>,
    /// Set when a job's own loop made this call (a subagent's step): which job, and how
    /// deep.
    pub step: Option<JobStep>,
}

impl CallContext {
    /// A spill file for this call; `what` tells apart several files of one call.
    pub fn spill_path(&self, what: &str) -> PathBuf {
        self.spill_dir.join(format!("{}-{what}.txt", self.call_id))
    }
}

/// A call as the model declared it.
#[derive(Debug, Clone)]
pub struct CallRequest {
    pub tool: String,
    pub args: serde_json::Value,
    pub owner: Arc<str>,
    pub scope: Arc<str>,
    /// Who answers a guard's `ask`; with none, an ask is a denial.
    pub approver: Option<Arc<dyn Approver>>,
    /// Where progress and log lines of this call go (nowhere by default).
    pub notices: Notices,
    /// The caller's client, when it can be asked for a model's answer (none by default).
    pub sampler: Option<Arc<dyn Sampler>>,
    /// Set when a job's own loop makes the call (a subagent's step): it then runs under
    /// the admission slot of the call the job runs inside, and its events name the job.
    pub step: Option<JobStep>,
    /// What the call's span descends from when traces are on: the client's trace
    /// context, or the call a subagent runs inside (none by default).
    pub trace_parent: crate::traces::CallParent,
}

impl CallRequest {
    /// A request with no approval channel.
    pub fn new(
        tool: impl Into<String>,
        args: serde_json::Value,
        owner: impl Into<Arc<str>>,
        scope: impl Into<Arc<str>>,
    ) -> Self {
        CallRequest {
            tool: tool.into(),
            args,
            owner: owner.into(),
            scope: scope.into(),
            approver: None,
            notices: Notices::default(),
            sampler: None,
            step: None,
            trace_parent: crate::traces::CallParent::None,
        }
    }
}

/// What marks a call a job's own loop made (a subagent's step), not a client.
#[derive(Debug, Clone)]
pub struct JobStep {
    /// The job's id (`subagent-N`).
    pub job: Arc<str>,
    /// The id of the call that started the job.
    pub started_by: Arc<str>,
    /// How many such jobs deep the call is (1: a job a client's call started).
    pub depth: u32,
}

/// Who says what in a sampling conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleRole {
    User,
    Assistant,
}

/// One content block of a sampling message.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleContent {
    Text(String),
    /// The model asks for a tool call (assistant messages only).
    ToolUse {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// A tool call's result for the model (user messages only).
    ToolResult {
        tool_use_id: String,
        text: String,
        is_error: bool,
    },
}

/// One message of a sampling conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleMessage {
    pub role: SampleRole,
    pub content: Vec<SampleContent>,
}

/// A tool the model may ask for: its manual.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleTool {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

/// One sampling request: the conversation so far and the tools on offer.
#[derive(Debug, Clone)]
pub struct SampleRequest {
    pub system: Option<String>,
    pub messages: Vec<SampleMessage>,
    pub tools: Vec<SampleTool>,
    pub max_tokens: u32,
    /// How long the model's answer may take: the asking capability's setting (`[sampling]
    /// timeout_ms` for a plugin, `[subagent] sampling_timeout_ms` for a subagent).
    pub wait: std::time::Duration,
}

/// The model's answer to one sampling request.
#[derive(Debug, Clone)]
pub struct SampleReply {
    pub content: Vec<SampleContent>,
    /// `endTurn`, `toolUse`, `maxTokens`, ... as the client says.
    pub stop_reason: Option<String>,
    pub model: String,
    /// The tokens it used, when the model's API counts them (an operator's model does;
    /// MCP sampling does not say).
    pub usage: Option<TokenUse>,
}

/// Tokens a model request used, as the provider counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUse {
    pub input: u64,
    pub output: u64,
}

impl TokenUse {
    pub fn total(self) -> u64 {
        self.input + self.output
    }
}

/// Why a request to the client (sampling, elicitation) got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    /// The client cannot be asked (it did not declare the capability).
    #[error("the client cannot be asked: {0}")]
    Unavailable(String),
    /// The client answered with an error (its user refused, its model failed).
    #[error("the request failed: {0}")]
    Failed(String),
    /// The client did not answer in time.
    #[error("the client did not answer in time: {0}")]
    TimedOut(String),
    /// The request is not one the client can be sent (an elicitation schema MCP does
    /// not allow).
    #[error("the request is not valid: {0}")]
    Invalid(String),
}

impl SampleError {
    /// The error as a plugin sees it: `unavailable` is the asking capability's own code
    /// (sampling's or elicitation's).
    pub fn to_tool_error(self, unavailable: crate::error::ErrorCode) -> crate::error::ToolError {
        use crate::error::{ErrorCode, ToolError};
        match self {
            SampleError::Unavailable(why) => ToolError::new(unavailable, why),
            SampleError::Failed(why) => ToolError::new(
                ErrorCode::Denied,
                format!("the client refused or failed the request: {why}"),
            ),
            SampleError::TimedOut(why) => ToolError::new(ErrorCode::Timeout, why),
            SampleError::Invalid(why) => ToolError::new(ErrorCode::InvalidArguments, why),
        }
    }
}

/// What the client's user did with an elicitation form.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitReply {
    /// Submitted it: the answer, a JSON object.
    Accept(serde_json::Value),
    Decline,
    Cancel,
}

/// A boxed elicitation future.
pub type ElicitFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<ElicitReply, SampleError>> + Send + 'a>,
>;

/// A boxed sampling future.
pub type SampleFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<SampleReply, SampleError>> + Send + 'a>,
>;

/// Asks the caller's client: its model (MCP `sampling/createMessage`, with tools for the
/// subagents, without for a plugin's `sampling`) or its user (`elicitation/create`, for a
/// plugin's `elicitation`).
pub trait Sampler: Send + Sync + std::fmt::Debug {
    /// Whether the client declared sampling with tools.
    fn available(&self) -> bool;
    /// Whether the client declared sampling (with tools or not).
    fn can_sample(&self) -> bool {
        self.available()
    }
    /// Asks the model. A request with tools needs [`Sampler::available`], one without
    /// [`Sampler::can_sample`].
    fn sample<'a>(&'a self, request: &'a SampleRequest) -> SampleFuture<'a>;
    /// Whether the client declared elicitation in form mode.
    fn can_elicit(&self) -> bool {
        false
    }
    /// Asks the user to fill in a form for `schema` (a flat object schema).
    fn elicit<'a>(&'a self, _message: &'a str, _schema: &'a serde_json::Value) -> ElicitFuture<'a> {
        Box::pin(async {
            Err(SampleError::Unavailable(
                "this client cannot be asked for input".into(),
            ))
        })
    }
    /// Who answers a guard's `ask` for the calls the model's answers lead to (the same
    /// client's elicitation); none: an ask is a denial.
    fn approver(&self) -> Option<Arc<dyn Approver>> {
        None
    }
}

/// What a guard's `ask` puts to the approver.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalRequest<'a> {
    pub guard: &'a str,
    pub reason: &'a str,
    pub tool: &'a str,
    pub args: &'a serde_json::Value,
}

/// A call's arguments for messages (an approval question, a denial): compact JSON, cut
/// after 500 characters with a `…`.
pub fn describe_args(args: &serde_json::Value) -> String {
    let text = args.to_string();
    match text.char_indices().nth(500) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// The approver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approval {
    Approved,
    Denied,
    /// Nobody could be asked (no terminal, a client without elicitation); says why.
    Unavailable(String),
}

/// A boxed approval future.
pub type ApprovalFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Approval> + Send + 'a>>;

/// Answers a guard's `ask`: a prompt on the terminal, a flag, MCP elicitation.
pub trait Approver: Send + Sync + std::fmt::Debug {
    /// How it asks, for the event log (`terminal`, `flag`, `elicitation`).
    fn channel(&self) -> &'static str;
    fn approve<'a>(&'a self, request: ApprovalRequest<'a>) -> ApprovalFuture<'a>;
}

/// A log line's severity, in the order MCP's `logging/setLevel` compares them (the
/// syslog levels). A plugin's `trace` and `debug` lines are `Debug`, `warn` is `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum LogLevel {
    Debug = 1,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    pub const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];
}

/// The lowest level of log lines a caller wants, or none (no log lines): set by the
/// caller at any time (MCP `logging/setLevel`), read by every call it makes, running ones
/// included.
#[derive(Debug, Default)]
pub struct LogThreshold(AtomicU8);

impl LogThreshold {
    pub fn set(&self, level: Option<LogLevel>) {
        self.0
            .store(level.map_or(0, |l| l as u8), Ordering::Relaxed);
    }

    pub fn get(&self) -> Option<LogLevel> {
        let raw = self.0.load(Ordering::Relaxed);
        LogLevel::ALL.into_iter().find(|l| *l as u8 == raw)
    }

    /// Whether a line at `level` goes to the caller.
    pub fn wants(&self, level: LogLevel) -> bool {
        self.get().is_some_and(|threshold| level >= threshold)
    }
}

/// What a plugin tells the caller of a call while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    /// `progress.report`: how far along (0 to 1, when known) and what it is doing.
    Progress {
        fraction: Option<f64>,
        message: Option<String>,
    },
    /// A `log` line at or above the caller's threshold; `logger` is the plugin's name.
    Log {
        level: LogLevel,
        logger: String,
        message: String,
    },
}

/// How many notices wait for the caller before more are dropped: a plugin that reports
/// or logs in a loop neither blocks nor grows the host's memory.
pub const NOTICE_QUEUE: usize = 256;

/// Where a call's notices go: to its caller (an MCP connection reads the other end), or
/// nowhere (the default: `dsh call`, guards' load-time calls, tests). Sending never
/// waits: when the caller's queue is full the notice is dropped.
#[derive(Clone, Default)]
pub struct Notices {
    sink: Option<Arc<NoticeSink>>,
}

struct NoticeSink {
    sender: tokio::sync::mpsc::Sender<Notice>,
    log_threshold: Arc<LogThreshold>,
}

impl std::fmt::Debug for Notices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.sink.is_some() {
            "Notices(to the caller)"
        } else {
            "Notices(none)"
        })
    }
}

impl Notices {
    /// A sink whose notices the returned receiver reads; log lines pass when
    /// `log_threshold` wants them.
    pub fn channel(
        log_threshold: Arc<LogThreshold>,
    ) -> (Notices, tokio::sync::mpsc::Receiver<Notice>) {
        let (sender, receiver) = tokio::sync::mpsc::channel(NOTICE_QUEUE);
        let sink = NoticeSink {
            sender,
            log_threshold,
        };
        (
            Notices {
                sink: Some(Arc::new(sink)),
            },
            receiver,
        )
    }

    /// A progress report: `fraction` is clamped to 0..=1 (a NaN counts as unknown).
    pub fn progress(&self, fraction: Option<f64>, message: Option<String>) {
        let fraction = fraction.filter(|f| !f.is_nan()).map(|f| f.clamp(0.0, 1.0));
        self.send(Notice::Progress { fraction, message });
    }

    /// A plugin's log line, sent only when the caller wants its level.
    pub fn log(&self, level: LogLevel, logger: &str, message: &str) {
        if self
            .sink
            .as_ref()
            .is_some_and(|sink| sink.log_threshold.wants(level))
        {
            self.send(Notice::Log {
                level,
                logger: logger.to_string(),
                message: message.to_string(),
            });
        }
    }

    fn send(&self, notice: Notice) {
        if let Some(sink) = &self.sink {
            if sink.sender.try_send(notice).is_err() {
                tracing::debug!("a call notice was dropped: the caller's queue is full or gone");
            }
        }
    }
}

/// Bytes with their MIME type: an image or audio item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    pub data: Vec<u8>,
    pub mime_type: String,
}

/// A link to a resource the client may fetch or show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLink {
    pub uri: String,
    pub name: String,
    pub description: Option<String>,
    pub mime_type: Option<String>,
}

/// What an embedded resource holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceContents {
    Text(String),
    Blob(Vec<u8>),
}

/// A resource carried in the result itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedResource {
    pub uri: String,
    pub mime_type: Option<String>,
    pub contents: ResourceContents,
}

/// One item of a result's content, as MCP has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentItem {
    Text(String),
    Image(Binary),
    Audio(Binary),
    ResourceLink(ResourceLink),
    Resource(EmbeddedResource),
}

impl ContentItem {
    /// What the item is, for messages and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ContentItem::Text(_) => "text",
            ContentItem::Image(_) => "image",
            ContentItem::Audio(_) => "audio",
            ContentItem::ResourceLink(_) => "resource link",
            ContentItem::Resource(_) => "embedded resource",
        }
    }

    /// The bytes an item other than text carries (image or audio data, an embedded
    /// resource's contents; a link carries none): what the binary cap bounds.
    pub fn binary_len(&self) -> usize {
        match self {
            ContentItem::Text(_) | ContentItem::ResourceLink(_) => 0,
            ContentItem::Image(binary) | ContentItem::Audio(binary) => binary.data.len(),
            ContentItem::Resource(resource) => match &resource.contents {
                ResourceContents::Text(text) => text.len(),
                ResourceContents::Blob(blob) => blob.len(),
            },
        }
    }
}

/// What a call produced: the only thing the model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    /// Text, images, audio, resource links and embedded resources, in order.
    pub content: Vec<ContentItem>,
    /// The tool's structured output (JSON), checked against its output schema when it
    /// declares one.
    pub structured: Option<serde_json::Value>,
    pub error: Option<ToolError>,
    /// File with the full output when the text is a cut of it.
    pub full_output_path: Option<PathBuf>,
}

impl CallResult {
    /// A result of one text item.
    pub fn ok(content: impl Into<String>) -> Self {
        CallResult {
            content: vec![ContentItem::Text(content.into())],
            structured: None,
            error: None,
            full_output_path: None,
        }
    }

    pub fn failed(error: ToolError) -> Self {
        CallResult {
            content: Vec::new(),
            structured: None,
            error: Some(error),
            full_output_path: None,
        }
    }

    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The text items, joined by newlines (other items are left out).
    pub fn content_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|item| match item {
                ContentItem::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    /// Bytes of every item: text and binary.
    pub fn content_bytes(&self) -> usize {
        self.content
            .iter()
            .map(|item| match item {
                ContentItem::Text(text) => text.len(),
                other => other.binary_len(),
            })
            .sum()
    }

    /// The text the model reads: the error line first (when the call failed), then the
    /// text items.
    pub fn text(&self) -> String {
        let content = self.content_text();
        match &self.error {
            None => content,
            Some(error) if content.is_empty() => error.to_string(),
            Some(error) => format!("{error}\n{content}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn described_args_are_compact_json_cut_after_500_characters() {
        let short = serde_json::json!({ "command": "ls", "n": 1 });
        assert_eq!(describe_args(&short), r#"{"command":"ls","n":1}"#);
        // Multi-byte characters count as one each and are never split.
        let long = serde_json::json!({ "text": "é".repeat(600) });
        let described = describe_args(&long);
        assert_eq!(described.chars().count(), 501, "{described}");
        assert!(described.starts_with(r#"{"text":"éé"#), "{described}");
        assert!(described.ends_with("é…"), "{described}");
    }

    #[test]
    fn log_lines_below_the_threshold_or_without_one_are_not_sent() {
        let threshold = Arc::new(LogThreshold::default());
        let (notices, mut receiver) = Notices::channel(threshold.clone());
        notices.log(LogLevel::Error, "p", "before any level");
        assert!(
            receiver.try_recv().is_err(),
            "no level set: nothing is sent"
        );
        threshold.set(Some(LogLevel::Info));
        notices.log(LogLevel::Debug, "p", "debug");
        notices.log(LogLevel::Info, "p", "info");
        notices.log(LogLevel::Warning, "p", "warning");
        let sent: Vec<String> = std::iter::from_fn(|| receiver.try_recv().ok())
            .map(|notice| match notice {
                Notice::Log { message, .. } => message,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sent, ["info", "warning"]);
    }

    #[test]
    fn progress_fractions_are_clamped_and_a_full_queue_drops_instead_of_waiting() {
        let (notices, mut receiver) = Notices::channel(Arc::default());
        notices.progress(Some(1.5), None);
        notices.progress(Some(f64::NAN), Some("nan".into()));
        assert_eq!(
            receiver.try_recv().unwrap(),
            Notice::Progress {
                fraction: Some(1.0),
                message: None
            }
        );
        assert_eq!(
            receiver.try_recv().unwrap(),
            Notice::Progress {
                fraction: None,
                message: Some("nan".into())
            }
        );
        for _ in 0..NOTICE_QUEUE + 10 {
            notices.progress(Some(0.5), None);
        }
        assert_eq!(
            std::iter::from_fn(|| receiver.try_recv().ok()).count(),
            NOTICE_QUEUE
        );
        Notices::default().progress(Some(0.5), None);
    }

    #[test]
    fn the_text_joins_text_items_after_the_error_line() {
        let mut result = CallResult::failed(ToolError::new(crate::error::ErrorCode::Internal, "x"));
        result.content = vec![
            ContentItem::Text("a".into()),
            ContentItem::Image(Binary {
                data: vec![1, 2, 3],
                mime_type: "image/png".into(),
            }),
            ContentItem::Text("b".into()),
        ];
        assert_eq!(result.text(), "INTERNAL: x\na\nb");
        assert_eq!(result.content_bytes(), 5);
    }
}
