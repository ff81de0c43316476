//! `dsh plugin`: working on one plugin. `dsh plugin new` writes a project
//! ([`super::plugin_new`]); `dsh plugin check FILE` loads a component
//! through the same path `dsh serve` does (compile through the cache, contract version,
//! grants, link, `describe()`, schema validation by the registry) and prints what it
//! found: its kind and contract version, its tools and schemas, its imports, the
//! `dsh.toml` grant lines it needs, its size and compile time, or why it is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use dsh::config::Config;
use dsh::engine::cache::CacheOutcome;
use dsh::engine::plugin::{ComponentBytes, LoadError, Plugin, PluginSource};
use dsh::engine::Runtime;
use dsh::registry::Registry;
use dsh::services::Services;

use super::{print, Globals};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Load a plugin file as `dsh serve` would and print what it is and needs
    ///
    /// Prints its kind (tool, guard, middleware, result-filter, observer) and contract version, its tools with
    /// their schemas (validated as at load), its imports and the `dsh.toml` grant lines
    /// it needs, its size and compile time. Exit status 1 when `dsh serve` would refuse
    /// it under the configuration in use, with the reason.
    Check(CheckArgs),
    /// Write a new plugin project (Rust, Python or JavaScript; a tool, guard, middleware,
    /// result filter or observer) that builds with one command, printed and in its README
    New(super::plugin_new::NewArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    /// The component (`.wasm`)
    file: PathBuf,
    /// The plugin's name (its `[plugins.NAME]` section) [default: the file's stem]
    #[arg(long)]
    name: Option<String>,
    /// Print JSON: {file, name, size_bytes, compile_ms, compile_cache, kind, contract,
    /// tools, imports, grant_lines, notes, missing_grants, loads, refused}
    #[arg(long)]
    json: bool,
}

/// What `dsh plugin check` found.
#[derive(serde::Serialize)]
struct Report {
    file: PathBuf,
    name: String,
    size_bytes: usize,
    digest: String,
    /// Compiling (or reading from the compile cache), in milliseconds.
    compile_ms: f64,
    /// `miss` (compiled now), `hit` (read from the cache), `corrupt`, `disabled`.
    compile_cache: Option<&'static str>,
    kind: Option<String>,
    contract: Option<String>,
    tools: Vec<ToolReport>,
    /// Everything the component imports (WIT names).
    imports: Vec<String>,
    /// The `dsh.toml` lines that grant what it imports.
    grant_lines: Vec<String>,
    /// What its imports mean under the configuration in use (a filesystem import
    /// without a directory grant reaches nothing).
    notes: Vec<String>,
    /// Why the configuration in use does not grant it enough, with the lines to add.
    missing_grants: Option<String>,
    /// Whether `dsh serve` would load it under the configuration in use.
    loads: bool,
    /// Why it is refused (other than missing grants).
    refused: Option<String>,
}

#[derive(serde::Serialize)]
struct ToolReport {
    name: String,
    description: String,
    idempotent: bool,
    input_schema: serde_json::Value,
    output_schema: Option<serde_json::Value>,
}

pub async fn run(globals: &Globals, args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Command::Check(args) => check(globals, args).await,
        Command::New(args) => super::plugin_new::run(args),
    }
}

