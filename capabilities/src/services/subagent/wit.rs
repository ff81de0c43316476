//! The `dsh:plugin/subagent` binding: a run or a start for the calling owner, in the
//! caller's scope, on the model it names or its scope's.

use std::sync::Arc;

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::subagent::{
    self as interface, Host, SubagentAnswer, SubagentRequest,
};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = Arc<super::SubagentService>;

use super::Task;

/// Adds `dsh:plugin/subagent` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.subagent)
    })
}

fn task(request: SubagentRequest) -> Task {
    Task {
        prompt: request.prompt,
        tools: request.tools,
        max_turns: request.max_turns,
        timeout_ms: request.timeout_ms.map(u64::from),
        model: request.model,
    }
}

impl Host for CallCtx<'_, Own> {
    async fn run(&mut self, request: SubagentRequest) -> Result<SubagentAnswer, WitToolError> {
        let service = self.service.clone();
        let call = self.call;
        let answer = self
            .host_call("subagent.run", service.run(call, task(request)))
            .await?;
        Ok(SubagentAnswer {
            id: answer.id,
            answer: answer.answer,
            turns: answer.turns,
            model: answer.model,
            input_tokens: answer.usage.input,
            output_tokens: answer.usage.output,
        })
    }

    async fn start(&mut self, request: SubagentRequest) -> Result<String, WitToolError> {
        let span = crate::traces::host_call_span("subagent.start").entered();
        let job = self.service.start(self.call, task(request))?;
        drop(span);
        // What the subagent's steps change is this call's doing too, until it ends.
        self.record_job_under_this_call(&job).await;
        Ok(job)
    }
}
