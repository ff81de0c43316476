//! The model-facing `subagent` tool: hands a bounded task to a model (the operator's,
//! or the client's own), which works on it with the caller's tools. The loop and its state are the host's
//! (`dsh:plugin/subagent`); this plugin only reads the arguments and words the answer.

use dsh_plugin::tool_subagent::subagent::{self, SubagentRequest};
use dsh_plugin::{text, CallContext, Tool, ToolError, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The task, with everything the subagent needs to know: it sees nothing of your conversation.
    #[schemars(length(min = 1))]
    prompt: String,
    /// The tools it may call, a subset of yours (default: all of yours but subagent). It is refused any other.
    tools: Option<Vec<String>>,
    /// The most model turns it may take (default 20, `[subagent] max_turns`).
    #[schemars(range(min = 1, max = 1000))]
    max_turns: Option<u32>,
    /// The most wall time in milliseconds (default and cap: `[subagent] timeout_ms`, 10 minutes).
    #[schemars(range(min = 1))]
    timeout_ms: Option<u32>,
    /// The model to ask: one your scope allows (default: your scope's model). `client` is your own client's model.
    #[schemars(length(min = 1))]
    model: Option<String>,
    /// Start it in the background and return its job id (subagent-N) at once; read its transcript with job_output.
    run_in_background: Option<bool>,
}

struct Subagent;

impl Tools for Subagent {
    fn tools() -> Vec<Tool> {
        vec![Tool::new(
            "subagent",
            "Hand a bounded task to a helper: your own client's model (asked through MCP sampling) works on it alone with your tools, each call checked like yours, and returns its final answer and the turns it took. With run_in_background it returns its job id at once: then call job_output with its id and wait_ms to let it work and read its transcript (one entry per step: the model's text, each tool call, the result's first lines and code, the answer); job_kill stops it. Needs a client that declared sampling with tools (else SAMPLING_UNAVAILABLE).",
            run,
        )]
    }
}

fn run(_context: &CallContext, args: Args) -> Result<ToolResult, ToolError> {
    let request = SubagentRequest {
        prompt: args.prompt,
        tools: args.tools,
        max_turns: args.max_turns,
        timeout_ms: args.timeout_ms,
        model: args.model,
    };
    if args.run_in_background.unwrap_or(false) {
        let id = subagent::start(&request)?;
        return Ok(text(format!(
            "{id} started in the background. Call job_output with id {id:?} and wait_ms (say 30000), again until it has ended (from the returned cursor to read only what is new); on the client's model it works only while you wait on it. job_kill {id} stops it."
        )));
    }
    let answer = subagent::run(&request)?;
    let used = if answer.model == "client" {
        String::new()
    } else {
        format!(
            " by model {}, {} tokens in, {} out",
            answer.model, answer.input_tokens, answer.output_tokens
        )
    };
    Ok(text(format!(
        "{}\n[{}: answered in {} turns{used}; transcript: job_output {}]",
        answer.answer, answer.id, answer.turns, answer.id
    )))
}

dsh_plugin::export!(tool_subagent: Subagent);
