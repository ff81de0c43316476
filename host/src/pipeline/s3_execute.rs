//! Stage 3, execute: dispatch to the plugin in a fresh instance, wrapped by middleware.
//! The timeout middleware bounds the whole call; when it fires, the call's future is
//! dropped, which kills every process the call started.

use std::time::Duration;

use serde_json::Value;

use crate::call::{CallContext, CallResult};
use crate::engine::Runtime;
use crate::error::{ErrorCode, ToolError};
use crate::registry::RegisteredTool;

/// Runs the tool under the timeout middleware.
pub async fn execute(
    runtime: &Runtime,
    tool: &RegisteredTool,
    context: CallContext,
    args: &Value,
    timeout: Duration,
) -> CallResult {
    let args_json = args.to_string();
    let dispatch = tool
        .plugin
        .call(runtime, context, &tool.spec.name, &args_json);
    match tokio::time::timeout(timeout, dispatch).await {
        Ok(result) => result,
        Err(_) => CallResult::failed(ToolError::new(
            ErrorCode::Timeout,
            format!(
                "{} did not finish within the call timeout of {} ms",
                tool.spec.name,
                timeout.as_millis()
            ),
        )),
    }
}
