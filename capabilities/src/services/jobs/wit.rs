//! The `dsh:plugin/jobs` binding: the caller's owner (from the call context, never from
//! the plugin) scopes every list, read and kill. A read that waits lends the job its
//! call's client (a background subagent asks the model through it); a running job's
//! note is its `reason`.

use std::time::{Duration, UNIX_EPOCH};

use std::sync::Arc;

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::jobs::{
    self as interface, Host, JobInfo as WitJobInfo, JobOutput, JobState as WitJobState,
    KillReport as WitKillReport, OutputRequest,
};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = Arc<super::JobRegistry>;

use super::{JobInfo, JobState};

/// `job_output` returns at most this much unless asked for less.
const DEFAULT_MAX_BYTES: u64 = 30_000;

fn to_wit(info: JobInfo) -> WitJobInfo {
    let (state, exit_code, signal, reason) = match info.state {
        JobState::Running => (WitJobState::Running, None, None, info.note),
        JobState::Exited { code } => (WitJobState::Exited, Some(code), None, None),
        JobState::Killed { signal, reason } => (WitJobState::Killed, None, Some(signal), reason),
        JobState::Failed { reason } => (WitJobState::Failed, None, None, Some(reason)),
    };
    WitJobInfo {
        id: info.id,
        kind: info.kind,
        state,
        description: info.description,
        command: info.command,
        started_at_ms: info
            .started_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        runtime_ms: info.runtime.as_millis() as u64,
        exit_code,
        signal,
        reason,
    }
}

/// Adds `dsh:plugin/jobs` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.jobs)
    })
}

/// A 0.1.0 plugin's `jobs` is served by this binding.
impl<T: CallView + 'static> crate::bindings::v0_1_0::LatestJobs for T {
    type Host<'a>
        = CallCtx<'a, Own>
    where
        T: 'a;

    fn latest(&mut self) -> CallCtx<'_, Own> {
        self.call_ctx().narrow(|services| &services.jobs)
    }
}

impl Host for CallCtx<'_, Own> {
    async fn list(&mut self) -> Vec<WitJobInfo> {
        self.service
            .list(&self.call.owner)
            .into_iter()
            .map(to_wit)
            .collect()
    }

    async fn output(&mut self, request: OutputRequest) -> Result<JobOutput, WitToolError> {
        let (jobs, call) = (self.service, self.call);
        let read = self
            .host_call(
                "jobs.output",
                jobs.output_lending(
                    &call.owner,
                    &request.id,
                    request.since,
                    request
                        .max_bytes
                        .map(u64::from)
                        .unwrap_or(DEFAULT_MAX_BYTES)
                        .max(1),
                    Duration::from_millis(request.wait_ms.unwrap_or(0).into()),
                    call.sampler.clone(),
                ),
            )
            .await?;
        // The output's first line says when the spill failed (the cursor counts output
        // bytes only).
        let output = match read.spill_failed {
            Some(note) => format!("{note}\n{}", read.output),
            None => read.output,
        };
        Ok(JobOutput {
            info: to_wit(read.info),
            output,
            omitted_bytes: read.omitted_bytes,
            next_cursor: read.next_cursor,
            full_output_path: read.full_output_path.display().to_string(),
        })
    }

    async fn kill(
        &mut self,
        id: String,
        signal: Option<String>,
    ) -> Result<WitKillReport, WitToolError> {
        let (jobs, call) = (self.service, self.call);
        let report = self
            .host_call(
                "jobs.kill",
                jobs.kill(&call.owner, &id, signal.as_deref().unwrap_or("TERM")),
            )
            .await?;
        Ok(WitKillReport {
            info: to_wit(report.info),
            sent: report.sent,
            signal: report.signal.to_string(),
            escalated: report.escalated,
            waited_ms: report.waited.as_millis() as u64,
        })
    }
}
