//! The tidy test: rules about the source itself, checked on every `cargo test` (as
//! rust-analyzer's tidy does). Every Rust file starts with a `//!` doc saying what it
//! owns; a native capability module (anything under `services/` but a `wit.rs` binding)
//! never names wasmtime or the generated bindings; a module never imports a module
//! of a higher layer ([`LAYERS`]); and every promise the docs (`README.md`,
//! `ARCHITECTURE.md` and the book's pages under `docs/src/`) tag `<!-- promise: ID -->` has
//! a row in `tests/README.md` naming tests that exist.

use std::path::{Path, PathBuf};

/// The host library's layers, lowest first: a module may use its own layer and those
/// below it, never one above.
const LAYERS: &[&[&str]] = &[
    // Foundation: the error vocabulary, the generated pages' check, a call's context,
    // bounded output, name globs, private files, dsh's own files, the metrics registry,
    // the traces' spans.
    &[
        "error",
        "generated_page",
        "call",
        "output",
        "glob",
        "private",
        "own_files",
        "metrics",
        "tls",
        "traces",
    ],
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
    &["host", "reload", "config_watch", "control", "upgrade"],
    // The front ends: MCP, and the operator's console beside it on the HTTP listener.
    &["mcp", "console"],
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

pub(crate) fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate is inside the repository")
        .to_path_buf()
}

/// The source folders of the crates whose modules are the layers of [`LAYERS`], lowest
/// first (the launch platform below them has its own rules).
const LAYERED_SOURCES: &[&str] = &["capabilities/src", "engine/src", "pipeline/src", "host/src"];

/// A Rust file of a layered crate: its path, and its path inside its crate's `src`
/// (`services/process/mod.rs`), which names its top-level module.
struct LayeredFile {
    path: PathBuf,
    relative: String,
}

fn layered_files() -> Vec<LayeredFile> {
    let root = repository();
    let mut found = Vec::new();
    for dir in LAYERED_SOURCES {
        let src = root.join(dir);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        found.extend(files.into_iter().map(|path| {
            LayeredFile {
                relative: path
                    .strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .to_string(),
                path,
            }
        }));
    }
    found
}

#[test]
fn every_rust_file_starts_with_a_module_doc() {
    let root = repository();
    let mut files = Vec::new();
    for dir in [
        "host",
        "pipeline",
        "engine",
        "capabilities",
        "launch",
        "tests",
        "plugins",
        "examples",
    ] {
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
    let services = repository().join("capabilities/src/services");
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
    let files = layered_files();
    assert!(files.len() > 100, "found only {} files", files.len());
    let module_of = |file: &LayeredFile| {
        let first = Path::new(&file.relative).components().next().unwrap();
        first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string()
    };
    let mut broken = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(&file.path).unwrap();
        for why in layer_violations(&module_of(file), &source) {
            broken.push(format!("{}: {why}", file.path.display()));
        }
    }
    let unplaced: Vec<String> = files
        .iter()
        .map(module_of)
        .filter(|module| {
            let root_files = ["lib", "main", "tidy", "tidy_docs", "cli"];
            layer_of(module).is_none() && !root_files.contains(&module.as_str())
        })
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of LAYERS: {unplaced:?}"
    );
    assert!(broken.is_empty(), "imports that go up a layer: {broken:#?}");
}

/// dsh's crates, lowest first. Each depends on every crate below it, so a dependency
/// running back up (a lower crate naming a higher one) is a cycle, which Cargo refuses:
/// the graph holds the layering, not this test.
const CRATE_LAYERS: &[(&str, &str)] = &[
    ("launch", "dsh-launch"),
    ("capabilities", "dsh-capabilities"),
    ("engine", "dsh-engine"),
    ("pipeline", "dsh-pipeline"),
    ("host", "dsh"),
];

