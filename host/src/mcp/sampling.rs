//! Asking the MCP client of a call: its model (`sampling/createMessage`, with `tools`
//! (protocol 2025-11-25) for the subagents, without for a
//! plugin's `dsh:plugin/sampling`) and its user (`elicitation/create` in form mode, for a
//! plugin's `dsh:plugin/elicitation`).
//!
//! A client is asked only for what it declared: `sampling.tools` for a request with
//! tools, `sampling` for one without, `elicitation` (form) for a form. Each request is
//! marked with the client request it is sent for (a `tools/call` in flight: the call
//! itself, or a `job_output` waiting on a background subagent), so over streamable HTTP
//! it goes on that request's response stream, which the client is reading, not on the
//! standalone GET stream it may never open. A request given up (the subagent was
//! killed, the call cancelled) is cancelled with `notifications/cancelled`.

#![allow(deprecated)] // sampling: see `logging` (deprecated by rmcp after SEP-2577, current in every version dsh speaks)

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CancelledNotificationParam, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema, RequestId,
    ServerRequest,
};
use rmcp::service::{ElicitationMode, OriginatingRequestId, PeerRequestOptions};
use rmcp::{RoleServer, ServiceError};
use serde_json::{json, Value};

use crate::call::{
    Approver, ElicitFuture, ElicitReply, SampleContent, SampleError, SampleFuture, SampleReply,
    SampleRequest, SampleRole, Sampler,
};

/// The client of one `tools/call`, as the subagents ask it.
#[derive(Debug)]
pub(super) struct McpSampler {
    peer: rmcp::Peer<RoleServer>,
    /// The client request the sampling requests are sent for.
    request: RequestId,
    approval_timeout: Duration,
}

impl McpSampler {
    pub(super) fn new(
        peer: rmcp::Peer<RoleServer>,
        request: RequestId,
        approval_timeout: Duration,
    ) -> Self {
        McpSampler {
            peer,
            request,
            approval_timeout,
        }
    }

    async fn ask(&self, request: &SampleRequest) -> Result<SampleReply, SampleError> {
        if !request.tools.is_empty() && !self.available() {
            return Err(SampleError::Unavailable(
                "the MCP client did not declare sampling with tools".into(),
            ));
        }
        if !self.can_sample() {
            return Err(SampleError::Unavailable(
                "the MCP client did not declare sampling".into(),
            ));
        }
        let params: CreateMessageRequestParams = serde_json::from_value(to_wire(request))
            .map_err(|e| SampleError::Failed(format!("cannot build the request: {e}")))?;
        let mut message = CreateMessageRequest::new(params);
        message
            .extensions
            .insert(OriginatingRequestId(self.request.clone()));
        match self
            .send(ServerRequest::CreateMessageRequest(message), request.wait)
            .await?
        {
            ClientResult::CreateMessageResult(result) => Ok(from_wire(
                serde_json::to_value(&result.message).unwrap_or(Value::Null),
                result.stop_reason.clone(),
                result.model.clone(),
            )),
            _ => Err(SampleError::Failed(
                "the client answered with something else than a message".into(),
            )),
        }
    }

    async fn ask_user(&self, message: &str, schema: &Value) -> Result<ElicitReply, SampleError> {
        if !self.can_elicit() {
            return Err(SampleError::Unavailable(
                "the MCP client did not declare elicitation (form mode)".into(),
            ));
        }
        let requested_schema: ElicitationSchema = serde_json::from_value(schema.clone())
            .map_err(|e| SampleError::Invalid(format!("the requested schema: {e}")))?;
        let mut request = ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_string(),
            requested_schema,
        });
        request
            .extensions
            .insert(OriginatingRequestId(self.request.clone()));
        match self
            .send(ServerRequest::ElicitRequest(request), self.approval_timeout)
            .await?
        {
            ClientResult::ElicitResult(result) => Ok(match result.action {
                ElicitationAction::Accept => {
                    ElicitReply::Accept(result.content.unwrap_or_else(|| json!({})))
                }
                ElicitationAction::Decline => ElicitReply::Decline,
                // `cancel`, and any action a later revision adds: the user did not answer.
                _ => ElicitReply::Cancel,
            }),
            _ => Err(SampleError::Failed(
                "the client answered with something else than an elicitation result".into(),
            )),
        }
    }

    /// Sends `request` and waits at most `timeout` for the answer; dropped before it
    /// comes, the client is told the request is cancelled.
    async fn send(
        &self,
        request: ServerRequest,
        timeout: Duration,
    ) -> Result<ClientResult, SampleError> {
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(timeout);
        let handle = self
            .peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| SampleError::Failed(e.to_string()))?;
        let mut pending = Pending {
            peer: self.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let answer = handle.await_response().await;
        pending.id = None;
        answer.map_err(|error| match error {
            ServiceError::Timeout { timeout } => {
                SampleError::TimedOut(format!("no answer in {} ms", timeout.as_millis()))
            }
            other => SampleError::Failed(other.to_string()),
        })
    }
}

