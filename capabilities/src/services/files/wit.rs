//! The `dsh:plugin/files` binding: the call's owner, workdir and record of what it read
//! go to the service with the arguments, one to one; the service's blocking file I/O runs
//! on tokio's blocking pool (never on the executor), its wall time counted as host time.

use std::path::Path;
use std::sync::Arc;

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::files::{
    self as interface, Change as WitChange, Changed as WitChanged, FileLines as WitFileLines,
    FileRead as WitFileRead, Host,
};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::error::{ErrorCode, ToolError};
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = Arc<super::FileService>;

use super::{CallReads, Change};

/// Adds `dsh:plugin/files` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.files)
    })
}

impl CallCtx<'_, Own> {
    /// Runs `work` on tokio's blocking pool (never on the executor) as the host call
    /// `name`, with the service and the call's owner, workdir and record of what it read.
    async fn file_work<R: Send + 'static>(
        &mut self,
        name: &'static str,
        work: impl FnOnce(&super::FileService, &str, &Path, &CallReads) -> Result<R, ToolError>
            + Send
            + 'static,
    ) -> Result<R, ToolError> {
        let service = self.service.clone();
        let (owner, workdir) = (self.call.owner.clone(), self.call.workdir.clone());
        let call = self.scratch.get::<Arc<CallReads>>().clone();
        let done = tokio::task::spawn_blocking(move || work(&service, &owner, &workdir, &call));
        self.host_call(name, done).await.unwrap_or_else(|error| {
            Err(ToolError::new(
                ErrorCode::Internal,
                format!("the file operation did not finish: {error}"),
            ))
        })
    }
}

impl Host for CallCtx<'_, Own> {
    async fn read(
        &mut self,
        path: String,
        max_bytes: u64,
        remember: bool,
    ) -> Result<WitFileRead, WitToolError> {
        let read = self
            .file_work("files.read", move |service, owner, workdir, call| {
                service.read(owner, workdir, &path, max_bytes, remember, call)
            })
            .await?;
        Ok(WitFileRead {
            path: read.path,
            contents: read.contents,
            mode: read.mode,
        })
    }

    async fn read_lines(
        &mut self,
        path: String,
        max_bytes: u64,
        remember: bool,
        first: u64,
        count: u32,
    ) -> Result<WitFileLines, WitToolError> {
        let read = self
            .file_work("files.read-lines", move |service, owner, workdir, call| {
                service.read_lines(
                    owner,
                    workdir,
                    &path,
                    max_bytes,
                    remember,
                    (first, count),
                    call,
                )
            })
            .await?;
        Ok(WitFileLines {
            path: read.path,
            mode: read.mode,
            size: read.size,
            head: read.head,
            invalid_utf8_at: read.invalid_utf8_at,
            total_lines: read.total_lines,
            crlf_lines: read.crlf_lines,
            final_newline: read.final_newline,
            lines: read.lines,
        })
    }

    async fn commit(&mut self, changes: Vec<WitChange>) -> Result<Vec<WitChanged>, WitToolError> {
        let changes = changes
            .into_iter()
            .map(|change| match change {
                WitChange::Write(write) => Change::Write {
                    path: write.path,
                    contents: write.contents,
                    mode_from: write.mode_from,
                },
                WitChange::Remove(path) => Change::Remove(path),
            })
            .collect();
        let changed = self
            .file_work("files.commit", move |service, owner, workdir, call| {
                service.commit(owner, workdir, changes, call)
            })
            .await?;
        Ok(changed
            .into_iter()
            .map(|c| WitChanged {
                path: c.path,
                created: c.created,
                bytes: c.bytes,
            })
            .collect())
    }
}
