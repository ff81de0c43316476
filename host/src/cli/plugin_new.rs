//! `dsh plugin new NAME --lang rust|python|js --kind tool|guard|filter`: writes a plugin
//! project that builds with one command (printed, and in the project's README) against
//! the current contract, whose WIT it carries in `wit/plugin.wit`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

/// The current contract, as the project builds against it.
const CONTRACT_WIT: &str = include_str!("../../../wit/v0.2.0/plugin.wit");

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Tool,
    Guard,
    Filter,
}

#[derive(clap::Args)]
pub struct NewArgs {
    /// The plugin's name (and its tool's, for a tool): 1 to 64 of `[a-z0-9_]`, starting
    /// with a letter
    name: String,
    /// The language of the project
    #[arg(long, value_enum)]
    lang: Lang,
    /// What the plugin is: a tool, a guard or a result filter
    #[arg(long, value_enum, default_value = "tool")]
    kind: Kind,
    /// Where to write the project [default: ./NAME]; must not exist or be empty
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    let name = args.name.as_str();
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !valid {
        anyhow::bail!(
            "plugin name {name:?}: use 1 to 64 of a-z, 0-9 and _, starting with a letter"
        );
    }
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(name));
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        anyhow::bail!("{} exists and is not empty", dir.display());
    }
    let project = project(name, args.lang, args.kind);
    for (path, text) in &project.files {
        write(&dir.join(path), text)?;
    }
    write(&dir.join("wit/plugin.wit"), CONTRACT_WIT)?;
    write(&dir.join("README.md"), &readme(name, args.kind, &project))?;
    println!("wrote {} ({})", dir.display(), project.summary);
    println!();
    println!("build it (in {}):", dir.display());
    println!("  {}", project.build);
    println!("then:");
    println!("  dsh plugin check {}", project.output);
    Ok(ExitCode::SUCCESS)
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// A project's files (besides the WIT and the README), its build command and what the
/// build writes.
struct Project {
    summary: &'static str,
    files: Vec<(&'static str, String)>,
    build: String,
    output: String,
}

fn world(kind: Kind) -> &'static str {
    match kind {
        Kind::Tool => "tool",
        Kind::Guard => "guard",
        Kind::Filter => "result-filter",
    }
}

fn project(name: &str, lang: Lang, kind: Kind) -> Project {
    let fill = |template: &str| {
        template
            .replace("{NAME}", name)
            .replace("{WORLD}", world(kind))
    };
    match lang {
        Lang::Rust => Project {
            summary: "Rust, wit-bindgen",
            files: vec![
                ("Cargo.toml", fill(RUST_CARGO)),
                (
                    "src/lib.rs",
                    fill(match kind {
                        Kind::Tool => RUST_TOOL,
                        Kind::Guard => RUST_GUARD,
                        Kind::Filter => RUST_FILTER,
                    }),
                ),
            ],
            build: "cargo build --release --target wasm32-wasip2".into(),
            output: format!("target/wasm32-wasip2/release/{name}.wasm"),
        },
        Lang::Python => Project {
            summary: "Python, componentize-py from PyPI",
            files: vec![(
                "app.py",
                fill(match kind {
                    Kind::Tool => PYTHON_TOOL,
                    Kind::Guard => PYTHON_GUARD,
                    Kind::Filter => PYTHON_FILTER,
                }),
            )],
            build: format!(
                "componentize-py -d wit -w {} componentize app -o {name}.wasm",
                world(kind)
            ),
            output: format!("{name}.wasm"),
        },
        Lang::Js => Project {
            summary: "JavaScript, componentize-js from npm",
            files: vec![(
                "app.js",
                fill(match kind {
                    Kind::Tool => JS_TOOL,
                    Kind::Guard => JS_GUARD,
                    Kind::Filter => JS_FILTER,
                }),
            )],
            build: format!(
                "componentize-js app.js --wit wit --world-name {} -d http -d fetch-event -o {name}.wasm",
                world(kind)
            ),
            output: format!("{name}.wasm"),
        },
    }
}

fn readme(name: &str, kind: Kind, project: &Project) -> String {
    let install = match project.summary {
        s if s.starts_with("Rust") => "rustup target add wasm32-wasip2",
        s if s.starts_with("Python") => "pip install componentize-py",
        _ => "npm install -g @bytecodealliance/componentize-js @bytecodealliance/preview2-shim@0.25.0",
    };
    let config = match kind {
        Kind::Tool => format!("[plugins.{name}]\ninterfaces = [\"log\"]\n"),
        Kind::Guard => {
            format!("[pipeline]\nguards = [\"{name}\"]\n[plugins.{name}]\ninterfaces = [\"log\"]\n")
        }
        Kind::Filter => format!(
            "[pipeline]\nfilters = [\"{name}\"]\n[plugins.{name}]\ninterfaces = [\"log\"]\n"
        ),
    };
    format!(
        "# {name}\n\nA dsh {} plugin ({}) against `dsh:plugin@0.2.0` (`wit/plugin.wit`, world \
         `{}`).\n\n```sh\n{install}\n{}\ndsh plugin check {}\n```\n\nTo serve it, put the \
         component in a plugin directory (`dsh serve --plugins DIR`) and grant what \
         `dsh plugin check` lists in `dsh.toml`:\n\n```toml\n{config}```\n",
        world(kind),
        project.summary,
        world(kind),
        project.build,
        project.output,
    )
}

