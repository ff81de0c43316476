//! `dsh plugin new NAME --lang rust|python|js --kind tool|guard|filter`: writes a plugin
//! project that builds with one command (printed, and in the project's README) against
//! the current contract, whose WIT it carries in `wit/plugin.wit`. A Rust project gets
//! the Rust SDK (`plugins/sdk`, embedded in dsh) vendored as `sdk/`, a path dependency
//! whose bindings read the project's `wit/`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

/// The current contract, as the project builds against it.
const CONTRACT_WIT: &str = include_str!("../../../wit/v0.2.0/plugin.wit");

/// One of the Rust SDK's files: where a Rust project gets it, and its text in dsh's tree.
macro_rules! sdk_file {
    ($path:literal) => {
        (
            concat!("sdk/", $path),
            include_str!(concat!("../../../plugins/sdk/", $path)),
        )
    };
}

/// The Rust SDK's files.
const RUST_SDK: &[(&str, &str)] = &[
    sdk_file!("Cargo.toml"),
    sdk_file!("src/lib.rs"),
    sdk_file!("src/results.rs"),
    sdk_file!("src/schema.rs"),
    sdk_file!("src/tools.rs"),
];

/// The contract's path in the SDK's bindings in dsh's tree (from `plugins/sdk`), and in
/// a project (from `sdk/`, to the project's `wit/`).
const SDK_WIT_IN_TREE: &str = r#"path: "../../wit/v0.2.0""#;
const SDK_WIT_IN_PROJECT: &str = r#"path: "../wit""#;

/// The SDK's files for a project: its bindings read the project's `wit/`.
fn vendored_sdk() -> Vec<(&'static str, String)> {
    RUST_SDK
        .iter()
        .map(|(path, text)| (*path, text.replace(SDK_WIT_IN_TREE, SDK_WIT_IN_PROJECT)))
        .collect()
}

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
            summary: "Rust, the dsh SDK vendored in sdk/",
            files: [
                ("Cargo.toml", fill(RUST_CARGO)),
                (
                    "src/lib.rs",
                    fill(match kind {
                        Kind::Tool => RUST_TOOL,
                        Kind::Guard => RUST_GUARD,
                        Kind::Filter => RUST_FILTER,
                    }),
                ),
            ]
            .into_iter()
            .chain(vendored_sdk())
            .collect(),
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
# The dsh plugin SDK, as `dsh plugin new` wrote it (dsh's plugins/sdk).
dsh-plugin-sdk = { path = "sdk" }
serde = { version = "1", features = ["derive"] }
schemars = "1"

[profile.release]
opt-level = "s"
lto = true
strip = true
panic = "abort"

# A project of its own, not part of an enclosing workspace (sdk/ is its member).
[workspace]
"#;

const RUST_TOOL: &str = r#"//! {NAME}: a dsh tool. Its input schema is derived from `Args` (doc comments become
//! descriptions); each call runs in a fresh instance, with arguments the host already
//! validated against that schema and the SDK parsed into `Args`.

use dsh_plugin::tool::log::{self, Level};
use dsh_plugin::{text, CallContext, Tool, ToolResult, Tools};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Who to greet.
    name: String,
}

struct Plugin;

impl Tools for Plugin {
    fn tools() -> Vec<Tool> {
        vec![Tool::new("{NAME}", "Say hello to `name`.", greet).idempotent()]
    }
}

fn greet(_context: &CallContext, args: Args) -> ToolResult {
    log::write(Level::Info, &format!("greeting {}", args.name));
    text(format!("hello, {}", args.name))
}

dsh_plugin::export!(tool: Plugin);
"#;

const RUST_GUARD: &str = r#"//! {NAME}: a dsh guard. `check` sees every call before it runs (in a fresh instance)
//! and allows, rewrites, denies or asks.

use dsh_plugin::{Guard, PendingCall, Verdict};

struct Plugin;

impl Guard for Plugin {
    fn check(call: PendingCall) -> Verdict {
        if call.args_json.contains("forbidden") {
            Verdict::Deny(format!("{NAME}: `{}` was called with a forbidden word", call.tool))
        } else {
            Verdict::Allow
        }
    }
}

dsh_plugin::export!(guard: Plugin);
"#;

const RUST_FILTER: &str = r#"//! {NAME}: a dsh result filter. `filter` sees each result before the model does and
//! may replace it (`None` keeps it).

use dsh_plugin::{Filter, PendingCall, ToolResult};

struct Plugin;

impl Filter for Plugin {
    fn filter(_call: PendingCall, _outcome: ToolResult) -> Option<ToolResult> {
        None
    }
}

dsh_plugin::export!(result_filter: Plugin);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_sdk_reads_the_projects_wit() {
        let sdk = vendored_sdk();
        let lib = &sdk
            .iter()
            .find(|(path, _)| *path == "sdk/src/lib.rs")
            .unwrap()
            .1;
        assert!(!lib.contains(SDK_WIT_IN_TREE));
        // Every `generate!` reads the project's contract.
        let paths = lib.matches("path: \"").count();
        assert!(paths > 0);
        assert_eq!(lib.matches(SDK_WIT_IN_PROJECT).count(), paths, "{lib}");
    }

    #[test]
    fn the_vendored_sdk_is_every_source_file_of_the_sdk() {
        let sdk_src = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/sdk/src");
        let mut on_disk: Vec<String> = std::fs::read_dir(sdk_src)
            .unwrap()
            .map(|entry| format!("sdk/src/{}", entry.unwrap().file_name().to_string_lossy()))
            .collect();
        on_disk.sort();
        let vendored: Vec<&str> = RUST_SDK
            .iter()
            .map(|(path, _)| *path)
            .filter(|path| path.starts_with("sdk/src/"))
            .collect();
        assert_eq!(vendored, on_disk);
    }

    #[test]
    fn a_rust_project_carries_the_sdk_as_a_path_dependency() {
        let project = project("hello", Lang::Rust, Kind::Tool);
        let file = |name: &str| &project.files.iter().find(|(p, _)| *p == name).unwrap().1;
        assert!(file("Cargo.toml").contains(r#"dsh-plugin-sdk = { path = "sdk" }"#));
        assert!(file("src/lib.rs").contains("dsh_plugin::export!(tool: Plugin);"));
        assert!(file("sdk/Cargo.toml").contains(r#"name = "dsh-plugin-sdk""#));
    }
}
