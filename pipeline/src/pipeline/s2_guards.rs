//! Stage 2, guards: WASM guard components run in the order `[pipeline] guards` gives,
//! after the gate, each in a fresh instance under its own CPU and memory bounds.
//!
//! Guards are monotonic: the first deny ends the chain and nothing later can undo it. A
//! guard that fails — traps, runs out of its budget, or is configured but not loaded —
//! denies the call, naming itself (fail closed). An `ask` goes to the call's approver
//! (a terminal prompt, a CLI flag, MCP elicitation); without one, or when it says no,
//! the call is denied. Every approval decision is written to the event log.
//!
//! A guard may also rewrite the call (`rewrite(args-json)`, contract 0.2.0): the new
//! arguments must be a JSON object that passes the tool's schema, else the call is denied
//! naming the guard and the schema error. A valid rewrite replaces the arguments: the
//! guards after it see the rewritten call, the gate checks it again, and the execute
//! stage runs it. Each rewrite is a `tool/rewrite` event in the log (call id, tool,
//! guard, the new arguments) and an info line in the host's log. A deny after a rewrite
//! is final like any other; guards before the rewriting one saw the original arguments.

use serde_json::{json, Value};
use tracing::Instrument as _;

use crate::call::{describe_args, Approval, ApprovalRequest, CallContext, CallRequest};
use crate::engine::plugin::{PendingCall, PluginKind, Verdict};
use crate::engine::Runtime;
use crate::error::{ErrorCode, ToolError};
use crate::registry::{Catalog, RegisteredTool};
use crate::session::EventLog;

/// Arguments a guard rewrote a call to, with their JSON text.
pub struct Rewrite {
    pub args: Value,
    pub args_json: String,
}

/// The configured guards, by name, in order, with the calls each is for.
#[derive(Debug, Default)]
pub struct GuardChain {
    order: super::Selected,
}

fn denied(message: String) -> ToolError {
    ToolError::new(ErrorCode::Denied, message)
}

impl GuardChain {
    pub fn new(order: super::Selected) -> Self {
        GuardChain { order }
    }

    /// Runs every guard in order until one denies; `args_json` is the request's
    /// arguments as JSON text. `Ok(Some(rewrite))`: a guard rewrote the arguments
    /// (validated against `tool`'s schema, path arguments normalized); `Ok(None)`: they
    /// stand.
    #[allow(clippy::too_many_arguments)] // the call's parts, each from its own owner
    pub async fn check(
        &self,
        runtime: &Runtime,
        catalog: &Catalog,
        asking: Asking<'_>,
        request: &CallRequest,
        args_json: &str,
        tool: &RegisteredTool,
        context: &CallContext,
    ) -> Result<Option<Rewrite>, ToolError> {
        let events = asking.events;
        if self.order.is_empty() {
            return Ok(None);
        }
        let tool_name = tool.spec.name.as_str();
        let mut rewritten: Option<Rewrite> = None;
        for name in self.order.for_call(tool_name, &context.scope) {
            let args_json = rewritten
                .as_ref()
                .map_or(args_json, |rewrite| rewrite.args_json.as_str());
            let Some(guard) = catalog.stage(name, PluginKind::Guard) else {
                return Err(denied(format!(
                    "guard {name} is configured in [pipeline] guards but is not loaded (see `dsh plugins`), so every call is denied"
                )));
            };
            let call = PendingCall {
                tool: tool_name,
                args_json,
                context: context.clone(),
            };
            // Boxed, as the tool's call is (see `s3_execute`).
            let verdict = Box::pin(guard.check(runtime, call))
                .instrument(crate::traces::plugin_span("guard", name))
                .await;
            match verdict {
                Ok(Verdict::Allow) => {}
                Ok(Verdict::Deny(reason)) => {
                    return Err(denied(format!("denied by guard {name}: {reason}")))
                }
                Ok(Verdict::Ask(reason)) => {
                    let args = rewritten
                        .as_ref()
                        .map_or(&request.args, |rewrite| &rewrite.args);
                    ask(&asking, request, args, name, &reason, tool_name, context).await?;
                }
                Ok(Verdict::Rewrite(new_args)) => {
                    let args = check_rewrite(tool, name, &new_args)?;
                    events.write(
                        "tool/rewrite",
                        json!({
                            "call_id": context.call_id,
                            "tool": tool_name,
                            "guard": name,
                            "args": &args,
                        }),
                    );
                    tracing::info!(
                        call = %context.call_id,
                        tool = tool_name,
                        guard = %name,
                        args = %describe_args(&args),
                        "a guard rewrote the call's arguments"
                    );
                    rewritten = Some(Rewrite {
                        args_json: args.to_string(),
                        args,
                    });
                }
                Err(failure) => {
                    return Err(denied(format!(
                        "guard {name} failed ({}: {}), and a failing guard denies the call",
                        failure.code, failure.message
                    )))
                }
            }
        }
        Ok(rewritten)
    }
}

