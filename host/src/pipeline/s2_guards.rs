//! Stage 2, guards: WASM guard components run in the order `[pipeline] guards` gives,
//! after the gate, each in a fresh instance under its own CPU and memory bounds.
//!
//! Guards are monotonic: the first deny ends the chain and nothing later can undo it. A
//! guard that fails — traps, runs out of its budget, or is configured but not loaded —
//! denies the call, naming itself (fail closed). An `ask` goes to the call's approver
//! (a terminal prompt, a CLI flag, MCP elicitation); without one, or when it says no,
//! the call is denied. Every approval decision is written to the event log.

use serde_json::json;

use crate::call::{Approval, ApprovalRequest, CallContext, CallRequest};
use crate::engine::plugin::{PendingCall, PluginKind, Verdict};
use crate::engine::Runtime;
use crate::error::{ErrorCode, ToolError};
use crate::registry::Catalog;
use crate::session::EventLog;

/// The configured guards, by name, in order.
#[derive(Debug, Default)]
pub struct GuardChain {
    order: Vec<String>,
}

fn denied(message: String) -> ToolError {
    ToolError::new(ErrorCode::Denied, message)
}

impl GuardChain {
    pub fn new(order: Vec<String>) -> Self {
        GuardChain { order }
    }

    /// Runs every guard in order until one denies.
    pub async fn check(
        &self,
        runtime: &Runtime,
        catalog: &Catalog,
        events: &EventLog,
        request: &CallRequest,
        tool: &str,
        context: &CallContext,
    ) -> Result<(), ToolError> {
        if self.order.is_empty() {
            return Ok(());
        }
        let args_json = request.args.to_string();
        for name in &self.order {
            let Some(guard) = catalog.stage(name, PluginKind::Guard) else {
                return Err(denied(format!(
                    "guard {name} is configured in [pipeline] guards but is not loaded (see `dsh plugins`), so every call is denied"
                )));
            };
            let call = PendingCall {
                tool,
                args_json: &args_json,
                context: context.clone(),
            };
            match guard.check(runtime, call).await {
                Ok(Verdict::Allow) => {}
                Ok(Verdict::Deny(reason)) => {
                    return Err(denied(format!("denied by guard {name}: {reason}")))
                }
                // Rewrites are not applied yet (the pipeline's part of contract 0.2.0):
                // a guard that asks for one denies the call, failing closed.
                Ok(Verdict::Rewrite(_)) => {
                    return Err(denied(format!(
                        "guard {name} asked to rewrite the call, which this dsh does not apply yet"
                    )))
                }
                Ok(Verdict::Ask(reason)) => {
                    ask(events, request, name, &reason, tool, context).await?;
                }
                Err(failure) => {
                    return Err(denied(format!(
                        "guard {name} failed ({}: {}), and a failing guard denies the call",
                        failure.code, failure.message
                    )))
                }
            }
        }
        Ok(())
    }
}

/// Puts a guard's `ask` to the call's approver and records the decision.
async fn ask(
    events: &EventLog,
    request: &CallRequest,
    guard: &str,
    reason: &str,
    tool: &str,
    context: &CallContext,
) -> Result<(), ToolError> {
    let (approval, channel) = match &request.approver {
        Some(approver) => {
            let question = ApprovalRequest {
                guard,
                reason,
                tool,
                args: &request.args,
            };
            (approver.approve(question).await, approver.channel())
        }
        None => (
            Approval::Unavailable("this caller has no way to approve".into()),
            "none",
        ),
    };
    let decision = match &approval {
        Approval::Approved => "approved",
        Approval::Denied => "denied",
        Approval::Unavailable(_) => "unavailable",
    };
    events.write(
        "approval",
        json!({
            "call_id": context.call_id,
            "tool": tool,
            "guard": guard,
            "reason": reason,
            "decision": decision,
            "channel": channel,
        }),
    );
    match approval {
        Approval::Approved => Ok(()),
        Approval::Denied => Err(denied(format!(
            "guard {guard} asked for approval ({reason}) and it was refused"
        ))),
        Approval::Unavailable(why) => Err(denied(format!(
            "approval required: guard {guard} asks for approval ({reason}), and none could be given: {why}"
        ))),
    }
}
