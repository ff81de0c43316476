//! Stage 3, execute: dispatch to the plugin in a fresh instance, wrapped by the host's
//! own middleware and by the operator's middleware components. The tool never changes
//! for any of it. From the outside in:
//!
//! - timeout (the host's): bounds the whole stage, every middleware and retry included;
//!   when it fires, the stage's future is dropped, which kills every process the call
//!   started;
//! - the middleware components `[pipeline] middleware` selects for the call, the first
//!   outermost, each in a fresh instance under its own bounds: each decides how the rest
//!   runs (`next.run`: not at all, once, or again; under a deadline of its own, which
//!   drops that run as the timeout does). Their runs of the rest together are capped
//!   (`[limits] max_next_runs`). A middleware that fails (a trap, its CPU or memory
//!   bound, a run past the cap), or is configured but not loaded, fails the call with
//!   its own code and its name, whatever the middleware around it make of it;
//! - retry (the host's): a tool whose spec declares it idempotent is called again (up
//!   to `[limits] max_retries` times) when it fails with a transient code; a tool that
//!   is not idempotent, like bash, is never called twice by it;
//! - metrics: the tool's attempts (over every run of the rest) are counted here and
//!   recorded by the observers (stage 6), with the middleware that answered a call
//!   without running the tool, if one did.
//!
//! With no middleware for the call, the stage is the timeout around the retry, borrowed
//! from the call (no stack is built).

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::Instrument as _;

use crate::call::{CallContext, CallResult};
use crate::engine::middleware::{Rest, RestFuture, RestOfCall};
use crate::engine::plugin::{PendingCall, Plugin};
use crate::engine::Runtime;
use crate::error::{ErrorCode, ToolError};
use crate::registry::RegisteredTool;

/// Failures worth another attempt of an idempotent tool: the same call may well work.
const TRANSIENT: &[ErrorCode] = &[
    ErrorCode::Internal,
    ErrorCode::PluginTrap,
    ErrorCode::Timeout,
];

/// A call's result, how many times the tool ran for it, and the middleware that
/// answered it without running the tool, if one did.
pub struct Executed {
    pub result: CallResult,
    pub attempts: u32,
    pub answered_by: Option<Arc<str>>,
}

/// How the stage runs one call: its timeout, retries and cap on middleware runs.
#[derive(Debug, Clone, Copy)]
pub struct ExecuteLimits {
    pub timeout: Duration,
    pub max_retries: u32,
    pub max_next_runs: u32,
}

/// Runs the tool on `args_json` (its arguments as JSON text) under the timeout, the
/// `middleware` (already chosen for this call, outermost first) and the retry.
pub async fn execute(
    runtime: &Arc<Runtime>,
    middleware: Vec<Arc<Plugin>>,
    tool: &Arc<RegisteredTool>,
    context: CallContext,
    args_json: &str,
    limits: ExecuteLimits,
) -> Executed {
    let timed_out = || {
        CallResult::failed(ToolError::new(
            ErrorCode::Timeout,
            format!(
                "{} did not finish within the call timeout of {} ms",
                tool.spec.name,
                limits.timeout.as_millis()
            ),
        ))
    };
    if middleware.is_empty() {
        let attempts = AtomicU32::new(0);
        let retried = run_tool(
            runtime,
            tool,
            &context,
            args_json,
            limits.max_retries,
            &attempts,
        );
        let result = tokio::time::timeout(limits.timeout, retried)
            .await
            .unwrap_or_else(|_| timed_out());
        return Executed {
            result,
            attempts: attempts.into_inner(),
            answered_by: None,
        };
    }
    let stack = Arc::new(Stack {
        runtime: runtime.clone(),
        middleware,
        tool: tool.clone(),
        context,
        args_json: args_json.to_string(),
        max_retries: limits.max_retries,
        attempts: AtomicU32::new(0),
        runs: Arc::new(AtomicU32::new(0)),
        max_next_runs: limits.max_next_runs,
        deepest: AtomicUsize::new(0),
        failed: Mutex::new(None),
    });
    let result = tokio::time::timeout(limits.timeout, stack.clone().run_from(0))
        .await
        .unwrap_or_else(|_| timed_out());
    // A middleware that failed fails the call, whatever those around it returned.
    let failed = stack
        .failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let middleware_failed = failed.is_some();
    let result = failed.map_or(result, CallResult::failed);
    let attempts = stack.attempts.load(Ordering::Acquire);
    let timed_out_outside = result
        .error
        .as_ref()
        .is_some_and(|error| error.code == ErrorCode::Timeout);
    let answered_by = (attempts == 0 && !middleware_failed && !timed_out_outside).then(|| {
        let deepest = stack.deepest.load(Ordering::Acquire).max(1);
        stack.middleware[deepest - 1].name.clone()
    });
    Executed {
        result,
        attempts,
        answered_by,
    }
}

