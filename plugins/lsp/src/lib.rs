//! The model-facing `lsp` tool: four semantic queries (definition, references, hover,
//! document symbols) answered by language servers the host owns, so this plugin can be
//! replaced while a server stays warm. Results are compact text: workspace-relative
//! `path:line:col` with the source line, hover as plain text, symbols as an indented
//! outline.

use dsh_plugin::tool_lsp::lsp::{self, Answer, Op, Request};
use dsh_plugin::{failure, text, CallContext, ErrorCode, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

const DESCRIPTION: &str = "Ask the project's language server (e.g. pylsp, typescript-language-server, rust-analyzer) one semantic question about a source file: go to definition, find references, hover (type and docs), or document symbols (an outline). Point at a symbol with line and column, or with line and symbol (the identifier's text on that line). Locations come back as path:line:col followed by the source line. Files are read from disk on every call, so edits are seen.";

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// definition: where the symbol at the position is defined; references: every use of it; hover: its type and docs; symbols: the file's outline (line and column not needed).
    op: OpArg,
    /// The source file, relative to the workspace (or absolute inside it).
    #[schemars(length(min = 1))]
    path: String,
    /// 1-based line of the symbol (required except for symbols).
    #[schemars(range(min = 1))]
    line: Option<u32>,
    /// 1-based column (characters) on that line.
    #[schemars(range(min = 1))]
    column: Option<u32>,
    /// The identifier on that line, in place of column (its first whole-word occurrence).
    #[schemars(length(min = 1))]
    symbol: Option<String>,
}

#[derive(Deserialize, JsonSchema, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum OpArg {
    Definition,
    References,
    Hover,
    Symbols,
}

impl OpArg {
    fn op(self) -> Op {
        match self {
            OpArg::Definition => Op::Definition,
            OpArg::References => Op::References,
            OpArg::Hover => Op::Hover,
            OpArg::Symbols => Op::Symbols,
        }
    }

    fn name(self) -> &'static str {
        match self {
            OpArg::Definition => "definition",
            OpArg::References => "references",
            OpArg::Hover => "hover",
            OpArg::Symbols => "symbols",
        }
    }
}

struct Lsp;

impl Tools for Lsp {
    fn tools() -> Vec<Tool> {
        vec![Tool::new("lsp", DESCRIPTION, query).idempotent()]
    }
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

fn query(_context: &CallContext, args: Args) -> ToolResult {
    let invalid = |message: String| failure(ErrorCode::InvalidArguments, message);
    let op = args.op.op();
    let line = match op {
        Op::Symbols => args.line.unwrap_or(1),
        Op::Definition | Op::References | Op::Hover => {
            match (args.line, &args.column, &args.symbol) {
                (None, _, _) => return invalid(format!("{} needs a line", args.op.name())),
                (Some(_), None, None) => {
                    return invalid(format!("{} needs a column or a symbol", args.op.name()))
                }
                (Some(line), _, _) => line,
            }
        }
    };
    let request = Request {
        op,
        path: args.path,
        line,
        column: args.column,
        symbol: args.symbol,
    };
    lsp::query(&request)
        .map(|answer| text(render(op, answer)))
        .into()
}

dsh_plugin::export!(tool_lsp: Lsp);
