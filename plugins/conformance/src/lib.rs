//! `test_sampling` and `test_elicitation`, as the official MCP conformance suite's
//! `tools-call-sampling` and `tools-call-elicitation` scenarios describe them: a tool
//! plugin that asks the caller's client's model (`dsh:plugin/sampling`) and its user
//! (`dsh:plugin/elicitation`) during a call. Needs both grants.

use dsh_plugin::tool_client::elicitation::{self, Action};
use dsh_plugin::tool_client::sampling::{self, CreateMessageRequest, Message, Role};
use dsh_plugin::{text, CallContext, Tool, ToolError, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// The prompt to send to the LLM.
    prompt: String,
}

#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// The message to show the user.
    message: String,
}

/// The form the scenario asks for: a username and an email address, both required.
const USER_FORM: &str = r#"{
  "type": "object",
  "properties": {
    "username": {"type": "string", "description": "User's response"},
    "email": {"type": "string", "description": "User's email address"}
  },
  "required": ["username", "email"]
}"#;

struct Conformance;

impl Tools for Conformance {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new(
                "test_sampling",
                "Asks the client's model the prompt (MCP sampling, 100 tokens) and returns its answer as `LLM response: ...`.",
                ask_model,
            ),
            Tool::new(
                "test_elicitation",
                "Shows the client's user the message with a form for a username and an email, and returns what they did as `User response: ...`.",
                ask_user,
            ),
        ]
    }
}

fn ask_model(_context: &CallContext, args: SamplingArgs) -> Result<ToolResult, ToolError> {
    let answer = sampling::create_message(&CreateMessageRequest {
        messages: vec![Message {
            role: Role::User,
            text: args.prompt,
        }],
        system_prompt: None,
        max_tokens: 100,
    })?;
    Ok(text(format!("LLM response: {}", answer.text)))
}

fn ask_user(_context: &CallContext, args: ElicitationArgs) -> Result<ToolResult, ToolError> {
    let answer = elicitation::elicit(&args.message, USER_FORM)?;
    let action = match answer.action {
        Action::Accept => "accept",
        Action::Decline => "decline",
        Action::Cancel => "cancel",
    };
    Ok(text(format!(
        "User response: action: {action}, content: {}",
        answer.content_json.as_deref().unwrap_or("{}")
    )))
}

dsh_plugin::export!(tool_client: Conformance);