#[test]
fn each_crate_depends_on_every_crate_below_it() {
    let root = repository();
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let mut members: Vec<&str> = workspace["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|member| member.as_str())
        .collect();
    members.sort();
    let mut layered: Vec<&str> = CRATE_LAYERS.iter().map(|(dir, _)| *dir).collect();
    layered.sort();
    assert_eq!(
        members, layered,
        "every workspace member has its place in CRATE_LAYERS"
    );
    for (at, (dir, name)) in CRATE_LAYERS.iter().enumerate() {
        let manifest: toml::Table =
            toml::from_str(&std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap())
                .unwrap();
        assert_eq!(manifest["package"]["name"].as_str(), Some(*name));
        let mut ours: Vec<&str> = manifest
            .get("dependencies")
            .and_then(|deps| deps.as_table())
            .map(|deps| {
                deps.keys()
                    .map(String::as_str)
                    .filter(|dep| CRATE_LAYERS.iter().any(|(_, n)| n == dep))
                    .collect()
            })
            .unwrap_or_default();
        ours.sort();
        let mut below: Vec<&str> = CRATE_LAYERS[..at].iter().map(|(_, n)| *n).collect();
        below.sort();
        assert_eq!(
            ours, below,
            "{dir}/Cargo.toml must depend on exactly the crates below it"
        );
    }
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

/// The one crate with `unsafe` code and `libc`: the launch platform (spawning between
/// `clone` and `exec`, namespaces, cgroups, signals, the PTY, loading compiled code).
/// Every other crate of the workspace forbids `unsafe` at its roots, so the compiler
/// holds the rule, and depends on `libc` in its tests at most.
const UNSAFE_CRATE: &str = "launch";

#[test]
fn unsafe_code_is_only_in_the_launch_crate() {
    let root = repository();
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let members: Vec<&str> = workspace["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|member| member.as_str())
        .collect();
    assert!(members.contains(&UNSAFE_CRATE) && members.contains(&"host"));
    let mut broken = Vec::new();
    for member in members.iter().filter(|member| **member != UNSAFE_CRATE) {
        for crate_root in ["src/lib.rs", "src/main.rs"] {
            let Ok(source) = std::fs::read_to_string(root.join(member).join(crate_root)) else {
                continue;
            };
            if !code_only(&source).contains("#![forbid(unsafe_code)]") {
                broken.push(format!("{member}/{crate_root} does not forbid unsafe code"));
            }
        }
        let manifest: toml::Table =
            toml::from_str(&std::fs::read_to_string(root.join(member).join("Cargo.toml")).unwrap())
                .unwrap();
        if manifest
            .get("dependencies")
            .and_then(|deps| deps.as_table())
            .is_some_and(|deps| deps.contains_key("libc"))
        {
            broken.push(format!("{member}/Cargo.toml depends on libc"));
        }
    }
    assert!(
        broken.is_empty(),
        "`unsafe` and `libc` are only in the launch platform ({UNSAFE_CRATE}/): use a safe \
         wrapper (its own, rustix, std) or move the code there: {broken:?}"
    );
}

/// The files that may start a process: the launcher and the spawner below it, in the
/// launch platform.
const SPAWNERS: &[&str] = &["launch/src/launcher.rs", "launch/src/spawn.rs"];

/// What starts a process, named in code.
const SPAWNING: &[&str] = &[
    "spawn::spawn",
    "spawn_with_fd3",
    "SpawnSpec",
    "process::Command",
    "Command::new",
    "libc::fork",
    "libc::vfork",
    "libc::clone",
    "posix_spawn",
    "libc::execv",
];

/// What `source` (a file of dsh but a spawner) names that starts a process, in its code
/// before its tests (`#[cfg(test)]`: tests start what they like).
fn spawn_violations(source: &str) -> Vec<&'static str> {
    let code = code_only(source);
    let code = code.split("#[cfg(test)]").next().unwrap_or_default();
    SPAWNING
        .iter()
        .copied()
        .filter(|named| code.contains(named))
        .collect()
}

/// The files of the layered crates (but `exempt` ones, named by their path inside their
/// crate's `src`, and this one) whose source `breaks` a rule, each as `FILE: what breaks it`.
fn layered_files_breaking(exempt: &[&str], breaks: impl Fn(&str) -> Option<String>) -> Vec<String> {
    layered_files()
        .iter()
        .filter_map(|file| {
            if exempt.contains(&file.relative.as_str()) || file.relative == "tidy.rs" {
                return None;
            }
            let source = std::fs::read_to_string(&file.path).ok()?;
            breaks(&source).map(|what| format!("{}: {what}", file.path.display()))
        })
        .collect()
}

#[test]
fn only_the_launcher_starts_processes() {
    let root = repository();
    let mut files = Vec::new();
    for dir in LAYERED_SOURCES.iter().chain(&["launch/src"]) {
        rust_files(&root.join(dir), &mut files);
    }
    let broken: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&root).ok()?.to_string_lossy().to_string();
            if SPAWNERS.contains(&relative.as_str()) || relative == "host/src/tidy.rs" {
                return None;
            }
            let named = spawn_violations(&std::fs::read_to_string(path).ok()?);
            (!named.is_empty()).then(|| format!("{relative}: names {named:?}"))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "only the launcher (launch/src/launcher.rs) starts processes: go through \
         `Launch::start` (or `launcher::start_uncontained` for what must outlive dsh): {broken:#?}"
    );
}

