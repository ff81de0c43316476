//! The `dsh:plugin/undo` binding: the caller's owner and session go with each request,
//! so a plugin reaches its caller's own records only; the work runs on tokio's blocking
//! pool (it reads and writes files), its wall time counted as host time.

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::bindings::dsh::plugin::undo::{self as interface, Host};
use crate::error::{ErrorCode, ToolError};
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

use super::{Asker, CallRef, UndoService};

/// Adds `dsh:plugin/undo` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<UndoService>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.undo)
    })
}

impl CallCtx<'_, UndoService> {
    fn asker(&self) -> Asker {
        Asker::Owner {
            owner: self.call.owner.clone(),
            session: self.call.session.clone(),
        }
    }
}

impl Host for CallCtx<'_, UndoService> {
    async fn checkpoints(&mut self, limit: u32) -> String {
        let recorder = self.service.recorder.clone();
        let asker = self.asker();
        let limit = limit.clamp(1, 100) as usize;
        let list = self
            .host_call(
                "undo.checkpoints",
                tokio::task::spawn_blocking(move || recorder.checkpoints(&asker, limit)),
            )
            .await
            .unwrap_or_default();
        serde_json::Value::Array(list).to_string()
    }

    async fn undo(&mut self, call_id: String, and_later: bool) -> Result<String, WitToolError> {
        if call_id.is_empty() || call_id.contains("..") || call_id.len() > 200 {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!(
                    "{call_id:?} is no call id (call-N, or SESSION/call-N as checkpoints lists it)"
                ),
            )
            .into());
        }
        let recorder = self.service.recorder.clone();
        let asker = self.asker();
        let within = CallRef::of(self.call);
        let done = self
            .host_call(
                "undo.undo",
                tokio::task::spawn_blocking(move || {
                    recorder.undo(&asker, &call_id, and_later, Some(&within))
                }),
            )
            .await
            .unwrap_or_else(|error| {
                Err(ToolError::new(
                    ErrorCode::Internal,
                    format!("the undo did not finish: {error}"),
                ))
            })?;
        Ok(done.to_string())
    }
}
