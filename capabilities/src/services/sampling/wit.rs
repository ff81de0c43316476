//! The `dsh:plugin/sampling` binding: a plugin's request sent to the client of the call
//! in flight, its answer read back as text.

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::sampling::{
    self as interface, CreateMessageRequest, CreateMessageResult, Host, Role,
};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::call::{SampleContent, SampleMessage, SampleRequest, SampleRole};
use crate::error::{ErrorCode, ToolError};
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = super::SamplingCapability;

/// Adds `dsh:plugin/sampling` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.sampling)
    })
}

impl Host for CallCtx<'_, Own> {
    async fn create_message(
        &mut self,
        request: CreateMessageRequest,
    ) -> Result<CreateMessageResult, WitToolError> {
        if request.messages.is_empty() || request.max_tokens == 0 {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                "a sampling request needs at least one message and max-tokens above 0",
            )
            .into());
        }
        let sampler = match &self.call.sampler {
            Some(sampler) if sampler.can_sample() => sampler.clone(),
            Some(_) => {
                return Err(ToolError::new(
                    ErrorCode::SamplingUnavailable,
                    "the MCP client did not declare sampling (capabilities.sampling), so dsh cannot ask its model",
                )
                .into())
            }
            None => {
                return Err(ToolError::new(
                    ErrorCode::SamplingUnavailable,
                    "this call has no MCP client to ask for a model's answer (`dsh call` has none)",
                )
                .into())
            }
        };
        let request = SampleRequest {
            system: request.system_prompt,
            messages: request
                .messages
                .into_iter()
                .map(|message| SampleMessage {
                    role: match message.role {
                        Role::User => SampleRole::User,
                        Role::Assistant => SampleRole::Assistant,
                    },
                    content: vec![SampleContent::Text(message.text)],
                })
                .collect(),
            tools: Vec::new(),
            max_tokens: request.max_tokens.min(self.service.config.max_tokens),
            wait: std::time::Duration::from_millis(self.service.config.timeout_ms),
        };
        tracing::info!(
            plugin = self.plugin,
            call = %self.call.call_id,
            messages = request.messages.len(),
            max_tokens = request.max_tokens,
            "a plugin asks the client's model"
        );
        let reply = self
            .host_call("sampling.sample", sampler.sample(&request))
            .await;
        let reply = reply.map_err(|error| error.to_tool_error(ErrorCode::SamplingUnavailable))?;
        let text: Vec<String> = reply
            .content
            .into_iter()
            .map(|content| match content {
                SampleContent::Text(text) => text,
                SampleContent::ToolUse { name, .. } => format!("[tool use {name}]"),
                SampleContent::ToolResult { .. } => "[tool result]".into(),
            })
            .collect();
        Ok(CreateMessageResult {
            text: text.join("\n"),
            model: reply.model,
            stop_reason: reply.stop_reason,
        })
    }
}