/// Calls the tool, and again while an idempotent tool fails with a transient code and
/// retries are left; `attempts` counts each call.
async fn run_tool(
    runtime: &Runtime,
    tool: &Arc<RegisteredTool>,
    context: &CallContext,
    args_json: &str,
    max_retries: u32,
    attempts: &AtomicU32,
) -> CallResult {
    let mut tries = 0;
    loop {
        tries += 1;
        attempts.fetch_add(1, Ordering::AcqRel);
        // Boxed: the plugin call's future is kilobytes (a wasm instance's instantiate
        // and call), and every stage, span and select it is awaited under would copy
        // it whole as it is built up (see `Pipeline::call`).
        let result =
            Box::pin(
                tool.plugin
                    .call(runtime, context.clone(), &tool.spec.name, args_json),
            )
            .await;
        let transient = result
            .error
            .as_ref()
            .is_some_and(|error| TRANSIENT.contains(&error.code));
        if !(transient && tool.spec.idempotent && tries <= max_retries) {
            return result;
        }
        tracing::info!(
            tool = %tool.spec.name,
            attempt = tries,
            error = %result.error.as_ref().map(ToString::to_string).unwrap_or_default(),
            "retrying an idempotent tool"
        );
    }
}

/// One call's execution under its middleware: what every layer of it shares.
struct Stack {
    runtime: Arc<Runtime>,
    /// The call's middleware, outermost first.
    middleware: Vec<Arc<Plugin>>,
    tool: Arc<RegisteredTool>,
    context: CallContext,
    args_json: String,
    max_retries: u32,
    /// The tool's attempts over every run.
    attempts: AtomicU32,
    /// Runs of the rest made by every middleware together.
    runs: Arc<AtomicU32>,
    max_next_runs: u32,
    /// How many middleware deep the call has gone.
    deepest: AtomicUsize,
    /// The first middleware failure: the call's result.
    failed: Mutex<Option<ToolError>>,
}

impl Stack {
    /// Runs the call from middleware `depth` inwards (past the last: the tool).
    fn run_from(self: Arc<Self>, depth: usize) -> RestFuture {
        Box::pin(async move {
            let Some(plugin) = self.middleware.get(depth) else {
                return run_tool(
                    &self.runtime,
                    &self.tool,
                    &self.context,
                    &self.args_json,
                    self.max_retries,
                    &self.attempts,
                )
                .await;
            };
            self.deepest.fetch_max(depth + 1, Ordering::AcqRel);
            let rest = RestOfCall {
                rest: Arc::new(Below {
                    stack: self.clone(),
                    depth: depth + 1,
                }),
                runs: self.runs.clone(),
                cap: self.max_next_runs,
            };
            let call = PendingCall {
                tool: &self.tool.spec.name,
                args_json: &self.args_json,
                context: self.context.clone(),
            };
            let handled = Box::pin(plugin.handle(&self.runtime, call, rest))
                .instrument(crate::traces::plugin_span("middleware", &plugin.name))
                .await;
            match handled {
                Ok(result) => result,
                Err(failure) => {
                    let failure = ToolError::new(
                        failure.code,
                        format!(
                            "middleware {} failed ({}: {}), and a failing middleware fails the call",
                            plugin.name, failure.code, failure.message
                        ),
                    );
                    let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                    failed.get_or_insert_with(|| failure.clone());
                    CallResult::failed(failure)
                }
            }
        })
    }
}

/// The rest of a call below one middleware.
struct Below {
    stack: Arc<Stack>,
    depth: usize,
}

impl Rest for Below {
    fn run(&self, deadline: Option<Duration>) -> RestFuture {
        let rest = self.stack.clone().run_from(self.depth);
        let tool = self.stack.tool.spec.name.clone();
        Box::pin(async move {
            let Some(deadline) = deadline else {
                return rest.await;
            };
            tokio::time::timeout(deadline, rest).await.unwrap_or_else(|_| {
                CallResult::failed(ToolError::new(
                    ErrorCode::Timeout,
                    format!(
                        "{tool} did not finish within the deadline of {} ms a middleware set; every process it started was killed",
                        deadline.as_millis()
                    ),
                ))
            })
        })
    }
}
