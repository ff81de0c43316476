//! The shapes of one call as it passes through the host: who asked ([`CallContext`]),
//! what they asked for ([`CallRequest`]), who can approve it when a guard asks
//! ([`Approver`]) and what came back ([`CallResult`]).

use std::path::PathBuf;
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
        }
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

/// What a call produced: the only thing the model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    pub content: String,
    pub error: Option<ToolError>,
    /// File with the full output when `content` is a cut of it.
    pub full_output_path: Option<PathBuf>,
}

impl CallResult {
    pub fn ok(content: impl Into<String>) -> Self {
        CallResult {
            content: content.into(),
            error: None,
            full_output_path: None,
        }
    }

    pub fn failed(error: ToolError) -> Self {
        CallResult {
            content: String::new(),
            error: Some(error),
            full_output_path: None,
        }
    }

    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }

    /// The text the model reads: the error line first (when the call failed), then the
    /// content.
    pub fn text(&self) -> String {
        match &self.error {
            None => self.content.clone(),
            Some(error) if self.content.is_empty() => error.to_string(),
            Some(error) => format!("{error}\n{}", self.content),
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
}
