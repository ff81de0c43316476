//! The `dsh:plugin/process` binding: turns a plugin's `run` request into a
//! [`RunSpec`](super::RunSpec) for the call's owner, workdir and executor (from its
//! scope and tool, `[process.executor]`), and its outcome back: a sandboxed run's output
//! ends with its `[sandbox: …]` line, which the bash plugin follows with `[exit code: N]`.

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::process::{
    self as interface, BackgroundRequest, Host, RunOutcome, RunRequest,
};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::error::ToolError;
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = super::ProcessService;

use super::RunSpec;

/// Adds `dsh:plugin/process` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.process)
    })
}

/// A 0.1.0 plugin's `process` is served by this binding.
impl<T: CallView + 'static> crate::bindings::v0_1_0::LatestProcess for T {
    type Host<'a>
        = CallCtx<'a, Own>
    where
        T: 'a;

    fn latest(&mut self) -> CallCtx<'_, Own> {
        self.call_ctx().narrow(|services| &services.process)
    }
}

impl Host for CallCtx<'_, Own> {
    async fn run(&mut self, request: RunRequest) -> Result<RunOutcome, WitToolError> {
        let result = self.run_process(request).await;
        result.map_err(|e| e.into())
    }

    async fn start(&mut self, request: BackgroundRequest) -> Result<String, WitToolError> {
        let cwd = match request.workdir.as_deref() {
            None => self.call.workdir.clone(),
            Some(dir) => self.call.workdir.join(dir),
        };
        let span = crate::traces::host_call_span("process.start").entered();
        let job = self.service.start_background(
            &self.foundation.jobs,
            self.call.owner.clone(),
            request.command,
            cwd,
            request.env,
            request.description,
            self.executor(),
            self.network(),
        )?;
        drop(span);
        // What the job changes in the workspace is this call's doing.
        self.record_job_under_this_call(&job).await;
        Ok(job)
    }
}

impl CallCtx<'_, Own> {
    async fn run_process(&mut self, request: RunRequest) -> Result<RunOutcome, ToolError> {
        let cwd = match request.workdir.as_deref() {
            None => self.call.workdir.clone(),
            Some(dir) => self.call.workdir.join(dir),
        };
        let spec = RunSpec {
            owner: self.call.owner.clone(),
            command: request.command,
            cwd,
            timeout: std::time::Duration::from_millis(request.timeout_ms),
            capture_bytes: request.capture_bytes as usize,
            spill_path: self.call.spill_path("output"),
            spill_cap: self.call.spill_cap,
            env: request.env,
            executor: self.executor(),
            network: self.network(),
        };
        let process = self.service;
        let outcome = self
            .host_call("process.run", process.run(spec))
            .await
            .map_err(ToolError::from)?;
        let mut output = outcome.output.text;
        if let Some(marker) = &outcome.sandbox {
            if !output.is_empty() && !output.ends_with('\n') {
                output.push('\n');
            }
            output.push_str(marker);
            output.push('\n');
        }
        Ok(RunOutcome {
            output,
            total_bytes: outcome.output.total_bytes,
            full_output_path: outcome
                .output
                .full_output_path
                .map(|p| p.display().to_string()),
            exit_code: outcome.exit_code,
            signal: outcome.signal,
            timed_out: outcome.timed_out,
            duration_ms: outcome.duration.as_millis() as u64,
        })
    }
}
