//! Stage 2, guards: checks that run in configured order after the gate. Guards are
//! monotonic: the first deny ends the chain and nothing later can undo it. An `ask`
//! needs an approval channel; where there is none the call is denied, saying approval
//! was required.

use serde_json::Value;

use crate::call::CallContext;
use crate::error::{ErrorCode, ToolError};

/// A guard's decision on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
    Ask(String),
}

/// One guard.
pub trait Guard: Send + Sync {
    fn name(&self) -> &str;
    fn check<'a>(
        &'a self,
        tool: &'a str,
        context: &'a CallContext,
        args: &'a Value,
    ) -> VerdictFuture<'a>;
}

/// A boxed guard future.
pub type VerdictFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send + 'a>>;

/// The configured guards, in order.
#[derive(Default)]
pub struct GuardChain {
    guards: Vec<Box<dyn Guard>>,
}

impl GuardChain {
    pub fn new(guards: Vec<Box<dyn Guard>>) -> Self {
        GuardChain { guards }
    }

    /// Runs every guard in order until one denies.
    pub async fn check(
        &self,
        tool: &str,
        context: &CallContext,
        args: &Value,
    ) -> Result<(), ToolError> {
        for guard in &self.guards {
            match guard.check(tool, context, args).await {
                Verdict::Allow => {}
                Verdict::Deny(reason) => {
                    return Err(ToolError::new(ErrorCode::Denied, format!("denied by guard {}: {reason}", guard.name())))
                }
                Verdict::Ask(reason) => {
                    return Err(ToolError::new(
                        ErrorCode::Denied,
                        format!("guard {} requires approval ({reason}) and no approval channel is available", guard.name()),
                    ))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(&'static str, Verdict);

    impl Guard for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn check<'a>(&'a self, _: &'a str, _: &'a CallContext, _: &'a Value) -> VerdictFuture<'a> {
            Box::pin(async move { self.1.clone() })
        }
    }

    fn context() -> CallContext {
        CallContext {
            owner: "o".into(),
            session: "s".into(),
            call_id: "call-1".into(),
            workdir: "/".into(),
            scope: "default".into(),
            spill_dir: "/tmp".into(),
            output_budget: 100,
        }
    }

    #[tokio::test]
    async fn a_deny_is_final_and_names_the_guard() {
        let chain = GuardChain::new(vec![
            Box::new(Fixed("first", Verdict::Allow)),
            Box::new(Fixed("strict", Verdict::Deny("no".into()))),
            Box::new(Fixed("lenient", Verdict::Allow)),
        ]);
        let error = chain
            .check("bash", &context(), &Value::Null)
            .await
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Denied);
        assert!(
            error.message.contains("guard strict: no"),
            "{}",
            error.message
        );
    }

    #[tokio::test]
    async fn an_ask_without_approval_channel_is_denied() {
        let chain = GuardChain::new(vec![Box::new(Fixed(
            "asker",
            Verdict::Ask("git push".into()),
        ))]);
        let error = chain
            .check("bash", &context(), &Value::Null)
            .await
            .unwrap_err();
        assert!(
            error.message.contains("requires approval"),
            "{}",
            error.message
        );
    }

    #[tokio::test]
    async fn an_empty_chain_allows() {
        assert!(GuardChain::default()
            .check("bash", &context(), &Value::Null)
            .await
            .is_ok());
    }
}
