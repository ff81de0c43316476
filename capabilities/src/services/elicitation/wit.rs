//! The `dsh:plugin/elicitation` binding: a plugin's form sent to the client of the call
//! in flight, the user's answer read back.

use serde_json::Value;
use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::elicitation::{self as interface, Action, ElicitResult, Host};
use crate::bindings::dsh::plugin::types::ToolError as WitToolError;
use crate::call::ElicitReply;
use crate::error::{ErrorCode, ToolError};
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = super::ElicitationCapability;

/// Adds `dsh:plugin/elicitation` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.elicitation)
    })
}

/// The schema a form is built from: a JSON object of `"type": "object"` with
/// `properties` (MCP's rules for each property are checked when it is sent).
fn form_schema(text: &str) -> Result<Value, ToolError> {
    let invalid = |why: &str| {
        ToolError::new(
            ErrorCode::InvalidArguments,
            format!("the requested schema {why}: it must be a JSON Schema object of `\"type\": \"object\"` whose `properties` are strings, numbers, integers, booleans or enums"),
        )
    };
    let schema: Value =
        serde_json::from_str(text).map_err(|e| invalid(&format!("is not JSON ({e})")))?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(invalid("is not of type object"));
    }
    if !schema.get("properties").is_some_and(Value::is_object) {
        return Err(invalid("has no `properties` object"));
    }
    Ok(schema)
}

impl Host for CallCtx<'_, Own> {
    async fn elicit(
        &mut self,
        message: String,
        requested_schema: String,
    ) -> Result<ElicitResult, WitToolError> {
        if message.trim().is_empty() {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                "an elicitation needs a message for the user",
            )
            .into());
        }
        let schema = form_schema(&requested_schema)?;
        let client = match &self.call.sampler {
            Some(client) if client.can_elicit() => client.clone(),
            Some(_) => {
                return Err(ToolError::new(
                    ErrorCode::ElicitationUnavailable,
                    "the MCP client did not declare elicitation in form mode (capabilities.elicitation), so dsh cannot ask its user",
                )
                .into())
            }
            None => {
                return Err(ToolError::new(
                    ErrorCode::ElicitationUnavailable,
                    "this call has no MCP client whose user could be asked (`dsh call` has none)",
                )
                .into())
            }
        };
        tracing::info!(
            plugin = self.plugin,
            call = %self.call.call_id,
            "a plugin asks the client's user"
        );
        let reply = self
            .host_call("elicitation.elicit", client.elicit(&message, &schema))
            .await;
        let reply =
            reply.map_err(|error| error.to_tool_error(ErrorCode::ElicitationUnavailable))?;
        Ok(match reply {
            ElicitReply::Accept(content) => ElicitResult {
                action: Action::Accept,
                content_json: Some(content.to_string()),
            },
            ElicitReply::Decline => ElicitResult {
                action: Action::Decline,
                content_json: None,
            },
            ElicitReply::Cancel => ElicitResult {
                action: Action::Cancel,
                content_json: None,
            },
        })
    }
}