/// The arguments guard `guard` rewrote the call to, when they are a JSON object that
/// passes the tool's schema; otherwise the denial naming the guard and what is wrong.
fn check_rewrite(tool: &RegisteredTool, guard: &str, text: &str) -> Result<Value, ToolError> {
    let refused = |why: String| {
        denied(format!(
            "guard {guard} rewrote the arguments of {}, and the rewrite is refused: {why}",
            tool.spec.name
        ))
    };
    let args: Value =
        serde_json::from_str(text).map_err(|error| refused(format!("it is not JSON ({error})")))?;
    if !args.is_object() {
        return Err(refused(format!(
            "it is not a JSON object: {}",
            describe_args(&args)
        )));
    }
    tool.validate(&args)
        .map_err(|error| refused(error.message))?;
    Ok(crate::pipeline::paths::normalized(&tool.spec.input_schema, &args).unwrap_or(args))
}

/// Where a guard's `ask` goes: the call's approver, and the console's board.
#[derive(Clone, Copy)]
pub struct Asking<'a> {
    pub events: &'a EventLog,
    pub approvals: &'a super::approvals::ApprovalBoard,
    /// How long the console alone is waited for (`[serve] approval_timeout_ms`).
    pub console_wait: std::time::Duration,
}

/// Puts a guard's `ask` to the call's approver and to the console, takes the first
/// answer, and records the decision and who gave it.
async fn ask(
    asking: &Asking<'_>,
    request: &CallRequest,
    args: &Value,
    guard: &str,
    reason: &str,
    tool: &str,
    context: &CallContext,
) -> Result<(), ToolError> {
    let mut posted =
        asking
            .approvals
            .post(&request.owner, &context.call_id, tool, args, guard, reason);
    let asked = async {
        match &request.approver {
            Some(approver) => {
                let question = ApprovalRequest {
                    guard,
                    reason,
                    tool,
                    args,
                };
                (approver.approve(question).await, approver.channel())
            }
            None => (
                Approval::Unavailable("this caller has no way to approve".into()),
                "none",
            ),
        }
    };
    let person = |answer: super::approvals::PersonAnswer| {
        let approval = match answer.approve {
            true => Approval::Approved,
            false => Approval::Denied,
        };
        (approval, "console", answer.note)
    };
    let (approval, channel, note) = match posted.as_mut() {
        None => {
            let (approval, channel) = asked.await;
            (approval, channel, None)
        }
        Some(posted) => {
            let wait = asking.console_wait;
            tokio::select! {
                (approval, channel) = asked => match approval {
                    // Nobody the call could ask: the console alone answers.
                    Approval::Unavailable(why) => match posted.answered(wait).await {
                        Some(answer) => person(answer),
                        None => (
                            Approval::Unavailable(format!(
                                "{why}, and nobody answered in the console within {} s",
                                wait.as_secs()
                            )),
                            channel,
                            None,
                        ),
                    },
                    approval => (approval, channel, None),
                },
                Some(answer) = posted.answered(wait) => person(answer),
            }
        }
    };
    drop(posted);
    let events = asking.events;
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
            "owner": &*request.owner,
            "note": note,
        }),
    );
    match approval {
        Approval::Approved => Ok(()),
        Approval::Denied => Err(denied(match &note {
            Some(note) if !note.is_empty() => format!(
                "guard {guard} asked for approval ({reason}) and it was refused: {note}"
            ),
            _ => format!("guard {guard} asked for approval ({reason}) and it was refused"),
        })),
        Approval::Unavailable(why) => Err(denied(format!(
            "approval required: guard {guard} asks for approval ({reason}), and none could be given: {why}"
        ))),
    }
}
