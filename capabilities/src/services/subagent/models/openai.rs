//! The OpenAI-compatible chat completions API (`POST {base_url}/chat/completions`):
//! a subagent's conversation as `messages` (the system prompt first, the model's tool
//! calls as an assistant message's `tool_calls`, each result as a `tool` message), the
//! tools as `functions`; the reply's first choice back as text and tool uses, with its
//! `usage`.

use serde_json::{json, Value};

use super::{endpoint, ModelConfig, WireRequest};
use crate::call::{SampleContent, SampleReply, SampleRequest, SampleRole, TokenUse};

/// The request for `sample` to the endpoint of `config`.
pub(crate) fn request(config: &ModelConfig, sample: &SampleRequest) -> WireRequest {
    let mut messages = Vec::new();
    if let Some(system) = &sample.system {
        messages.push(json!({ "role": "system", "content": system }));
    }
    for message in &sample.messages {
        match message.role {
            SampleRole::User => {
                let mut text = Vec::new();
                for block in &message.content {
                    match block {
                        SampleContent::Text(words) => text.push(words.as_str()),
                        SampleContent::ToolResult {
                            tool_use_id,
                            text: result,
                            is_error,
                        } => messages.push(json!({
                            "role": "tool",
                            "tool_call_id": tool_use_id,
                            "content": if *is_error { format!("[error] {result}") } else { result.clone() },
                        })),
                        SampleContent::ToolUse { .. } => {}
                    }
                }
                if !text.is_empty() {
                    messages.push(json!({ "role": "user", "content": text.join("\n") }));
                }
            }
            SampleRole::Assistant => {
                let mut text = Vec::new();
                let mut calls = Vec::new();
                for block in &message.content {
                    match block {
                        SampleContent::Text(words) => text.push(words.as_str()),
                        SampleContent::ToolUse { id, name, input } => calls.push(json!({
                            "id": id,
                            "type": "function",
                            "function": { "name": name, "arguments": input.to_string() },
                        })),
                        SampleContent::ToolResult { .. } => {}
                    }
                }
                let mut assistant = json!({
                    "role": "assistant",
                    "content": if text.is_empty() { Value::Null } else { Value::from(text.join("\n")) },
                });
                if !calls.is_empty() {
                    assistant["tool_calls"] = Value::from(calls);
                }
                messages.push(assistant);
            }
        }
    }
    let mut body = json!({
        "model": config.model,
        "messages": messages,
        "max_tokens": sample.max_tokens,
    });
    if !sample.tools.is_empty() {
        body["tools"] = sample
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    },
                })
            })
            .collect();
    }
    WireRequest {
        url: endpoint(&config.base_url, "chat/completions"),
        headers: Vec::new(),
        body,
    }
}

/// The reply in `body`, or why it is none.
pub(crate) fn reply(body: &Value) -> Result<SampleReply, String> {
    let choice = body
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or("it has no choices[0]")?;
    let message = choice.get("message").ok_or("choices[0] has no message")?;
    let mut content = Vec::new();
    if let Some(text) = message.get("content").and_then(Value::as_str) {
        if !text.is_empty() {
            content.push(SampleContent::Text(text.to_string()));
        }
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function").ok_or("a tool call has no function")?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a tool call has no name")?;
        let arguments = match function.get("arguments") {
            Some(Value::String(text)) if text.trim().is_empty() => json!({}),
            // Arguments that are not JSON (a small model's slip) go to the tool as the
            // string they are: the call is refused (`INVALID_ARGUMENTS`), the model sees
            // why and may try again, and the run goes on.
            Some(Value::String(text)) => {
                serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone()))
            }
            Some(object @ Value::Object(_)) => object.clone(),
            _ => json!({}),
        };
        content.push(SampleContent::ToolUse {
            id: call
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or(name)
                .to_string(),
            name: name.to_string(),
            input: arguments,
        });
    }
    let usage = body.get("usage").map(|usage| TokenUse {
        input: usage
            .get("prompt_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        output: usage
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
    Ok(SampleReply {
        content,
        stop_reason: choice
            .get("finish_reason")
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
    use crate::call::{SampleMessage, SampleTool};

    fn config() -> ModelConfig {
        toml::from_str("api = \"openai-chat\"\nbase_url = \"http://h/v1/\"\nmodel = \"qwen\"\n")
            .unwrap()
    }

    #[test]
    fn a_conversation_with_a_tool_round_goes_out_as_chat_messages() {
        let sample = SampleRequest {
            system: Some("be brief".into()),
            messages: vec![
                SampleMessage {
                    role: SampleRole::User,
                    content: vec![SampleContent::Text("list".into())],
                },
                SampleMessage {
                    role: SampleRole::Assistant,
                    content: vec![SampleContent::ToolUse {
                        id: "call_1".into(),
                        name: "bash".into(),
                        input: json!({"command": "ls"}),
                    }],
                },
                SampleMessage {
                    role: SampleRole::User,
                    content: vec![SampleContent::ToolResult {
                        tool_use_id: "call_1".into(),
                        text: "a.txt".into(),
                        is_error: false,
                    }],
                },
            ],
            tools: vec![SampleTool {
                name: "bash".into(),
                description: "run".into(),
                input_schema: json!({"type": "object"}),
            }],
            max_tokens: 99,
            wait: std::time::Duration::from_secs(1),
        };
        let wire = request(&config(), &sample);
        assert_eq!(wire.url, "http://h/v1/chat/completions");
        let messages = wire.body["messages"].as_array().unwrap();
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(messages[1], json!({"role": "user", "content": "list"}));
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["arguments"],
            "{\"command\":\"ls\"}"
        );
        assert_eq!(
            messages[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "a.txt"})
        );
        assert_eq!(wire.body["tools"][0]["function"]["name"], "bash");
        assert_eq!(wire.body["max_tokens"], 99);
    }

    #[test]
    fn a_reply_with_tool_calls_and_usage_is_read() {
        let body = json!({
            "model": "qwen",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_9", "type": "function",
                    "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
        });
        let read = reply(&body).unwrap();
        assert_eq!(
            read.content,
            [SampleContent::ToolUse {
                id: "call_9".into(),
                name: "read".into(),
                input: json!({"path": "a"})
            }]
        );
        assert_eq!(
            read.usage,
            Some(TokenUse {
                input: 120,
                output: 7
            })
        );
        assert!(reply(&json!({"choices": []})).is_err());
    }
}
