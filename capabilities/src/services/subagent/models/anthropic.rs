//! Anthropic's Messages API (`POST {base_url}/messages`, `anthropic-version:
//! 2023-06-01`): a subagent's conversation as `messages` of content blocks (`text`,
//! `tool_use`, `tool_result`), the system prompt as `system`, the tools with their
//! `input_schema`; the reply's blocks back as text and tool uses, with its `usage`.

use serde_json::{json, Value};

use super::{endpoint, ModelConfig, WireRequest};
use crate::call::{SampleContent, SampleReply, SampleRequest, SampleRole, TokenUse};

/// The API version every request names.
const VERSION: &str = "2023-06-01";

/// The request for `sample` to the endpoint of `config`.
pub(crate) fn request(config: &ModelConfig, sample: &SampleRequest) -> WireRequest {
    let messages: Vec<Value> = sample
        .messages
        .iter()
        .map(|message| {
            let content: Vec<Value> = message
                .content
                .iter()
                .map(|block| match block {
                    SampleContent::Text(text) => json!({ "type": "text", "text": text }),
                    SampleContent::ToolUse { id, name, input } => {
                        json!({ "type": "tool_use", "id": id, "name": name, "input": input })
                    }
                    SampleContent::ToolResult {
                        tool_use_id,
                        text,
                        is_error,
                    } => json!({
                        "type": "tool_result",
                        "tool_use_id": tool_use_id,
                        "content": text,
                        "is_error": is_error,
                    }),
                })
                .collect();
            let role = match message.role {
                SampleRole::User => "user",
                SampleRole::Assistant => "assistant",
            };
            json!({ "role": role, "content": content })
        })
        .collect();
    let mut body = json!({
        "model": config.model,
        "max_tokens": sample.max_tokens,
        "messages": messages,
    });
    if let Some(system) = &sample.system {
        body["system"] = Value::from(system.as_str());
    }
    if !sample.tools.is_empty() {
        body["tools"] = sample
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                })
            })
            .collect();
    }
    WireRequest {
        url: endpoint(&config.base_url, "messages"),
        headers: vec![("anthropic-version", VERSION.to_string())],
        body,
    }
}

/// The reply in `body`, or why it is none.
pub(crate) fn reply(body: &Value) -> Result<SampleReply, String> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or("it has no content")?;
    let mut content = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if !text.is_empty() {
                    content.push(SampleContent::Text(text.to_string()));
                }
            }
            Some("tool_use") => content.push(SampleContent::ToolUse {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or("a tool_use block has no id")?
                    .to_string(),
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or("a tool_use block has no name")?
                    .to_string(),
                input: block.get("input").cloned().unwrap_or_else(|| json!({})),
            }),
            // Thinking and other blocks are the model's own.
            _ => {}
        }
    }
    let usage = body.get("usage").map(|usage| TokenUse {
        input: usage
            .get("input_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            + usage
                .get("cache_read_input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0)
            + usage
                .get("cache_creation_input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        output: usage
            .get("output_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
    Ok(SampleReply {
        content,
        stop_reason: body
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::SampleMessage;

    #[test]
    fn a_tool_round_goes_out_as_blocks_and_the_reply_comes_back() {
        let config: ModelConfig = toml::from_str(
            "api = \"anthropic-messages\"\nbase_url = \"https://api.anthropic.com/v1\"\nmodel = \"claude\"\n",
        )
        .unwrap();
        let sample = SampleRequest {
            system: Some("alone".into()),
            messages: vec![SampleMessage {
                role: SampleRole::User,
                content: vec![SampleContent::ToolResult {
                    tool_use_id: "toolu_1".into(),
                    text: "DENIED".into(),
                    is_error: true,
                }],
            }],
            tools: Vec::new(),
            max_tokens: 5,
            wait: std::time::Duration::from_secs(1),
        };
        let wire = request(&config, &sample);
        assert_eq!(wire.url, "https://api.anthropic.com/v1/messages");
        assert_eq!(wire.headers, [("anthropic-version", VERSION.to_string())]);
        assert_eq!(wire.body["system"], "alone");
        assert_eq!(wire.body["messages"][0]["content"][0]["is_error"], true);
        assert!(wire.body.get("tools").is_none());

        let reply = reply(&json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "Let me look."},
                        {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"command": "ls"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 50, "output_tokens": 12}
        }))
        .unwrap();
        assert_eq!(reply.content.len(), 2);
        assert_eq!(reply.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(
            reply.usage,
            Some(TokenUse {
                input: 50,
                output: 12
            })
        );
    }
}