/// A sampling request sent and not answered yet.
struct Pending {
    peer: rmcp::Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("dsh stopped waiting for the answer".into()),
                    ))
                    .await;
            });
        }
    }
}

impl Sampler for McpSampler {
    fn available(&self) -> bool {
        self.peer.supports_sampling_tools()
    }

    fn can_sample(&self) -> bool {
        self.peer
            .peer_info()
            .is_some_and(|client| client.capabilities.sampling.is_some())
    }

    fn sample<'a>(&'a self, request: &'a SampleRequest) -> SampleFuture<'a> {
        Box::pin(self.ask(request))
    }

    fn can_elicit(&self) -> bool {
        self.peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
    }

    fn elicit<'a>(&'a self, message: &'a str, schema: &'a Value) -> ElicitFuture<'a> {
        Box::pin(self.ask_user(message, schema))
    }

    fn approver(&self) -> Option<Arc<dyn Approver>> {
        Some(Arc::new(super::ElicitationApprover {
            peer: self.peer.clone(),
            timeout: self.approval_timeout,
        }))
    }
}

/// The request's params as MCP has them.
pub(super) fn to_wire(request: &SampleRequest) -> Value {
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| {
            let content: Vec<Value> = message
                .content
                .iter()
                .map(|content| match content {
                    SampleContent::Text(text) => json!({"type": "text", "text": text}),
                    SampleContent::ToolUse { id, name, input } => {
                        json!({"type": "tool_use", "id": id, "name": name, "input": input})
                    }
                    SampleContent::ToolResult {
                        tool_use_id,
                        text,
                        is_error,
                    } => json!({
                        "type": "tool_result",
                        "toolUseId": tool_use_id,
                        "content": [{"type": "text", "text": text}],
                        "isError": is_error,
                    }),
                })
                .collect();
            // One block goes as itself, as every protocol revision has it (2025-11-25
            // also takes a list, which older clients refuse).
            let content = match <[Value; 1]>::try_from(content) {
                Ok([one]) => one,
                Err(many) => Value::Array(many),
            };
            json!({
                "role": match message.role {
                    SampleRole::User => "user",
                    SampleRole::Assistant => "assistant",
                },
                "content": content,
            })
        })
        .collect();
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "inputSchema": tool.input_schema,
            })
        })
        .collect();
    let mut params = json!({
        "messages": messages,
        "maxTokens": request.max_tokens,
    });
    if !tools.is_empty() {
        params["tools"] = json!(tools);
    }
    if let Some(system) = &request.system {
        params["systemPrompt"] = json!(system);
    }
    params
}

/// The model's message as the host has it: text and tool uses (other blocks become a
/// line naming them).
pub(super) fn from_wire(message: Value, stop_reason: Option<String>, model: String) -> SampleReply {
    let blocks = match message.get("content") {
        Some(Value::Array(blocks)) => blocks.clone(),
        Some(block) => vec![block.clone()],
        None => Vec::new(),
    };
    let content = blocks
        .into_iter()
        .map(|block| match block.get("type").and_then(Value::as_str) {
            Some("text") => SampleContent::Text(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            Some("tool_use") => SampleContent::ToolUse {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                input: block.get("input").cloned().unwrap_or_else(|| json!({})),
            },
            other => SampleContent::Text(format!("[{} content]", other.unwrap_or("unknown"))),
        })
        .collect();
    SampleReply {
        content,
        stop_reason,
        model,
        usage: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{SampleMessage, SampleTool};

    #[test]
    fn a_request_is_valid_mcp_and_an_answer_reads_back() {
        let request = SampleRequest {
            system: Some("sys".into()),
            messages: vec![
                SampleMessage {
                    role: SampleRole::User,
                    content: vec![SampleContent::Text("go".into())],
                },
                SampleMessage {
                    role: SampleRole::Assistant,
                    content: vec![SampleContent::ToolUse {
                        id: "u1".into(),
                        name: "bash".into(),
                        input: json!({"command": "ls"}),
                    }],
                },
                SampleMessage {
                    role: SampleRole::User,
                    content: vec![SampleContent::ToolResult {
                        tool_use_id: "u1".into(),
                        text: "a\nb".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![SampleTool {
                name: "bash".into(),
                description: "runs".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 100,
            wait: Duration::from_secs(1),
        };
        let params: CreateMessageRequestParams =
            serde_json::from_value(to_wire(&request)).expect("rmcp reads it");
        assert_eq!(params.max_tokens, 100);
        assert_eq!(params.tools.as_ref().map(Vec::len), Some(1));
        params.validate().expect("a valid tool conversation");
        let reply = from_wire(
            json!({"role": "assistant", "content": {"type": "tool_use", "id": "x", "name": "bash", "input": {"command": "ls"}}}),
            Some("toolUse".into()),
            "m".into(),
        );
        assert!(matches!(&reply.content[0], SampleContent::ToolUse { name, .. } if name == "bash"));
    }
}
