//! Stage 3, execute: dispatch to the plugin in a fresh instance, wrapped by middleware.
//! The tool never changes for any of it:
//!
//! - timeout: bounds the whole call, retries included; when it fires, the call's future
//!   is dropped, which kills every process the call started;
//! - retry: a tool whose spec declares it idempotent is called again (up to
//!   `[limits] max_retries` times) when it fails with a transient code; a tool that is
//!   not idempotent, like bash, is never called twice;
//! - metrics: the attempts are counted here and recorded by the observers (stage 6).

use std::time::Duration;

use crate::call::{CallContext, CallResult};
use crate::engine::Runtime;
use crate::error::{ErrorCode, ToolError};
use crate::registry::RegisteredTool;

/// Failures worth another attempt of an idempotent tool: the same call may well work.
const TRANSIENT: &[ErrorCode] = &[
    ErrorCode::Internal,
    ErrorCode::PluginTrap,
    ErrorCode::Timeout,
];

/// A call's result and how many times the tool ran for it.
pub struct Executed {
    pub result: CallResult,
    pub attempts: u32,
}

/// Runs the tool on `args_json` (its arguments as JSON text) under the timeout and
/// retry middleware.
pub async fn execute(
    runtime: &Runtime,
    tool: &RegisteredTool,
    context: CallContext,
    args_json: &str,
    timeout: Duration,
    max_retries: u32,
) -> Executed {
    let mut attempts = 0;
    let retried = async {
        loop {
            attempts += 1;
            // Boxed: the plugin call's future is kilobytes (a wasm instance's
            // instantiate and call), and every stage, span and select it is awaited
            // under would copy it whole as it is built up (see `Pipeline::call`).
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
            if !(transient && tool.spec.idempotent && attempts <= max_retries) {
                return result;
            }
            tracing::info!(
                tool = %tool.spec.name,
                attempt = attempts,
                error = %result.error.as_ref().map(ToString::to_string).unwrap_or_default(),
                "retrying an idempotent tool"
            );
        }
    };
    let result = match tokio::time::timeout(timeout, retried).await {
        Ok(result) => result,
        Err(_) => CallResult::failed(ToolError::new(
            ErrorCode::Timeout,
            format!(
                "{} did not finish within the call timeout of {} ms",
                tool.spec.name,
                timeout.as_millis()
            ),
        )),
    };
    Executed { result, attempts }
}