async fn check(globals: &Globals, args: CheckArgs) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let name = match args.name.clone() {
        Some(name) => name,
        None => args
            .file
            .file_stem()
            .and_then(|s| s.to_str())
            .context("the file has no name to take the plugin's name from; give --name")?
            .to_string(),
    };
    let config = match globals.config_path() {
        Some(path) => Config::load(&path)?,
        None => Config::default(),
    };
    let state_dir = globals.state_dir();
    dsh::session::prepare_state_dir(&state_dir)?;
    let spill = tempfile_dir()?;
    let services = Services::new(&config.services(), spill.clone())?;
    let runtime = Arc::new(Runtime::new(services.clone(), Some(state_dir))?);
    let report = inspect(&runtime, &config, name, &args.file, bytes).await;
    services.shutdown();
    let _ = std::fs::remove_dir_all(&spill);
    if args.json {
        print::json(&report)?;
    } else {
        print_report(&report);
    }
    Ok(if report.loads {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A private scratch directory for the services' spill files (a check runs no job).
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("dsh-plugin-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

async fn inspect(
    runtime: &Arc<Runtime>,
    config: &Config,
    name: String,
    file: &std::path::Path,
    bytes: Vec<u8>,
) -> Report {
    let bytes = ComponentBytes::from(bytes);
    let file_digest = bytes.digest().to_string();
    let mut report = Report {
        file: file.to_path_buf(),
        name: name.clone(),
        size_bytes: bytes.bytes().len(),
        digest: file_digest.clone(),
        compile_ms: 0.0,
        compile_cache: None,
        kind: None,
        contract: None,
        tools: Vec::new(),
        imports: Vec::new(),
        grant_lines: Vec::new(),
        notes: Vec::new(),
        missing_grants: None,
        loads: false,
        refused: None,
    };
    // Compile (or read the cache) first, timed; the load below then reads the cache.
    let started = Instant::now();
    let compiled = {
        let (engine, cache, bytes) = (runtime.engine.clone(), runtime.cache.clone(), bytes.clone());
        tokio::task::spawn_blocking(move || cache.load(&engine, &bytes)).await
    };
    report.compile_ms = started.elapsed().as_secs_f64() * 1000.0;
    if let Ok(Ok((component, outcome))) = compiled {
        report.compile_cache = Some(match outcome {
            CacheOutcome::Shared => "shared",
            CacheOutcome::Hit => "hit",
            CacheOutcome::Miss => "miss",
            CacheOutcome::Precompiled => "precompiled",
            CacheOutcome::Corrupt => "corrupt",
            CacheOutcome::Disabled => "disabled",
        });
        report.imports = component
            .component_type()
            .imports(&runtime.engine)
            .map(|(import, _)| import.to_string())
            .collect();
    }
    let plugin_config = config.plugin(&name, &file_digest);
    report.grant_lines = grant_lines(&name, &report.imports, &plugin_config);
    report.notes = filesystem_note(&report.imports, &plugin_config)
        .into_iter()
        .collect();
    let source = PluginSource::Path(file.to_path_buf());
    let mut loaded = Plugin::load(
        runtime,
        &name,
        source.clone(),
        bytes.clone(),
        plugin_config.clone(),
    )
    .await;
    let mut granted = true;
    if let Err(LoadError::NotGranted(why)) = &loaded {
        // Say what else it is too: load it again with what it imports granted.
        report.missing_grants = Some(why.clone());
        granted = false;
        let mut widened = plugin_config.clone();
        let mut interfaces: BTreeSet<String> = widened
            .interfaces
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        interfaces.extend(host_interfaces(&report.imports).map(str::to_string));
        widened.interfaces = Some(interfaces.into_iter().collect());
        loaded = Plugin::load(runtime, &name, source, bytes, widened).await;
    }
    let plugin = match loaded {
        Ok(plugin) => Arc::new(plugin),
        Err(error) => {
            report.refused = Some(error.to_string());
            return report;
        }
    };
    report.kind = Some(plugin.kind().to_string());
    report.contract = Some(format!("dsh:plugin@{}", plugin.version));
    report.tools = plugin
        .specs
        .iter()
        .map(|spec| ToolReport {
            name: spec.name.clone(),
            description: spec.description.clone(),
            idempotent: spec.idempotent,
            input_schema: spec.input_schema.clone(),
            output_schema: spec.output_schema.clone(),
        })
        .collect();
    // The registry validates the manuals exactly as it does for `dsh serve`.
    let registry = Registry::new(BTreeMap::new());
    match registry.register(plugin) {
        Ok(()) => report.loads = granted,
        Err(error) => report.refused = Some(error.to_string()),
    }
    report
}

/// The `dsh:plugin` host interfaces among `imports` (not `types`), by bare name.
fn host_interfaces(imports: &[String]) -> impl Iterator<Item = &str> {
    imports
        .iter()
        .filter_map(|import| import.strip_prefix("dsh:plugin/"))
        .map(|rest| rest.split('@').next().unwrap_or(rest))
        .filter(|interface| *interface != "types")
}

/// The host interfaces among `imports` that need a grant (progress and tally need none,
/// nor does `next`, the middleware world's own).
fn granted_interfaces(imports: &[String]) -> BTreeSet<&str> {
    host_interfaces(imports)
        .filter(|interface| *interface != "next")
        .filter(|interface| dsh::services::capabilities::needs_grant(interface))
        .collect()
}

/// The filesystem interfaces among `imports` (`wasi:filesystem/types`, `.../preopens`).
fn filesystem_imports(imports: &[String]) -> Vec<&str> {
    imports
        .iter()
        .filter(|import| import.starts_with("wasi:filesystem/"))
        .map(String::as_str)
        .collect()
}

/// What a filesystem import means when the plugin is granted no directory: the start
/// code of wasi-libc (C, C++) and of Rust's std imports these interfaces whether
/// or not the plugin opens a file, and without a preopened directory they reach nothing.
fn filesystem_note(imports: &[String], config: &dsh::config::PluginConfig) -> Option<String> {
    let filesystem = filesystem_imports(imports);
    if filesystem.is_empty() || !config.fs.is_empty() {
        return None;
    }
    Some(format!(
        "it imports {} but is granted no directory: an import without a preopen reaches \
         nothing (wasi-libc's and Rust std's start code import these whether or not the \
         plugin opens a file), so it needs no fs grant to load or run; grant `fs` only \
         for the directories it needs to read or write",
        filesystem.join(", ")
    ))
}

/// The `dsh.toml` section granting what `imports` need: the host interfaces, and, when
/// it imports the filesystem, its directory grants, or none (a commented-out line to
/// fill in if it does read files: an import without a preopen reaches nothing).
fn grant_lines(name: &str, imports: &[String], config: &dsh::config::PluginConfig) -> Vec<String> {
    let interfaces = granted_interfaces(imports);
    let mut lines = vec![format!("[plugins.{name}]")];
    let quoted: Vec<String> = interfaces.iter().map(|i| format!("{i:?}")).collect();
    lines.push(format!("interfaces = [{}]", quoted.join(", ")));
    if !filesystem_imports(imports).is_empty() {
        if config.fs.is_empty() {
            lines.push(
                "# fs = [{ path = \"/ABSOLUTE/DIR\", mode = \"ro\" }]  # only if it reads files"
                    .into(),
            );
        } else {
            let dirs: Vec<String> = config
                .fs
                .iter()
                .map(|grant| {
                    let mode = match grant.mode {
                        dsh::config::FsMode::ReadOnly => "ro",
                        dsh::config::FsMode::ReadWrite => "rw",
                    };
                    format!(
                        "{{ path = {:?}, mode = \"{mode}\" }}",
                        grant.path.display().to_string()
                    )
                })
                .collect();
            lines.push(format!("fs = [{}]", dirs.join(", ")));
        }
    }
    lines
}

fn print_report(report: &Report) {
    println!("file      {}", report.file.display());
    println!("name      {}", report.name);
    println!(
        "size      {} bytes ({:.1} MiB), sha256 {}",
        report.size_bytes,
        report.size_bytes as f64 / (1 << 20) as f64,
        &report.digest[..12]
    );
    println!(
        "compile   {:.0} ms ({})",
        report.compile_ms,
        match report.compile_cache {
            Some("hit") => "read from the compile cache",
            Some("miss") => "compiled now, cached",
            Some("precompiled") => "precompiled when dsh was built, cached",
            Some("corrupt") => "cache entry corrupt, replaced",
            Some("shared") => "shared with a loaded plugin of the same bytes",
            Some(_) => "no cache",
            None => "failed",
        }
    );
    if let Some(kind) = &report.kind {
        println!("kind      {kind}");
    }
    if let Some(contract) = &report.contract {
        println!("contract  {contract}");
    }
    if !report.imports.is_empty() {
        println!("imports");
        for import in &report.imports {
            println!("  {import}");
        }
    }
    for tool in &report.tools {
        println!();
        println!(
            "tool {}{}",
            tool.name,
            if tool.idempotent { " (idempotent)" } else { "" }
        );
        println!("  {}", tool.description);
        println!("  input schema: {}", tool.input_schema);
        if let Some(output) = &tool.output_schema {
            println!("  output schema: {output}");
        }
    }
    if !report.imports.is_empty() {
        println!();
        println!("grants it needs (dsh.toml):");
        for line in &report.grant_lines {
            println!("  {line}");
        }
        for note in &report.notes {
            println!("note: {note}");
        }
    }
    println!();
    if let Some(missing) = &report.missing_grants {
        println!("NOT GRANTED: {missing}");
    }
    match &report.refused {
        Some(reason) => println!("REFUSED: {reason}"),
        None if report.loads => println!("OK: dsh serve would load it"),
        None => println!("REFUSED until granted (above)"),
    }
}
