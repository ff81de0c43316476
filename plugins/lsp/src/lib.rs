//! The model-facing `lsp` tool: four semantic queries (definition, references, hover,
//! document symbols) answered by language servers the host owns, so this plugin can be
//! replaced while a server stays warm. Results are compact text: workspace-relative
//! `path:line:col` with the source line, hover as plain text, symbols as an indented
//! outline.

wit_bindgen::generate!({ path: "../../wit/v0.2.0", world: "tool-lsp" });
include!("../../shared/results.rs");

use dsh::plugin::lsp::{self, Answer, Op, Request};
use dsh::plugin::types::ErrorCode;
use serde::Deserialize;

const SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "op": { "type": "string", "enum": ["definition", "references", "hover", "symbols"], "description": "definition: where the symbol at the position is defined; references: every use of it; hover: its type and docs; symbols: the file's outline (line and column not needed)." },
    "path": { "type": "string", "minLength": 1, "description": "The source file, relative to the workspace (or absolute inside it)." },
    "line": { "type": "integer", "minimum": 1, "description": "1-based line of the symbol (required except for symbols)." },
    "column": { "type": "integer", "minimum": 1, "description": "1-based column (characters) on that line." },
    "symbol": { "type": "string", "minLength": 1, "description": "The identifier on that line, in place of column (its first whole-word occurrence)." }
  },
  "required": ["op", "path"],
  "additionalProperties": false
}"#;

const DESCRIPTION: &str = "Ask the project's language server (e.g. pylsp, typescript-language-server, rust-analyzer) one semantic question about a source file: go to definition, find references, hover (type and docs), or document symbols (an outline). Point at a symbol with line and column, or with line and symbol (the identifier's text on that line). Locations come back as path:line:col followed by the source line. Files are read from disk on every call, so edits are seen.";

#[derive(Deserialize)]
struct Args {
    op: String,
    path: String,
    line: Option<u32>,
    column: Option<u32>,
    symbol: Option<String>,
}

struct Lsp;

fn op_named(name: &str) -> Option<Op> {
    Some(match name {
        "definition" => Op::Definition,
        "references" => Op::References,
        "hover" => Op::Hover,
        "symbols" => Op::Symbols,
        _ => return None,
    })
}

/// The answer as compact text for the model.
fn render(op: Op, answer: Answer) -> String {
    let what = match op {
        Op::Definition => "definition",
        Op::References => "reference",
        Op::Hover => "hover",
        Op::Symbols => "symbol",
    };
    match answer {
        Answer::Locations(found) if found.is_empty() => format!("no {what} found"),
        Answer::Locations(found) => found
            .iter()
            .map(|l| format!("{}:{}:{}: {}", l.path, l.line, l.column, l.text.trim()))
            .collect::<Vec<_>>()
            .join("\n"),
        Answer::Hover(text) if text.is_empty() => "no hover information here".into(),
        Answer::Hover(text) => text,
        Answer::Symbols(symbols) if symbols.is_empty() => "no symbols found".into(),
        Answer::Symbols(symbols) => symbols
            .iter()
            .map(|s| {
                format!(
                    "{}{} {} ({}:{})",
                    "  ".repeat(s.depth as usize),
                    s.kind,
                    s.name,
                    s.line,
                    s.column
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn run(args_json: &str) -> Result<ToolResult, ToolResult> {
    let invalid = |message: String| failure(ErrorCode::InvalidArguments, message);
    let args: Args =
        serde_json::from_str(args_json).map_err(|e| invalid(format!("bad arguments: {e}")))?;
    let op = op_named(&args.op).ok_or_else(|| invalid(format!("unknown op {}", args.op)))?;
    let line = match op {
        Op::Symbols => args.line.unwrap_or(1),
        Op::Definition | Op::References | Op::Hover => {
            match (args.line, &args.column, &args.symbol) {
                (None, _, _) => return Err(invalid(format!("{} needs a line", args.op))),
                (Some(_), None, None) => {
                    return Err(invalid(format!("{} needs a column or a symbol", args.op)))
                }
                (Some(line), _, _) => line,
            }
        }
    };
    let answer = lsp::query(&Request {
        op,
        path: args.path,
        line,
        column: args.column,
        symbol: args.symbol,
    })
    .map_err(failed)?;
    Ok(ok(render(op, answer)))
}

impl Guest for Lsp {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "lsp".into(),
            description: DESCRIPTION.into(),
            input_schema: SCHEMA.into(),
            idempotent: true,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(_context: CallContext, _name: String, args_json: String) -> ToolResult {
        match run(&args_json) {
            Ok(result) | Err(result) => result,
        }
    }
}

export!(Lsp);