/// Where an executor may be chosen from a scope and a tool: the call's context, and
/// the process configuration that holds the rule.
const EXECUTOR_CHOOSERS: &[&str] = &[
    "services/mod.rs",
    "services/process/mod.rs",
    "services/process/config.rs",
];

#[test]
fn the_executor_is_chosen_in_one_place() {
    let broken = layered_files_breaking(EXECUTOR_CHOOSERS, |source| {
        code_only(source)
            .contains("executor_for(")
            .then(|| "calls `executor_for`".to_string())
    });
    assert!(
        broken.is_empty(),
        "the executor of a call is chosen in one place, `CallCtx::executor` \
         (services/mod.rs): use it instead of `executor_for` in {broken:#?}"
    );
}

#[test]
fn the_spawn_rule_catches_what_it_is_for() {
    assert_eq!(
        spawn_violations("let child = spawn::spawn(&spec)?;\n"),
        ["spawn::spawn"]
    );
    assert_eq!(
        spawn_violations("let c = std::process::Command::new(\"sh\");\n"),
        ["process::Command", "Command::new"]
    );
    assert!(spawn_violations("// spawn::spawn in a comment\nlet x = 1;\n").is_empty());
    assert!(spawn_violations(
        "fn f() {}\n#[cfg(test)]\nmod tests { fn t() { Command::new(\"x\"); } }\n"
    )
    .is_empty());
}

/// The documents whose promises are tagged `<!-- promise: ID -->`, right after the
/// sentence that makes the promise: the README, the code map, and every page of the book
/// (`docs/src/`), as paths from the repository's root, in a fixed order.
pub(crate) fn promise_docs() -> Vec<String> {
    let mut pages = Vec::new();
    markdown_files(&repository().join(BOOK_PAGES), &mut pages);
    let mut docs = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    docs.extend(pages.iter().map(|page| relative(page)));
    docs
}

/// `path` (a file of the repository) from the repository's root.
pub(crate) fn relative(path: &Path) -> String {
    path.strip_prefix(repository())
        .expect("a file of the repository")
        .to_string_lossy()
        .into_owned()
}

/// Where the book's pages are (`docs/`, built by `mdbook build docs`).
pub(crate) const BOOK_PAGES: &str = "docs/src";

/// The book's pages generated from the code (the references), checked against it by
/// their own tests: they describe, they do not promise.
pub(crate) const GENERATED_PAGES: &str = "docs/src/reference/";

/// Every `.md` file under `dir`, sorted.
pub(crate) fn markdown_files(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            markdown_files(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            into.push(path);
        }
    }
}

/// The table naming, for each tagged promise, the tests that attack it.
pub(crate) const PROMISE_TABLE: &str = "tests/README.md";

const PROMISE_TAG: &str = "<!-- promise: ";

fn is_promise_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('-')
        && !id.ends_with('-')
        && !id.contains("--")
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The promise ids `doc` tags, in order, and what is wrong with any malformed tag.
fn promise_tags(doc: &str) -> (Vec<String>, Vec<String>) {
    let (mut ids, mut malformed) = (Vec::new(), Vec::new());
    let mut rest = doc;
    while let Some(at) = rest.find(PROMISE_TAG) {
        rest = &rest[at + PROMISE_TAG.len()..];
        let Some(end) = rest.find("-->") else {
            malformed.push("a `<!-- promise:` tag is never closed by `-->`".to_string());
            break;
        };
        let id = rest[..end].trim();
        if is_promise_id(id) {
            ids.push(id.to_string());
        } else {
            malformed.push(format!(
                "`<!-- promise: {id} -->`: an id is kebab-case (`a-z`, `0-9`, `-`)"
            ));
        }
        rest = &rest[end..];
    }
    (ids, malformed)
}

