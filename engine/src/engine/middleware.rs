//! The middleware world's `next`: what a middleware instance holds of its call (the rest
//! of the call below it, [`RestOfCall`]) and the host side of `next.run`. The pipeline
//! (a layer above) builds the rest; the engine only runs it, counts the runs of every
//! middleware of the call together against `[limits] max_next_runs`, and stops the
//! middleware that asks past it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker};

use super::store::CallState;
use crate::bindings::dsh::plugin::types as wit;
use crate::bindings::middleware::dsh::plugin::next;
use crate::call::CallResult;
use crate::error::{ErrorCode, ToolError};

/// A run of the rest of a call, as a future that owns what it needs.
pub type RestFuture = Pin<Box<dyn Future<Output = CallResult> + Send>>;

/// The rest of one call below a middleware: the middleware after it, then the execute
/// stage's own timeout and retry around the tool.
pub trait Rest: Send + Sync {
    /// Runs it once; `deadline`: when it passes first, the run is dropped (every process
    /// it started killed) and the result is a `TIMEOUT`.
    fn run(&self, deadline: Option<Duration>) -> RestFuture;
}

/// What a middleware instance holds of its call.
#[derive(Clone)]
pub struct RestOfCall {
    pub rest: Arc<dyn Rest>,
    /// Runs of the rest made by every middleware of the call so far.
    pub runs: Arc<AtomicU32>,
    /// The most runs allowed ([`crate::config::Limits::max_next_runs`]).
    pub cap: u32,
}

/// Why a middleware was stopped: it ran the rest of the call past the cap.
#[derive(Debug, thiserror::Error)]
#[error("the middleware asked to run the rest of the call more than {0} times")]
pub struct PastNextCap(pub u32);

/// Adds `dsh:plugin/next` to `linker`.
pub fn add_to_linker(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    next::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)
}

impl next::Host for CallState {
    async fn run(&mut self, deadline_ms: Option<u32>) -> wasmtime::Result<wit::ToolResult> {
        let Some(below) = self.rest.clone() else {
            // Only a middleware is given the rest of a call (and only it may import
            // `next`: the engine refuses any other plugin that does).
            return Ok(CallResult::failed(ToolError::new(
                ErrorCode::Internal,
                format!(
                    "plugin {} called next.run outside a middleware's call",
                    self.plugin
                ),
            ))
            .into());
        };
        let runs = below.runs.fetch_add(1, Ordering::AcqRel) + 1;
        if runs > below.cap {
            self.stopped = Some(ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "middleware {} was stopped: it asked to run the rest of the call a {}th time, past [limits] max_next_runs = {}",
                    self.plugin, runs, below.cap
                ),
            ));
            return Err(PastNextCap(below.cap).into());
        }
        let started = Instant::now();
        let result = below
            .rest
            .run(deadline_ms.map(|ms| Duration::from_millis(u64::from(ms))))
            .await;
        let took = started.elapsed();
        self.host_time += took;
        self.in_next += took;
        Ok(result.into())
    }
}
