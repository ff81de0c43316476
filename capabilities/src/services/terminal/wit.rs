//! The `dsh:plugin/terminal` binding: the caller's owner (from the call context) scopes
//! every operation; relative paths resolve against the call's workdir.

use std::time::{Duration, UNIX_EPOCH};

use std::sync::Arc;

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::terminal::{
    self as interface, Host, OpenRequest, ReadRequest, ReadResult, SendRequest, SendResult,
    SessionInfo as WitSessionInfo, View as WitView,
};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::error::{ErrorCode, ToolError};
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = Arc<super::TerminalService>;

use super::{OpenSpec, SendWait, SessionInfo, View};

const DEFAULT_QUIET_MS: u32 = 300;
const DEFAULT_TIMEOUT_MS: u32 = 10_000;
const DEFAULT_READ_BYTES: u32 = 30_000;

fn to_wit(info: SessionInfo) -> WitSessionInfo {
    WitSessionInfo {
        id: info.id,
        shell: info.shell,
        cwd: info.cwd.display().to_string(),
        cols: info.cols,
        rows: info.rows,
        created_at_ms: info
            .created_at
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        alive: info.alive,
        exit_code: info.exit_code,
        foreground: info.foreground,
    }
}

/// Adds `dsh:plugin/terminal` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.terminal)
    })
}

/// A 0.1.0 plugin's `terminal` is served by this binding.
impl<T: CallView + 'static> crate::bindings::v0_1_0::LatestTerminal for T {
    type Host<'a>
        = CallCtx<'a, Own>
    where
        T: 'a;

    fn latest(&mut self) -> CallCtx<'_, Own> {
        self.call_ctx().narrow(|services| &services.terminal)
    }
}

impl Host for CallCtx<'_, Own> {
    async fn open(&mut self, request: OpenRequest) -> Result<WitSessionInfo, WitToolError> {
        let cwd = match request.cwd.as_deref() {
            None => self.call.workdir.clone(),
            Some(dir) => self.call.workdir.join(dir),
        };
        let spec = OpenSpec {
            cwd,
            env: request.env,
            shell: request.shell,
            cols: request.cols.unwrap_or(120).clamp(10, 1000),
            rows: request.rows.unwrap_or(40).clamp(2, 500),
            executor: self.executor(),
            network: self.network(),
        };
        let span = crate::traces::host_call_span("terminal.open").entered();
        let info = self.service.open(self.call.owner.clone(), spec)?;
        drop(span);
        // What the shell changes until the first send (its start-up files) is this call's.
        let hold = self
            .foundation
            .undo
            .hold_async(crate::services::undo::CallRef::of(self.call))
            .await;
        self.service
            .hold_workspace_changes(&self.call.owner, &info.id, hold);
        Ok(to_wit(info))
    }

    async fn send(&mut self, request: SendRequest) -> Result<SendResult, WitToolError> {
        let pattern = match request.pattern.as_deref() {
            None => None,
            Some(pattern) => Some(self.service.wait_pattern(pattern).map_err(|e| {
                ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!("pattern is not a valid regex: {e}"),
                )
            })?),
        };
        let wait = SendWait {
            quiet: Duration::from_millis(request.quiet_ms.unwrap_or(DEFAULT_QUIET_MS).into()),
            pattern,
            timeout: Duration::from_millis(request.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS).into()),
        };
        let terminal = self.service.clone();
        let owner = self.call.owner.clone();
        // What the shell changes from now on is this call's doing (until the next send).
        let hold = self
            .foundation
            .undo
            .hold_async(crate::services::undo::CallRef::of(self.call))
            .await;
        terminal.hold_workspace_changes(&owner, &request.id, hold);
        let outcome = self
            .host_call(
                "terminal.send",
                terminal.send(
                    &owner,
                    &request.id,
                    &request.input,
                    request.enter,
                    wait,
                    request.background,
                ),
            )
            .await?;
        Ok(SendResult {
            output: outcome.output,
            settled: outcome.settled.to_string(),
            next_cursor: outcome.next_cursor,
            job: outcome.job,
            alive: outcome.alive,
            exit_code: outcome.exit_code,
        })
    }

    async fn read(&mut self, request: ReadRequest) -> Result<ReadResult, WitToolError> {
        let view = match request.view {
            WitView::Screen => View::Screen,
            WitView::Plain => View::Plain,
            WitView::Raw => View::Raw,
        };
        let read = self.service.read(
            &self.call.owner,
            &request.id,
            view,
            request.since.unwrap_or(0),
            request.max_bytes.unwrap_or(DEFAULT_READ_BYTES).max(1) as usize,
        )?;
        Ok(ReadResult {
            text: read.text,
            next_cursor: read.next_cursor,
            omitted_bytes: read.omitted_bytes,
            exit_code: read.exit_code,
        })
    }

    async fn signal(&mut self, id: String, signal: String) -> Result<String, WitToolError> {
        Ok(self.service.signal(&self.call.owner, &id, &signal)?)
    }

    async fn close(&mut self, id: String) -> Result<String, WitToolError> {
        Ok(self.service.close(&self.call.owner, &id)?)
    }

    async fn list(&mut self) -> Vec<WitSessionInfo> {
        self.service
            .list(&self.call.owner)
            .into_iter()
            .map(to_wit)
            .collect()
    }
}
