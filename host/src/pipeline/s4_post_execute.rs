//! Stage 4, post-execute: result filters, in configured order, may inspect or replace a
//! result before it is finalized (e.g. redact secrets).

use crate::call::{CallContext, CallResult};

/// A boxed filter future.
pub type FilterFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = CallResult> + Send + 'a>>;

/// One result filter.
pub trait ResultFilter: Send + Sync {
    fn name(&self) -> &str;
    fn filter<'a>(
        &'a self,
        tool: &'a str,
        context: &'a CallContext,
        result: CallResult,
    ) -> FilterFuture<'a>;
}

/// The configured filters, in order.
#[derive(Default)]
pub struct FilterChain {
    filters: Vec<Box<dyn ResultFilter>>,
}

impl FilterChain {
    pub fn new(filters: Vec<Box<dyn ResultFilter>>) -> Self {
        FilterChain { filters }
    }

    /// Passes the result through every filter in order.
    pub async fn apply(
        &self,
        tool: &str,
        context: &CallContext,
        mut result: CallResult,
    ) -> CallResult {
        for filter in &self.filters {
            result = filter.filter(tool, context, result).await;
        }
        result
    }
}