const RUST_CARGO: &str = r#"[package]
name = "{NAME}"
version = "0.1.0"
edition = "2021"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
wit-bindgen = "0.46"
serde_json = "1"

[profile.release]
opt-level = "s"
lto = true
strip = true
panic = "abort"

# A project of its own, not part of an enclosing workspace.
[workspace]
"#;

const RUST_TOOL: &str = r##"//! {NAME}: a dsh tool. `describe` is its manual; `call` answers one call, in a fresh
//! instance, with arguments the host already validated against the schema.

wit_bindgen::generate!({ path: "wit", world: "tool" });

use dsh::plugin::log::{self, Level};
use dsh::plugin::types::ContentItem;

const SCHEMA: &str = r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}"#;

struct Plugin;

impl Guest for Plugin {
    fn describe() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "{NAME}".into(),
            description: "Say hello to `name`.".into(),
            input_schema: SCHEMA.into(),
            idempotent: true,
            output_budget: None,
            output_schema: None,
        }]
    }

    fn call(_context: CallContext, _tool: String, args_json: String) -> ToolResult {
        let args: serde_json::Value = serde_json::from_str(&args_json).unwrap_or_default();
        let who = args["name"].as_str().unwrap_or("world");
        log::write(Level::Info, &format!("greeting {who}"));
        ToolResult {
            content: vec![ContentItem::Text(format!("hello, {who}"))],
            structured_json: None,
            error: None,
            full_output_path: None,
        }
    }
}

export!(Plugin);
"##;

const RUST_GUARD: &str = r#"//! {NAME}: a dsh guard. `check` sees every call before it runs (in a fresh instance)
//! and allows, rewrites, denies or asks.

wit_bindgen::generate!({ path: "wit", world: "guard" });

struct Plugin;

impl Guest for Plugin {
    fn check(call: PendingCall) -> Verdict {
        if call.args_json.contains("forbidden") {
            Verdict::Deny(format!("{NAME}: `{}` was called with a forbidden word", call.tool))
        } else {
            Verdict::Allow
        }
    }
}

export!(Plugin);
"#;

const RUST_FILTER: &str = r#"//! {NAME}: a dsh result filter. `filter` sees each result before the model does and
//! may replace it (`None` keeps it).

wit_bindgen::generate!({ path: "wit", world: "result-filter" });

struct Plugin;

impl Guest for Plugin {
    fn filter(_call: PendingCall, _outcome: ToolResult) -> Option<ToolResult> {
        None
    }
}

export!(Plugin);
"#;

const PYTHON_TOOL: &str = r#""""{NAME}: a dsh tool. `describe` is its manual; `call` answers one call, in a fresh
instance, with arguments the host already validated against the schema."""

import json

import wit_world
from wit_world.imports import log, types

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
    "additionalProperties": False,
}


class WitWorld(wit_world.WitWorld):
    def describe(self):
        return [
            types.ToolSpec(
                name="{NAME}",
                description="Say hello to `name`.",
                input_schema=json.dumps(SCHEMA),
                idempotent=True,
                output_budget=None,
                output_schema=None,
            )
        ]

    def call(self, context, name, args_json):
        who = json.loads(args_json).get("name", "world")
        log.write(log.Level.INFO, f"greeting {who}")
        return types.ToolResult(
            content=[types.ContentItem_Text(f"hello, {who}")],
            structured_json=None,
            error=None,
            full_output_path=None,
        )
"#;

const PYTHON_GUARD: &str = r#""""{NAME}: a dsh guard. `check` sees every call before it runs (in a fresh instance)
and allows, rewrites, denies or asks."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def check(self, call):
        if "forbidden" in call.args_json:
            return wit_world.Verdict_Deny(f"{NAME}: `{call.tool}` was called with a forbidden word")
        return wit_world.Verdict_Allow()
"#;

const PYTHON_FILTER: &str = r#""""{NAME}: a dsh result filter. `filter` sees each result before the model does and
may replace it (None keeps it)."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def filter(self, call, outcome):
        return None
"#;

const JS_TOOL: &str = r#"// {NAME}: a dsh tool. `describe` is its manual; `call` answers one call, in a fresh
// instance, with arguments the host already validated against the schema.

import { write as log } from "dsh:plugin/log@0.2.0";

const SCHEMA = {
  type: "object",
  properties: { name: { type: "string" } },
  required: ["name"],
  additionalProperties: false,
};

export function describe() {
  return [
    {
      name: "{NAME}",
      description: "Say hello to `name`.",
      inputSchema: JSON.stringify(SCHEMA),
      idempotent: true,
      outputBudget: undefined,
      outputSchema: undefined,
    },
  ];
}

export function call(context, name, argsJson) {
  const who = JSON.parse(argsJson).name ?? "world";
  log("info", `greeting ${who}`);
  return {
    content: [{ tag: "text", val: `hello, ${who}` }],
    structuredJson: undefined,
    error: undefined,
    fullOutputPath: undefined,
  };
}
"#;

const JS_GUARD: &str = r#"// {NAME}: a dsh guard. `check` sees every call before it runs (in a fresh instance)
// and allows, rewrites, denies or asks.

export function check(call) {
  if (call.argsJson.includes("forbidden")) {
    return { tag: "deny", val: `{NAME}: \`${call.tool}\` was called with a forbidden word` };
  }
  return { tag: "allow" };
}
"#;

const JS_FILTER: &str = r#"// {NAME}: a dsh result filter. `filter` sees each result before the model does and
// may replace it (undefined keeps it).

export function filter(call, outcome) {
  return undefined;
}
"#;
