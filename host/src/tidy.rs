//! The tidy test: rules about the source itself, checked on every `cargo test` (as
//! rust-analyzer's tidy does). Every Rust file starts with a `//!` doc saying what it
//! owns; a native capability module (anything under `services/` but a `wit.rs` binding)
//! never names wasmtime or the generated bindings; and a module never imports a module
//! of a higher layer ([`LAYERS`]).

use std::path::{Path, PathBuf};

/// The host library's layers, lowest first: a module may use its own layer and those
/// below it, never one above.
const LAYERS: &[&[&str]] = &[
    // Foundation: the error vocabulary, a call's context, bounded output, name globs,
    // private files, dsh's own files.
    &["error", "call", "output", "glob", "private", "own_files"],
    // The contract's generated bindings.
    &["bindings"],
    // The capabilities: native state, their sections, their bindings.
    &["services"],
    // dsh.toml, whose sections include the capabilities'.
    &["config"],
    // The WebAssembly engine and the session (workspace, event log, state directory).
    &["engine", "session"],
    // Declaration: the catalog of tools.
    &["registry"],
    // Dispatch: the call pipeline.
    &["pipeline"],
    // Assembly: a host, and what keeps it current or lets the CLI ask it.
    &["host", "reload", "config_watch", "control"],
    // The MCP front end.
    &["mcp"],
];

/// Macros exported at the crate root, and the module that defines each.
const ROOT_MACROS: &[(&str, &str)] = &[
    ("for_each_capability", "services"),
    ("for_each_error_code", "error"),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The source text without comments (line comments; doc comments are line comments).
fn code_only(source: &str) -> String {
    source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate modules `source` names by `crate::NAME` (macros resolved to their module).
fn crate_modules_named(source: &str) -> Vec<String> {
    let code = code_only(source);
    let mut names = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let module = ROOT_MACROS
            .iter()
            .find(|(mac, _)| *mac == name)
            .map_or(name.clone(), |(_, module)| module.to_string());
        if !module.is_empty() && !names.contains(&module) {
            names.push(module);
        }
    }
    names
}

/// Why a native capability module's `source` breaks the rule, if it does.
fn native_service_violation(source: &str) -> Option<String> {
    let code = code_only(source);
    for forbidden in ["wasmtime", "crate::bindings", "crate::engine"] {
        if code.contains(forbidden) {
            return Some(format!("names `{forbidden}`"));
        }
    }
    None
}

/// Why `source` (of a file in top-level module `module`) imports upwards, if it does.
fn layer_violations(module: &str, source: &str) -> Vec<String> {
    let Some(own) = layer_of(module) else {
        return Vec::new();
    };
    crate_modules_named(source)
        .into_iter()
        .filter(|named| layer_of(named).is_some_and(|layer| layer > own))
        .map(|named| format!("`{module}` imports `{named}`, a higher layer"))
        .collect()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate is inside the repository")
        .to_path_buf()
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let root = repository();
    let mut files = Vec::new();
    for dir in ["host", "tests", "plugins", "examples"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    // A fragment pasted into another file by `include!` cannot carry an inner doc; it
    // starts with a plain comment instead.
    let included: Vec<String> = files
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|source| {
            source
                .lines()
                .filter_map(|line| line.split("include!(\"").nth(1))
                .filter_map(|rest| rest.split('"').next())
                .filter_map(|target| target.rsplit('/').next().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    let undocumented: Vec<String> = files
        .iter()
        .filter(|path| {
            let source = std::fs::read_to_string(path).unwrap_or_default();
            let source = source.trim_start();
            let fragment = path
                .file_name()
                .is_some_and(|name| included.iter().any(|i| *i == *name.to_string_lossy()));
            !(source.starts_with("//!") || fragment && source.starts_with("//"))
        })
        .map(|path| {
            path.strip_prefix(&root)
                .unwrap_or(path)
                .display()
                .to_string()
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "files without a `//!` doc saying what they own: {undocumented:?}"
    );
}

#[test]
fn native_capability_modules_never_name_wasmtime() {
    let services = repository().join("host/src/services");
    let mut files = Vec::new();
    rust_files(&services, &mut files);
    let broken: Vec<String> = files
        .iter()
        .filter(|path| path.file_name().is_some_and(|n| n != "wit.rs"))
        .filter_map(|path| {
            let source = std::fs::read_to_string(path).ok()?;
            native_service_violation(&source).map(|why| format!("{}: {why}", path.display()))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "native capability modules must not know wasmtime (only `wit.rs` bindings may): {broken:?}"
    );
}

#[test]
fn no_module_imports_a_higher_layer() {
    let src = repository().join("host/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut broken = Vec::new();
    for path in &files {
        let relative = path.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy();
        let module = module.trim_end_matches(".rs");
        let source = std::fs::read_to_string(path).unwrap();
        for why in layer_violations(module, &source) {
            broken.push(format!("{}: {why}", relative.display()));
        }
    }
    let unplaced: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&src).ok()?;
            let module = relative.components().next()?.as_os_str().to_string_lossy();
            let module = module.trim_end_matches(".rs").to_string();
            let root_files = ["lib", "main", "tidy", "cli"];
            (layer_of(&module).is_none() && !root_files.contains(&module.as_str()))
                .then_some(module)
        })
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of LAYERS: {unplaced:?}"
    );
    assert!(broken.is_empty(), "imports that go up a layer: {broken:#?}");
}

#[test]
fn the_rules_catch_what_they_are_for() {
    assert!(native_service_violation("use wasmtime::component::Linker;\n").is_some());
    assert!(native_service_violation("use crate::bindings::dsh::plugin;\n").is_some());
    assert!(native_service_violation("//! no wasmtime here\nuse std::fs;\n").is_none());
    assert_eq!(
        layer_violations("services", "use crate::engine::store::CallState;\n"),
        ["`services` imports `engine`, a higher layer"]
    );
    assert!(layer_violations("engine", "use crate::services::Services;\n").is_empty());
    assert_eq!(
        layer_violations("error", "crate::for_each_capability!(x);\n"),
        ["`error` imports `services`, a higher layer"]
    );
}
