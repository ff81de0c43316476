//! A tool plugin's tools: each [`Tool`] is its manual (name, description, schemas,
//! idempotence, budget) and a handler over typed arguments. [`describe`] and [`call`]
//! answer the contract's two exports from a plugin's list; [`export!`](crate::export)
//! wires them.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use crate::results::failed;
use crate::schema::schema_text;
use crate::types::{CallContext, ErrorCode, ToolError, ToolResult, ToolSpec};

/// A tool plugin: the tools it provides. Called for `describe` (once, at load) and for
/// every call (each call runs in a fresh instance), so keep it cheap: schemas are only
/// derived for `describe`.
pub trait Tools {
    /// The plugin's tools; names are unique.
    fn tools() -> Vec<Tool>;
}

/// Where a tool's schema comes from.
enum Schema {
    /// Derived from a type when the plugin is described.
    Derived(fn() -> String),
    /// Written by hand (JSON text).
    Text(String),
}

impl Schema {
    fn text(&self) -> String {
        match self {
            Schema::Derived(derive) => derive(),
            Schema::Text(text) => text.clone(),
        }
    }
}

type Handler = Box<dyn Fn(&CallContext, &str) -> Result<ToolResult, serde_json::Error>>;

/// One tool: its manual and its handler.
pub struct Tool {
    name: Cow<'static, str>,
    description: Cow<'static, str>,
    input_schema: Schema,
    output_schema: Option<Schema>,
    idempotent: bool,
    output_budget: Option<u32>,
    run: Handler,
}

impl Tool {
    /// A tool named `name` (1 to 128 of `[A-Za-z0-9_-]`, unique across plugins) that
    /// the model reads `description` of, answered by `run`. Its input schema is derived
    /// from `A` ([`schema_for`](crate::schema_for)); a call's arguments are parsed into
    /// `A` before `run` sees them. `run` returns a [`ToolResult`] or anything that turns
    /// into one (`Result<ToolResult, ToolError>`, so `?` works on host calls).
    /// Not idempotent until [`Tool::idempotent`] says so.
    pub fn new<A, R, F>(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        run: F,
    ) -> Tool
    where
        A: DeserializeOwned + JsonSchema,
        R: Into<ToolResult>,
        F: Fn(&CallContext, A) -> R + 'static,
    {
        Tool {
            name: name.into(),
            description: description.into(),
            input_schema: Schema::Derived(schema_text::<A>),
            output_schema: None,
            idempotent: false,
            output_budget: None,
            run: Box::new(move |context, args_json| {
                let args = serde_json::from_str::<A>(args_json)?;
                Ok(run(context, args).into())
            }),
        }
    }

    /// Calling twice with the same arguments has the same effect as once (the host may
    /// retry it). Never for a tool that runs commands.
    pub fn idempotent(mut self) -> Tool {
        self.idempotent = true;
        self
    }

    /// The most bytes of content the model should see from one result.
    pub fn output_budget(mut self, bytes: u32) -> Tool {
        self.output_budget = Some(bytes);
        self
    }

    /// The tool returns structured output of type `O` (see [`structured`](crate::structured));
    /// its schema, derived from `O`, is the tool's `outputSchema`.
    pub fn output_schema<O: JsonSchema>(mut self) -> Tool {
        self.output_schema = Some(Schema::Derived(schema_text::<O>));
        self
    }

    /// Replaces the derived input schema with `json`, written by hand. The arguments are
    /// still parsed into the handler's type.
    pub fn input_schema_json(mut self, json: impl Into<String>) -> Tool {
        self.input_schema = Schema::Text(json.into());
        self
    }

    /// Declares the output schema as `json`, written by hand.
    pub fn output_schema_json(mut self, json: impl Into<String>) -> Tool {
        self.output_schema = Some(Schema::Text(json.into()));
        self
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The manual the host reads at load.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone().into_owned(),
            description: self.description.clone().into_owned(),
            input_schema: self.input_schema.text(),
            idempotent: self.idempotent,
            output_budget: self.output_budget,
            output_schema: self.output_schema.as_ref().map(Schema::text),
        }
    }
}

/// The manuals of `tools`: the contract's `describe`.
pub fn describe(tools: &[Tool]) -> Vec<ToolSpec> {
    tools.iter().map(Tool::spec).collect()
}

/// Runs the tool `name` of `tools` on `args_json`: the contract's `call`. Arguments
/// that do not parse into the tool's type fail with `invalid-arguments` before its
/// handler runs; a name none of `tools` has fails with `unknown-tool`.
pub fn call(tools: &[Tool], context: &CallContext, name: &str, args_json: &str) -> ToolResult {
    let Some(tool) = tools.iter().find(|tool| tool.name == name) else {
        return failed(ToolError {
            code: ErrorCode::UnknownTool,
            message: format!("no tool named `{name}`"),
        });
    };
    (tool.run)(context, args_json).unwrap_or_else(|error| failed(bad_arguments(name, &error)))
}