/// The rows of the promise table: a line `| \`ID\` | the promise | \`TEST\`<br>… |`, each
/// test a code span `path::name`.
fn promise_rows(table: &str) -> Vec<(String, Vec<String>)> {
    table
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let id = cells[0].trim_matches('`').to_string();
            let tests = cells
                .get(2)
                .map(|cell| {
                    cell.split('`')
                        .skip(1)
                        .step_by(2)
                        .filter(|span| !span.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            (id, tests)
        })
        .collect()
}

/// Whether `source` (the file at `path`) defines the test `name`: `fn NAME` in Rust,
/// `def NAME` in Python, the title string of a `node:test` test in JavaScript.
fn defines_test(path: &str, source: &str, name: &str) -> Result<bool, String> {
    let followed_by_non_ident = |prefix: &str| {
        let needle = format!("{prefix}{name}");
        source.match_indices(&needle).any(|(at, _)| {
            let before = source[..at].chars().next_back();
            let after = source[at + needle.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    if path.ends_with(".rs") {
        Ok(followed_by_non_ident("fn "))
    } else if path.ends_with(".py") {
        Ok(followed_by_non_ident("def "))
    } else if [".mjs", ".js", ".ts"].iter().any(|e| path.ends_with(e)) {
        Ok(['\'', '"', '`']
            .iter()
            .any(|q| source.contains(&format!("{q}{name}{q}"))))
    } else {
        Err(format!(
            "`{path}` is not a Rust, Python or JavaScript test file"
        ))
    }
}

/// What breaks the promise rule: every tag in `docs` (name, text) has a row in `table`
/// naming at least one test, every row's id is tagged, and every named test exists
/// (`read` gives a repository file's text).
fn promise_violations(
    docs: &[(&str, &str)],
    table: &str,
    read: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut broken = Vec::new();
    let mut tagged: Vec<(String, &str)> = Vec::new();
    for (name, text) in docs {
        let (ids, malformed) = promise_tags(text);
        broken.extend(malformed.into_iter().map(|why| format!("{name}: {why}")));
        for id in ids {
            if let Some((_, first)) = tagged.iter().find(|(seen, _)| *seen == id) {
                broken.push(format!(
                    "promise `{id}` is tagged twice ({first} and {name}): give each promise its own id"
                ));
            } else {
                tagged.push((id, name));
            }
        }
    }
    let rows = promise_rows(table);
    for (at, (id, _)) in rows.iter().enumerate() {
        if rows[..at].iter().any(|(seen, _)| seen == id) {
            broken.push(format!(
                "{PROMISE_TABLE} has two rows for `{id}`: merge them"
            ));
        }
    }
    for (id, doc) in &tagged {
        match rows.iter().find(|(row, _)| row == id) {
            None => broken.push(format!(
                "{doc} tags promise `{id}` but {PROMISE_TABLE} has no row for it: add \
                 ``| `{id}` | the promise in a few words | `path::test_name` |``, naming the \
                 test that attacks it"
            )),
            Some((_, tests)) if tests.is_empty() => broken.push(format!(
                "{PROMISE_TABLE}: the row for `{id}` names no test: name the test that attacks \
                 it as `path::test_name`"
            )),
            Some(_) => {}
        }
    }
    for (id, tests) in &rows {
        if !tagged.iter().any(|(tag, _)| tag == id) {
            broken.push(format!(
                "{PROMISE_TABLE} has a row for `{id}`, but no document tags \
                 `<!-- promise: {id} -->`: tag the promise's sentence, or remove the stale row"
            ));
        }
        for test in tests {
            let Some((path, name)) = test.split_once("::") else {
                broken.push(format!(
                    "{PROMISE_TABLE}: `{id}` names `{test}`: name a test as `path::test_name`"
                ));
                continue;
            };
            // A Rust or Python test may be named with its module or class path.
            let name = if path.ends_with(".rs") || path.ends_with(".py") {
                name.rsplit("::").next().unwrap_or(name)
            } else {
                name
            };
            let Some(source) = read(path) else {
                broken.push(format!(
                    "{PROMISE_TABLE}: `{id}` names `{test}`, but there is no file `{path}`: \
                     was it moved? update the row"
                ));
                continue;
            };
            match defines_test(path, &source, name) {
                Ok(true) => {}
                Ok(false) => broken.push(format!(
                    "{PROMISE_TABLE}: `{id}` names `{test}`, but `{path}` has no test `{name}`: \
                     was it renamed or removed? update the row to the test that attacks the promise"
                )),
                Err(why) => broken.push(format!("{PROMISE_TABLE}: `{id}` names `{test}`: {why}")),
            }
        }
    }
    broken
}

#[test]
fn every_tagged_promise_names_a_test_that_exists() {
    let root = repository();
    let texts: Vec<(String, String)> = promise_docs()
        .into_iter()
        .map(|name| {
            let text =
                std::fs::read_to_string(root.join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, text)
        })
        .collect();
    let docs: Vec<(&str, &str)> = texts
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let table = std::fs::read_to_string(root.join(PROMISE_TABLE))
        .unwrap_or_else(|e| panic!("{PROMISE_TABLE}: {e}"));
    let tags: usize = docs
        .iter()
        .map(|(_, text)| promise_tags(text).0.len())
        .sum();
    assert!(tags > 50, "found only {tags} promise tags");
    let broken = promise_violations(&docs, &table, |path| {
        std::fs::read_to_string(root.join(path)).ok()
    });
    assert!(
        broken.is_empty(),
        "promises and the tests that attack them ({PROMISE_TABLE} explains the scheme):\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_promise_rule_catches_what_it_is_for() {
    let test_file = "#[test]\nfn a_run_dies_whole() {}\nfn helper() {}\n";
    let read = |path: &str| (path == "tests/e2e/x.rs").then(|| test_file.to_string());
    let doc = "Runs die whole. <!-- promise: runs-die-whole -->\n";
    let table = "| id | promise | tests |\n|---|---|---|\n\
                 | `runs-die-whole` | runs die whole | `tests/e2e/x.rs::a_run_dies_whole` |\n";
    assert!(promise_violations(&[("README.md", doc)], table, read).is_empty());

    // A tag added without a row.
    let tagged_more = format!("{doc}Jobs die too. <!-- promise: jobs-die -->\n");
    let broken = promise_violations(&[("README.md", &tagged_more)], table, read);
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert!(broken[0].contains("`jobs-die`") && broken[0].contains("no row"));

    // A test renamed, a file gone, a row naming no test, a stale row.
    let renamed = table.replace("a_run_dies_whole`", "a_run_dies_in_one_piece`");
    let broken = promise_violations(&[("README.md", doc)], &renamed, read);
    assert!(broken.len() == 1 && broken[0].contains("no test `a_run_dies_in_one_piece`"));
    let moved = table.replace("e2e/x.rs", "e2e/y.rs");
    let broken = promise_violations(&[("README.md", doc)], &moved, read);
    assert!(broken.len() == 1 && broken[0].contains("no file `tests/e2e/y.rs`"));
    let empty = table.replace("`tests/e2e/x.rs::a_run_dies_whole`", "");
    let broken = promise_violations(&[("README.md", doc)], &empty, read);
    assert!(broken.len() == 1 && broken[0].contains("names no test"));
    let broken = promise_violations(&[("README.md", "no tags here\n")], table, read);
    assert!(broken.len() == 1 && broken[0].contains("stale row"));

    // A name is a whole word; a malformed or doubled tag is caught.
    assert!(!defines_test("x.rs", test_file, "a_run").unwrap());
    assert!(defines_test("x.py", "def test_a(server):\n", "test_a").unwrap());
    assert!(defines_test("x.mjs", "test('a job ends', async () => {})", "a job ends").unwrap());
    assert!(promise_tags("<!-- promise: Not_Kebab -->").1.len() == 1);
    let twice = promise_violations(&[("README.md", doc), ("ARCHITECTURE.md", doc)], table, read);
    assert!(twice.len() == 1 && twice[0].contains("tagged twice"));
}

/// What makes a sentence of the docs a promise, so that it needs a tag: a word that
/// guarantees (`never`, `always`, `cannot`, `nothing`, `at most`, `within 1 s`, `no other`,
/// `survives`, `refuses`, `is killed`, `fails with`, `up to 8`), or a configured limit
/// (`` `[section] key` ``). A sentence is the text between one end (`.`, `!`, `?` followed
/// by a space and a capital, a backtick, `(`, `*` or `<`) and the next, in a paragraph or
/// list item of prose: code blocks, tables and headings are not prose. A tag right after a
/// sentence's end covers that sentence.
const PROMISE_WORDS: &str = r"(?i)\b(never|always|cannot|nothing|at most|within \d|no other|survives?|refuses?|is refused|are refused|is killed|are killed|kills|fails? with|no core|up to \d)\b|`\[[a-z_.]+\] [a-z_]+`";

/// Sections (of the README or a page) that describe the tests and the benchmarks rather
/// than dsh: what they say is checked by running them, so their sentences are not promises.
const NOT_PROMISE_SECTIONS: &[&str] = &["## Test it"];

/// A sentence with a promise's words and no tag says so at its end instead, when it
/// is not one (a fact about the build, say): `<!-- not a promise: WHY -->`.
const NOT_A_PROMISE: &str = "<!-- not a promise: ";

/// The sentences of `doc`'s prose that read as promises ([`PROMISE_WORDS`]) and carry
/// neither a promise tag nor [`NOT_A_PROMISE`].
fn untagged_promises(doc: &str) -> Vec<String> {
    let words = regex::Regex::new(PROMISE_WORDS).expect("a valid pattern");
    let mut paragraphs: Vec<String> = Vec::new();
    let (mut fenced, mut skipped, mut current) = (false, false, String::new());
    let mut flush = |current: &mut String| {
        if !current.trim().is_empty() {
            paragraphs.push(std::mem::take(current));
        }
        current.clear();
    };
    for line in doc.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            flush(&mut current);
            continue;
        }
        if fenced {
            continue;
        }
        if line.starts_with('#') {
            flush(&mut current);
            if line.starts_with("## ") {
                skipped = NOT_PROMISE_SECTIONS.contains(&line.trim_end());
            }
            continue;
        }
        let trimmed = line.trim_start();
        if skipped || trimmed.is_empty() || trimmed.starts_with('|') {
            flush(&mut current);
            continue;
        }
        if trimmed.starts_with("- ") || trimmed.starts_with("* ") {
            flush(&mut current);
        }
        current.push_str(trimmed);
        current.push(' ');
    }
    flush(&mut current);
    let mut untagged = Vec::new();
    for paragraph in paragraphs {
        let sentences = sentences_of(&paragraph);
        for (at, sentence) in sentences.iter().enumerate() {
            let text = strip_leading_tag(sentence);
            let tag_follows = sentences
                .get(at + 1)
                .is_some_and(|next| next.starts_with("<!--"));
            let tagged = tag_follows
                || text.contains(PROMISE_TAG)
                || text.contains(NOT_A_PROMISE)
                || (at + 1 == sentences.len() && sentence.trim_end().ends_with("-->"));
            if !tagged && words.is_match(text) {
                untagged.push(text.trim().to_string());
            }
        }
    }
    untagged
}

/// `paragraph` cut after each sentence's end (see [`PROMISE_WORDS`]).
fn sentences_of(paragraph: &str) -> Vec<&str> {
    let bytes = paragraph.as_bytes();
    let mut sentences = Vec::new();
    let mut start = 0;
    for at in 0..bytes.len().saturating_sub(2) {
        let ends = matches!(bytes[at], b'.' | b'!' | b'?')
            && bytes[at + 1] == b' '
            && (bytes[at + 2].is_ascii_uppercase() || b"`(*<".contains(&bytes[at + 2]));
        if ends {
            sentences.push(paragraph[start..=at].trim());
            start = at + 2;
        }
    }
    sentences.push(paragraph[start..].trim());
    sentences.retain(|s| !s.is_empty());
    sentences
}

/// `sentence` without the tags at its start (they cover the sentence before it).
fn strip_leading_tag(sentence: &str) -> &str {
    let mut rest = sentence.trim_start();
    while rest.starts_with("<!--") {
        match rest.find("-->") {
            Some(end) => rest = rest[end + 3..].trim_start(),
            None => break,
        }
    }
    rest
}

/// The docs' promise sentences not tagged yet, each by its first words (one a line):
/// the debt [`every_promise_sentence_of_the_docs_is_tagged`] lets stand, and only shrink.
const UNTAGGED_DEBT: &str = "tests/untagged-promises.txt";

/// How much of a sentence names it in [`UNTAGGED_DEBT`].
const DEBT_KEY_CHARS: usize = 72;

fn debt_key(sentence: &str) -> String {
    sentence.chars().take(DEBT_KEY_CHARS).collect()
}

/// The book's pages that describe the tests and the benchmarks rather than dsh (see
/// [`NOT_PROMISE_SECTIONS`]).
const NOT_PROMISE_PAGES: &[&str] = &["docs/src/testing.md"];

#[test]
fn every_promise_sentence_of_the_docs_is_tagged() {
    let root = repository();
    let prose: Vec<String> = promise_docs()
        .into_iter()
        .filter(|doc| doc != "ARCHITECTURE.md" && !doc.starts_with(GENERATED_PAGES))
        .filter(|doc| !NOT_PROMISE_PAGES.contains(&doc.as_str()))
        .collect();
    assert!(prose.len() > 10, "the book's pages: {prose:?}");
    let debt = std::fs::read_to_string(root.join(UNTAGGED_DEBT)).unwrap_or_default();
    let owed: Vec<&str> = debt
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let untagged: Vec<String> = prose
        .iter()
        .flat_map(|doc| {
            let text = std::fs::read_to_string(root.join(doc)).unwrap();
            untagged_promises(&text)
        })
        .map(|sentence| debt_key(&sentence))
        .collect();
    let new: Vec<&String> = untagged
        .iter()
        .filter(|key| !owed.contains(&key.as_str()))
        .collect();
    let paid: Vec<&&str> = owed
        .iter()
        .filter(|key| !untagged.iter().any(|u| u == **key))
        .collect();
    assert!(
        new.is_empty() && paid.is_empty(),
        "sentences of the README and the book that read as promises but carry no `<!-- promise: ID -->` tag (tag \
         each and map it in {PROMISE_TABLE}, or end it with `<!-- not a promise: WHY -->`):\n- {}\n\
         and lines of {UNTAGGED_DEBT} whose sentence is tagged or gone now (remove them):\n- {}",
        new.iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n- "),
        paid.iter().map(|s| **s).collect::<Vec<_>>().join("\n- ")
    );
}

#[test]
fn the_untagged_promise_rule_catches_what_it_is_for() {
    let doc = "# T\n\nA run dies whole. <!-- promise: runs-die-whole --> Jobs never outlive \
               dsh.\n\n```sh\nnever mind\n```\n\n| never | a table |\n\n- A job is killed at \
               `[jobs] max_output_bytes`. <!-- promise: job-cap -->\n- It builds once. \
               <!-- not a promise: the build -->\n\n## Test it\n\nThe tests never skip.\n";
    assert_eq!(
        untagged_promises(doc),
        vec!["Jobs never outlive dsh.".to_string()]
    );
    let tagged = doc.replace("dsh.\n", "dsh. <!-- promise: jobs-die -->\n");
    assert!(
        untagged_promises(&tagged).is_empty(),
        "{:?}",
        untagged_promises(&tagged)
    );
}

/// The capabilities that plug in whole: no code outside their folder (`services/NAME/`)
/// names them but the capability list (`services/mod.rs`) and the frozen contracts'
/// adapters (`bindings/`, which name every interface). What the host must know of one
/// it learns through the [`crate::services::Capability`] trait (its grant, its gauges,
/// the pipeline it is given, its resources, its handover at an upgrade); the launch
/// platform every capability starts processes through is the `dsh_launch` crate, not
/// `process`. One is still named elsewhere: `jobs`, the registry in the foundation (the
/// MCP tasks are jobs); were it to stop being, it would go on this list, and the rule
/// would keep it so.
const WHOLE_CAPABILITIES: &[&str] = &[
    "terminal",
    "log",
    "progress",
    "lsp",
    "process",
    "files",
    "subagent",
    "sampling",
    "elicitation",
    "egress",
    "tally",
];

/// How code outside capability `name`'s folder names it (its module, its field of the
/// services or of the configuration), in `source`'s code before its tests.
fn capability_named(source: &str, name: &str) -> Option<String> {
    let code = code_only(source);
    let code = code.split("#[cfg(test)]").next().unwrap_or_default();
    let ways = [
        format!("services::{name}"),
        format!("super::{name}::"),
        format!("services.{name}"),
        format!("config.{name}"),
    ];
    ways.into_iter().find(|way| {
        code.match_indices(way.as_str()).any(|(at, _)| {
            let after = code[at + way.len()..].chars().next();
            !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn whole_capabilities_are_named_only_in_their_folder() {
    let mut broken = Vec::new();
    for file in layered_files() {
        let relative = &file.relative;
        let file_name = file.path.file_name().unwrap().to_string_lossy();
        let exempt = relative == "services/mod.rs"
            || relative == "tidy.rs"
            || relative.starts_with("bindings/")
            || file_name == "tests.rs"
            || file_name.ends_with("_tests.rs");
        if exempt {
            continue;
        }
        let source = std::fs::read_to_string(&file.path).unwrap();
        for name in WHOLE_CAPABILITIES {
            if relative.starts_with(&format!("services/{name}/")) {
                continue;
            }
            if let Some(way) = capability_named(&source, name) {
                broken.push(format!("{} names `{name}` ({way})", file.path.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "a whole capability is named only in its folder: give the host what it needs \
         through the `Capability` trait (services/mod.rs) instead: {broken:#?}"
    );
}

/// Where `source`, a file of capability `own`'s folder, takes the whole call context
/// (every service) other than to narrow it to its own service.
fn services_taken_whole(source: &str, own: &str) -> Vec<String> {
    let code = code_only(source);
    let narrowed = format!("call_ctx().narrow(|services| &services.{own})");
    code.match_indices("call_ctx()")
        .filter(|(at, _)| !code[*at..].starts_with(&narrowed))
        .map(|(at, _)| {
            code[at..]
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
        .collect()
}

#[test]
fn a_binding_is_given_only_its_own_service() {
    let mut broken = Vec::new();
    for file in layered_files() {
        let Some(own) = file
            .relative
            .strip_prefix("services/")
            .and_then(|rest| rest.split_once('/'))
            .map(|(folder, _)| folder)
        else {
            continue;
        };
        let source = std::fs::read_to_string(&file.path).unwrap();
        for taken in services_taken_whole(&source, own) {
            broken.push(format!("{}: {taken}", file.path.display()));
        }
    }
    assert!(
        broken.is_empty(),
        "a capability's binding narrows the call to its own service \
         (`state.call_ctx().narrow(|services| &services.OWN)`); what it needs of another \
         it gets through the `Foundation` or its `Capability` hooks: {broken:#?}"
    );
    assert_eq!(
        services_taken_whole(
            "let ctx = state.call_ctx().narrow(|services| &services.jobs);\n",
            "process"
        ),
        ["call_ctx().narrow(|services| &services.jobs);"]
    );
    assert_eq!(
        services_taken_whole("let all = state.call_ctx().service;\n", "process"),
        ["call_ctx().service;"]
    );
    assert!(services_taken_whole(
        "state.call_ctx().narrow(|services| &services.process)\n",
        "process"
    )
    .is_empty());
}

#[test]
fn the_whole_capability_rule_catches_what_it_is_for() {
    let named = |source: &str| capability_named(source, "subagent");
    assert_eq!(
        named("use crate::services::subagent::SubagentService;\n").as_deref(),
        Some("services::subagent")
    );
    assert_eq!(
        named("let t = self.host.config.subagent.timeout_ms;\n").as_deref(),
        Some("config.subagent")
    );
    assert_eq!(
        named("services.subagent.set_runner(r);\n").as_deref(),
        Some("services.subagent")
    );
    assert!(named("// services::subagent in a comment\n").is_none());
    assert!(named("use crate::services::subagents_of_another_kind;\n").is_none());
    assert!(
        named("fn f() {}\n#[cfg(test)]\nmod tests { use crate::services::subagent; }\n").is_none()
    );
}
