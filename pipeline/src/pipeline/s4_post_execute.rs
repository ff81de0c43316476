//! Stage 4, post-execute: WASM result filters, in the order `[pipeline] filters` gives,
//! see every result (failed ones too) before it is finalized and may replace it, e.g.
//! to mask secrets. Each runs in a fresh instance under its own bounds. A filter that
//! fails, or is configured but not loaded, withholds the result: unfiltered output
//! never reaches the model.

use crate::call::{CallContext, CallResult};
use crate::engine::plugin::{PendingCall, PluginKind};
use crate::engine::Runtime;
use crate::error::{ErrorCode, ToolError};
use crate::registry::Catalog;
use tracing::Instrument as _;

/// The configured result filters, by name, in order, with the calls each is for.
#[derive(Debug, Default)]
pub struct FilterChain {
    order: super::Selected,
}

impl FilterChain {
    pub fn new(order: super::Selected) -> Self {
        FilterChain { order }
    }

    /// Passes the result through every filter in order; `args_json` is the call's
    /// arguments as JSON text.
    pub async fn apply(
        &self,
        runtime: &Runtime,
        catalog: &Catalog,
        tool: &str,
        args_json: &str,
        context: &CallContext,
        mut result: CallResult,
    ) -> CallResult {
        if self.order.is_empty() {
            return result;
        }
        for name in self.order.for_call(tool, &context.scope) {
            let withheld = |why: String| {
                CallResult::failed(ToolError::new(
                    ErrorCode::Internal,
                    format!("the result of {tool} was withheld: result filter {name} {why}"),
                ))
            };
            let Some(filter) = catalog.stage(name, PluginKind::ResultFilter) else {
                return withheld(
                    "is configured in [pipeline] filters but is not loaded (see `dsh plugins`)"
                        .into(),
                );
            };
            let call = PendingCall {
                tool,
                args_json,
                context: context.clone(),
            };
            // Boxed, as the tool's call is (see `s3_execute`).
            let filtered = Box::pin(filter.filter(runtime, call, &result))
                .instrument(crate::traces::plugin_span("filter", name))
                .await;
            match filtered {
                Ok(None) => {}
                Ok(Some(replaced)) => result = replaced,
                Err(failure) => {
                    return withheld(format!("failed ({}: {})", failure.code, failure.message))
                }
            }
        }
        result
    }
}