/// `args_json` parsed into `A`, or the `invalid-arguments` error the SDK answers a call
/// of `tool` with when it does not parse.
pub fn parse_args<A: DeserializeOwned>(tool: &str, args_json: &str) -> Result<A, ToolError> {
    serde_json::from_str(args_json).map_err(|error| bad_arguments(tool, &error))
}

fn bad_arguments(tool: &str, error: &serde_json::Error) -> ToolError {
    ToolError {
        code: ErrorCode::InvalidArguments,
        message: format!("bad arguments for {tool}: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Args {
        /// The text to say.
        text: String,
        /// How many times.
        times: Option<u32>,
    }

    fn context() -> CallContext {
        CallContext {
            owner: "owner".into(),
            session: "session".into(),
            call_id: "call-1".into(),
            workdir: "/work".into(),
            scope: "default".into(),
            settings_json: "{}".into(),
            output_budget: 1000,
        }
    }

    fn say(_context: &CallContext, args: Args) -> ToolResult {
        text(args.text.repeat(args.times.unwrap_or(1) as usize))
    }

    fn tools() -> Vec<Tool> {
        vec![Tool::new("say", "Say it.", say).idempotent()]
    }

    fn only_text(result: &ToolResult) -> &str {
        match result.content.as_slice() {
            [crate::ContentItem::Text(text)] => text,
            other => panic!("not one text item: {other:?}"),
        }
    }

    #[test]
    fn typed_arguments_reach_the_handler() {
        let result = call(&tools(), &context(), "say", r#"{"text":"ab","times":2}"#);
        assert!(result.error.is_none(), "{:?}", result.error);
        assert_eq!(only_text(&result), "abab");
    }

    #[test]
    fn a_missing_field_is_invalid_arguments_naming_it_and_the_tool() {
        let result = call(&tools(), &context(), "say", r#"{"times":2}"#);
        let error = result.error.expect("an error");
        assert_eq!(error.code, ErrorCode::InvalidArguments);
        assert!(
            error
                .message
                .starts_with("bad arguments for say: missing field `text`"),
            "{}",
            error.message
        );
        assert!(result.content.is_empty());
    }

    #[test]
    fn a_wrong_type_an_unknown_field_and_non_json_are_invalid_arguments() {
        for (args, expected) in [
            (
                r#"{"text":7}"#,
                "invalid type: integer `7`, expected a string",
            ),
            (r#"{"text":"a","loud":true}"#, "unknown field `loud`"),
            ("not json", "expected ident"),
        ] {
            let error = call(&tools(), &context(), "say", args).error.expect(args);
            assert_eq!(error.code, ErrorCode::InvalidArguments, "{args}");
            assert!(
                error.message.contains(expected),
                "{args}: {}",
                error.message
            );
        }
    }

    #[test]
    fn an_unknown_tool_is_unknown_tool() {
        let error = call(&tools(), &context(), "shout", "{}").error.unwrap();
        assert_eq!(error.code, ErrorCode::UnknownTool);
        assert_eq!(error.message, "no tool named `shout`");
    }

    #[test]
    fn parse_args_gives_the_same_error_as_a_call() {
        let error = parse_args::<Args>("say", "{}").err().unwrap();
        assert_eq!(error.code, ErrorCode::InvalidArguments);
        assert!(
            error.message.contains("missing field `text`"),
            "{}",
            error.message
        );
    }

    #[test]
    fn the_spec_carries_the_derived_schema_and_the_builder_settings() {
        let tool = Tool::new("say", "Say it.", say)
            .idempotent()
            .output_budget(64)
            .output_schema_json(r#"{"type":"object"}"#);
        let spec = tool.spec();
        assert_eq!(
            (spec.name.as_str(), spec.description.as_str()),
            ("say", "Say it.")
        );
        assert!(spec.idempotent);
        assert_eq!(spec.output_budget, Some(64));
        assert_eq!(spec.output_schema.as_deref(), Some(r#"{"type":"object"}"#));
        let schema: serde_json::Value = serde_json::from_str(&spec.input_schema).unwrap();
        assert_eq!(schema["required"], serde_json::json!(["text"]));
        assert_eq!(
            schema["properties"]["text"]["description"],
            "The text to say."
        );
    }

    #[test]
    fn a_hand_written_schema_replaces_the_derived_one() {
        let tool = Tool::new("say", "Say it.", say).input_schema_json(r#"{"type":7}"#);
        assert_eq!(tool.spec().input_schema, r#"{"type":7}"#);
    }
}
