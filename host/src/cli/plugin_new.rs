//! `dsh plugin new NAME --lang rust|python|js --kind tool|guard|filter|middleware|observer`:
//! writes a plugin project that builds with one command (printed, and in the project's
//! README) against the current contract, whose WIT it carries in `wit/plugin.wit`. Each
//! kind is a world of the contract: `tool`, `guard`, `result-filter`, `middleware` (a
//! pass-through that runs the rest of the call once) or `observer` (it logs the kind of
//! each event log record it sees). A Rust project gets the Rust SDK (`plugins/sdk`,
//! embedded in dsh) vendored as `sdk/`, a path dependency whose bindings read the
//! project's `wit/`.

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
    /// A tool (world `tool`)
    Tool,
    /// A guard (world `guard`): allows, rewrites, denies or asks before a call runs
    Guard,
    /// A result filter (world `result-filter`): may replace a result
    Filter,
    /// A middleware (world `middleware`): wraps a call's execution and runs the rest of
    /// it (`next.run`) not at all, once or several times
    Middleware,
    /// An observer (world `observer`): sees each record of the session's event log, off
    /// the call's path
    Observer,
}

#[derive(clap::Args)]
pub struct NewArgs {
    /// The plugin's name (and its tool's, for a tool): 1 to 64 of `[a-z0-9_]`, starting
    /// with a letter
    name: String,
    /// The language of the project
    #[arg(long, value_enum)]
    lang: Lang,
    /// What the plugin is: a tool, a guard, a result filter, a middleware or an observer
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
        Kind::Middleware => "middleware",
        Kind::Observer => "observer",
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
                        Kind::Middleware => RUST_MIDDLEWARE,
                        Kind::Observer => RUST_OBSERVER,
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
                    Kind::Middleware => PYTHON_MIDDLEWARE,
                    Kind::Observer => PYTHON_OBSERVER,
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
                    Kind::Middleware => JS_MIDDLEWARE,
                    Kind::Observer => JS_OBSERVER,
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
        Kind::Middleware => format!(
            "[pipeline]\nmiddleware = [\"{name}\"]\n[plugins.{name}]\ninterfaces = [\"log\"]\n"
        ),
        Kind::Observer => format!(
            "[pipeline]\nobservers = [\"{name}\"]\n[plugins.{name}]\ninterfaces = [\"log\"]\n"
        ),
    };
    let about = match kind {
        Kind::Tool => {
            "`describe` lists its tools; `call` answers one call, each in a fresh instance."
        }
        Kind::Guard => {
            "`check` sees every call before it runs, each in a fresh instance, and allows, \
             rewrites, denies or asks."
        }
        Kind::Filter => {
            "`filter` sees each result before the model does, each in a fresh instance, and \
             may replace it."
        }
        Kind::Middleware => {
            "`handle` wraps the execution of every call, each in a fresh instance: `next.run` \
             runs the rest of the call (the middleware after it in `[pipeline] middleware`, \
             then the tool) and may be called not at all, once or several times; what \
             `handle` returns is the call's result. As written it runs the rest once and \
             returns its result: add your behaviour there."
        }
        Kind::Observer => {
            "`observe` sees each record of the session's event log (`tool/call`, \
             `tool/result`, `approval`, `job/start`, `job/end`: its kind and its JSON), each \
             in a fresh instance, off the call's path, and can change nothing. As written it \
             logs each record's kind; to keep records somewhere, grant it what a sink needs \
             (a directory: `fs = [{ path = \"DIR\", mode = \"rw\" }]`, or a network address) \
             and name the place in its settings (`event.settings_json`)."
        }
    };
    format!(
        "# {name}\n\nA dsh {} plugin ({}) against `dsh:plugin@0.2.0` (`wit/plugin.wit`, world \
         `{}`). {about}\n\n```sh\n{install}\n{}\ndsh plugin check {}\n```\n\nTo serve it, put \
         the component in a plugin directory (`dsh serve --plugins DIR`) and grant what \
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

const RUST_MIDDLEWARE: &str = r#"//! {NAME}: a dsh middleware. `handle` wraps the execution of every call it is selected
//! for (in a fresh instance): `next::run` runs the rest of the call (the middleware
//! after it, then the tool) and may be called not at all, once or several times; what
//! `handle` returns is the call's result.

use dsh_plugin::middleware::next;
use dsh_plugin::{Middleware, PendingCall, ToolResult};

struct Plugin;

impl Middleware for Plugin {
    fn handle(_call: PendingCall) -> ToolResult {
        // A pass-through: runs the rest once and returns its result. Add behaviour here:
        // before the run (answer without running it: a cache, a refusal), around it (a
        // deadline with `next::run(Some(ms))`, a retry) or after it (measure or rewrite
        // the result). `_call.settings::<T>()` reads `[plugins.{NAME}.settings]`.
        next::run(None)
    }
}

dsh_plugin::export!(middleware: Plugin);
"#;

const RUST_OBSERVER: &str = r#"//! {NAME}: a dsh observer. `observe` sees each record of the session's event log
//! (`tool/call`, `tool/result`, `approval`, `job/start`, `job/end`) in a fresh instance,
//! off the call's path, and can change nothing.

use dsh_plugin::observer::log::{self, Level};
use dsh_plugin::{ObservedEvent, Observer};

struct Plugin;

impl Observer for Plugin {
    fn observe(event: ObservedEvent) {
        // `event.json` is the whole record (one JSON object); `event.settings_json` holds
        // `[plugins.{NAME}.settings]`.
        log::write(Level::Info, &format!("{NAME}: saw {}", event.kind));
    }
}

dsh_plugin::export!(observer: Plugin);
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

const PYTHON_MIDDLEWARE: &str = r#""""{NAME}: a dsh middleware. `handle` wraps the execution of every call it is selected
for (in a fresh instance): `next.run` runs the rest of the call (the middleware after it,
then the tool) and may be called not at all, once or several times; what `handle` returns
is the call's result."""

import wit_world
from wit_world.imports import next as rest


class WitWorld(wit_world.WitWorld):
    def handle(self, call):
        # A pass-through: runs the rest once and returns its result. Add behaviour here:
        # before the run (answer without running it: a cache, a refusal), around it (a
        # deadline with `rest.run(ms)`, a retry) or after it (measure or rewrite the
        # result). `call.context.settings_json` holds `[plugins.{NAME}.settings]`.
        return rest.run(None)
"#;

const PYTHON_OBSERVER: &str = r#""""{NAME}: a dsh observer. `observe` sees each record of the session's event log
(`tool/call`, `tool/result`, `approval`, `job/start`, `job/end`) in a fresh instance, off
the call's path, and can change nothing."""

import wit_world
from wit_world.imports import log


class WitWorld(wit_world.WitWorld):
    def observe(self, event):
        # `event.json` is the whole record (one JSON object); `event.settings_json` holds
        # `[plugins.{NAME}.settings]`.
        log.write(log.Level.INFO, f"{NAME}: saw {event.kind}")
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

const JS_MIDDLEWARE: &str = r#"// {NAME}: a dsh middleware. `handle` wraps the execution of every call it is selected
// for (in a fresh instance): `run` (dsh:plugin/next) runs the rest of the call (the
// middleware after it, then the tool) and may be called not at all, once or several
// times; what `handle` returns is the call's result.

import { run } from "dsh:plugin/next@0.2.0";

export function handle(call) {
  // A pass-through: runs the rest once and returns its result. Add behaviour here:
  // before the run (answer without running it: a cache, a refusal), around it (a
  // deadline with `run(ms)`, a retry) or after it (measure or rewrite the result).
  // `call.context.settingsJson` holds `[plugins.{NAME}.settings]`.
  return run(undefined);
}
"#;

const JS_OBSERVER: &str = r#"// {NAME}: a dsh observer. `observe` sees each record of the session's event log
// (`tool/call`, `tool/result`, `approval`, `job/start`, `job/end`) in a fresh instance,
// off the call's path, and can change nothing.

import { write as log } from "dsh:plugin/log@0.2.0";

export function observe(event) {
  // `event.json` is the whole record (one JSON object); `event.settingsJson` holds
  // `[plugins.{NAME}.settings]`.
  log("info", `{NAME}: saw ${event.kind}`);
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

    fn file<'a>(project: &'a Project, name: &str) -> &'a str {
        &project
            .files
            .iter()
            .find(|(p, _)| *p == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .1
    }

    #[test]
    fn a_middleware_project_targets_the_middleware_world_and_runs_the_rest_once() {
        let rust = project("timing", Lang::Rust, Kind::Middleware);
        let lib = file(&rust, "src/lib.rs");
        assert!(
            lib.contains("dsh_plugin::export!(middleware: Plugin);"),
            "{lib}"
        );
        assert!(lib.contains("impl Middleware for Plugin"), "{lib}");
        assert!(
            lib.contains("fn handle(_call: PendingCall) -> ToolResult"),
            "{lib}"
        );
        // It runs the rest once, and returns what that run returned.
        assert_eq!(lib.matches("next::run(None)").count(), 1, "{lib}");
        assert!(lib.contains("        next::run(None)\n    }\n"), "{lib}");
        assert!(!lib.contains("{NAME}") && lib.contains("[plugins.timing.settings]"));

        let python = project("timing", Lang::Python, Kind::Middleware);
        assert_eq!(
            python.build,
            "componentize-py -d wit -w middleware componentize app -o timing.wasm"
        );
        let app = file(&python, "app.py");
        assert!(app.contains("def handle(self, call):"), "{app}");
        assert!(
            app.contains("from wit_world.imports import next as rest"),
            "{app}"
        );
        assert!(app.contains("return rest.run(None)"), "{app}");

        let js = project("timing", Lang::Js, Kind::Middleware);
        assert!(js.build.contains("--world-name middleware"), "{}", js.build);
        let app = file(&js, "app.js");
        assert!(app.contains("export function handle(call)"), "{app}");
        assert!(app.contains(r#"import { run } from "dsh:plugin/next@0.2.0";"#));
    }

    #[test]
    fn an_observer_project_targets_the_observer_world_and_logs_each_kind() {
        let rust = project("sink", Lang::Rust, Kind::Observer);
        let lib = file(&rust, "src/lib.rs");
        assert!(
            lib.contains("dsh_plugin::export!(observer: Plugin);"),
            "{lib}"
        );
        assert!(lib.contains("impl Observer for Plugin"), "{lib}");
        assert!(lib.contains("fn observe(event: ObservedEvent)"), "{lib}");
        assert!(
            lib.contains("use dsh_plugin::observer::log::{self, Level};"),
            "{lib}"
        );
        assert!(
            lib.contains(r#"log::write(Level::Info, &format!("sink: saw {}", event.kind));"#),
            "{lib}"
        );

        let python = project("sink", Lang::Python, Kind::Observer);
        assert_eq!(
            python.build,
            "componentize-py -d wit -w observer componentize app -o sink.wasm"
        );
        let app = file(&python, "app.py");
        assert!(app.contains("def observe(self, event):"), "{app}");
        assert!(
            app.contains(r#"log.write(log.Level.INFO, f"sink: saw {event.kind}")"#),
            "{app}"
        );

        let js = project("sink", Lang::Js, Kind::Observer);
        assert!(js.build.contains("--world-name observer"), "{}", js.build);
        let app = file(&js, "app.js");
        assert!(app.contains("export function observe(event)"), "{app}");
    }

    #[test]
    fn every_kind_fills_its_template_and_names_its_world_in_the_readme() {
        for (kind, world, pipeline) in [
            (Kind::Tool, "tool", None),
            (Kind::Guard, "guard", Some("guards")),
            (Kind::Filter, "result-filter", Some("filters")),
            (Kind::Middleware, "middleware", Some("middleware")),
            (Kind::Observer, "observer", Some("observers")),
        ] {
            for lang in [Lang::Rust, Lang::Python, Lang::Js] {
                let project = project("p1", lang, kind);
                for (path, text) in &project.files {
                    if !path.starts_with("sdk/") {
                        assert!(
                            !text.contains("{NAME}") && !text.contains("{WORLD}"),
                            "{path}"
                        );
                    }
                }
                let readme = readme("p1", kind, &project);
                assert!(
                    readme.contains(&format!("A dsh {world} plugin"))
                        && readme.contains(&format!("world `{world}`")),
                    "{readme}"
                );
                if let Some(list) = pipeline {
                    assert!(
                        readme.contains(&format!("[pipeline]\n{list} = [\"p1\"]\n")),
                        "{readme}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_middleware_and_an_observer_project_are_written_with_their_world() {
        let dir = tempfile::tempdir().unwrap();
        for (name, lang, kind, world, source) in [
            (
                "mw_rust",
                Lang::Rust,
                Kind::Middleware,
                "middleware",
                "src/lib.rs",
            ),
            (
                "mw_py",
                Lang::Python,
                Kind::Middleware,
                "middleware",
                "app.py",
            ),
            (
                "obs_rust",
                Lang::Rust,
                Kind::Observer,
                "observer",
                "src/lib.rs",
            ),
            ("obs_py", Lang::Python, Kind::Observer, "observer", "app.py"),
        ] {
            let project_dir = dir.path().join(name);
            let args = NewArgs {
                name: name.into(),
                lang,
                kind,
                dir: Some(project_dir.clone()),
            };
            assert_eq!(run(args).unwrap(), ExitCode::SUCCESS);
            let read = |path: &str| std::fs::read_to_string(project_dir.join(path)).unwrap();
            // The contract the project builds against has the world it targets.
            let wit = read("wit/plugin.wit");
            assert!(wit.contains(&format!("\nworld {world} {{")), "{name}");
            let readme = read("README.md");
            assert!(readme.contains(&format!("world `{world}`")), "{readme}");
            let source = read(source);
            match lang {
                Lang::Rust => {
                    assert!(source.contains(&format!("dsh_plugin::export!({world}: Plugin);")));
                    assert!(read("Cargo.toml").contains(&format!("name = \"{name}\"")));
                    assert!(read("sdk/src/lib.rs").contains(&format!("pub mod {world} {{")));
                }
                _ => assert!(readme.contains(&format!("-w {world} componentize app"))),
            }
        }
    }
}
