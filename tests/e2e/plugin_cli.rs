//! `dsh plugin check`: what a plugin author learns about a component before `dsh serve`
//! refuses it: its kind, contract version, tools and imports, the grant lines it needs,
//! and the same refusal reasons as at load.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{built_plugin, with_bytes_replaced, Env};

/// `dsh plugin check FILE --json` under `config`: (exit status, the report).
fn check(env: &Env, config: &str, file: &Path) -> (i32, Value) {
    let output = env
        .dsh_configured(config)
        .args(["plugin", "check", "--json"])
        .arg(file)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap(), report)
}

/// Copies the built plugin `built` into the environment as `NAME.wasm`.
fn copy_as(env: &Env, built: &str, name: &str) -> PathBuf {
    let path = env.dir.path().join(format!("{name}.wasm"));
    std::fs::copy(built_plugin(built), &path).unwrap();
    path
}

/// A component importing the wasi filesystem (Rust's std and wasi-libc's start code do,
/// whether or not the plugin opens a file) is not told to take an `fs` grant: the check
/// says that an import without a preopen reaches nothing, and shows the grant only as a
/// commented-out line for a plugin that reads files. Granted a directory, it shows that.
#[test]
fn plugin_check_on_a_filesystem_import_suggests_no_fs_grant() {
    let env = Env::new();
    let file = copy_as(&env, "flaky", "flaky2");
    let (status, report) = check(&env, "", &file);
    assert_eq!(status, 0, "{report:#}");
    let imports = report["imports"].to_string();
    assert!(imports.contains("wasi:filesystem/preopens"), "{imports}");
    let lines: Vec<&str> = report["grant_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(!lines.iter().any(|l| l.starts_with("fs")), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("# fs = [") && l.contains("only if it reads files")),
        "{lines:?}"
    );
    // The lines as printed are a valid section that loads it.
    let config = lines.join("\n") + "\n";
    let (status, _) = check(&env, &config, &file);
    assert_eq!(status, 0);
    let note = report["notes"][0].as_str().unwrap();
    assert!(
        note.contains("wasi:filesystem/") && note.contains("without a preopen reaches nothing"),
        "{note}"
    );
    // The human form says so too.
    let output = env
        .dsh_configured("")
        .args(["plugin", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        printed.contains("without a preopen reaches nothing"),
        "{printed}"
    );
    // Granted a directory: the grant in force is shown, and no note.
    let dir = env.workdir().display().to_string();
    let granted = format!("[plugins.flaky2]\nfs = [{{ path = {dir:?}, mode = \"ro\" }}]\n");
    let (status, report) = check(&env, &granted, &file);
    assert_eq!(status, 0, "{report:#}");
    let wanted = format!("fs = [{{ path = {dir:?}, mode = \"ro\" }}]");
    let lines = report["grant_lines"].as_array().unwrap();
    assert!(lines.iter().any(|l| l == wanted.as_str()), "{lines:?}");
    assert_eq!(report["notes"].as_array().unwrap().len(), 0, "{report:#}");
    // A component importing no filesystem gets neither.
    let (_, report) = check(&env, "", &copy_as(&env, "echo", "echo3"));
    assert_eq!(report["notes"].as_array().unwrap().len(), 0, "{report:#}");
    assert!(!report["grant_lines"].to_string().contains("fs ="));
}

#[test]
fn plugin_check_describes_a_tool_its_contract_and_schemas() {
    let env = Env::new();
    let file = copy_as(&env, "echo", "echo2");
    let (status, report) = check(&env, "", &file);
    assert_eq!(status, 0, "{report:#}");
    assert_eq!(report["kind"], "tool");
    assert_eq!(report["contract"], "dsh:plugin@0.2.0");
    assert_eq!(report["loads"], true);
    assert_eq!(report["tools"][0]["name"], "echo");
    assert_eq!(report["tools"][0]["input_schema"]["required"][0], "text");
    assert!(report["size_bytes"].as_u64().unwrap() > 1000);
    assert!(report["compile_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(report["compile_cache"], "miss");
    // A second check reads the compile cache.
    let (_, again) = check(&env, "", &file);
    assert_eq!(again["compile_cache"], "hit", "{again:#}");
}

#[test]
fn plugin_check_on_a_component_missing_a_grant_prints_the_lines_to_add() {
    let env = Env::new();
    let file = copy_as(&env, "jobs", "worker");
    let (status, report) = check(&env, "", &file);
    assert_eq!(status, 1, "{report:#}");
    assert_eq!(report["loads"], false);
    let missing = report["missing_grants"].as_str().unwrap();
    assert!(missing.contains("[plugins.worker]"), "{missing}");
    assert!(missing.contains("\"jobs\""), "{missing}");
    // It still says what the component is.
    assert_eq!(report["kind"], "tool");
    assert!(report["tools"].as_array().is_some_and(|t| !t.is_empty()));
    let lines: Vec<&str> = report["grant_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(lines[0], "[plugins.worker]");
    assert!(
        lines[1].starts_with("interfaces = [") && lines[1].contains("\"jobs\""),
        "{lines:?}"
    );
    // The human form prints the same lines.
    let text = env
        .dsh_configured("")
        .args(["plugin", "check"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("NOT GRANTED"), "{text}");
    assert!(text.contains("  [plugins.worker]"), "{text}");

    // Granted those lines, it loads.
    let config = format!("{}\n{}\n", lines[0], lines[1]);
    let (status, report) = check(&env, &config, &file);
    assert_eq!(status, 0, "{report:#}");
    assert_eq!(report["missing_grants"], Value::Null);
}

#[test]
fn plugin_check_refuses_a_file_that_is_not_a_component_with_the_reason() {
    let env = Env::new();
    let file = env.dir.path().join("junk.wasm");
    std::fs::write(&file, b"this is not wasm").unwrap();
    let (status, report) = check(&env, "", &file);
    assert_eq!(status, 1);
    let reason = report["refused"].as_str().unwrap();
    assert!(
        reason.starts_with("not a WebAssembly component"),
        "{reason}"
    );
}

#[test]
fn plugin_check_refuses_a_bad_schema_with_the_reason_serve_gives() {
    let env = Env::new();
    let file = copy_as(&env, "bad_schema", "bad_schema");
    let (status, report) = check(&env, "", &file);
    assert_eq!(status, 1);
    let reason = report["refused"].as_str().unwrap();
    assert!(reason.contains("not valid JSON Schema"), "{reason}");
    // `dsh serve` (here `dsh plugins`) gives the same reason.
    env.add_plugins(&[("bad_schema", "bad_schema")]);
    let plugins = env.plugins_configured("");
    let refused = plugins.iter().find(|p| p["name"] == "bad_schema").unwrap();
    assert_eq!(refused["reason"].as_str().unwrap(), reason);
}

#[test]
fn plugin_check_refuses_an_unsupported_contract_version_naming_it() {
    let env = Env::new();
    let bytes = std::fs::read(built_plugin("echo")).unwrap();
    let patched = with_bytes_replaced(&bytes, b"dsh:plugin/types@0.2.0", b"dsh:plugin/types@0.9.0");
    let file = env.dir.path().join("future.wasm");
    std::fs::write(&file, &patched).unwrap();
    let (status, report) = check(&env, "", &file);
    assert_eq!(status, 1);
    let reason = report["refused"].as_str().unwrap();
    assert!(reason.contains("dsh:plugin@0.9.0"), "{reason}");
    assert!(
        reason.contains("dsh:plugin@0.1.0, dsh:plugin@0.2.0"),
        "{reason}"
    );
}

/// `dsh plugin new NAME --lang LANG`, its printed build command run as printed, then
/// `dsh plugin check` (refused until granted, the lines to grant printed) and a call.
fn new_build_check_call(lang: &str) {
    let env = Env::new();
    let name = format!("hello_{lang}");
    let project = env.dir.path().join(&name);
    let output = env
        .dsh()
        .args(["plugin", "new", &name, "--lang", lang, "--dir"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed = String::from_utf8_lossy(&output.stdout).to_string();
    let mut lines = printed.lines().map(str::trim);
    let build = lines
        .find(|l| l.starts_with("build it"))
        .and_then(|_| lines.next())
        .unwrap()
        .to_string();
    let check_line = lines.find(|l| l.starts_with("dsh plugin check ")).unwrap();
    let mut wasm = project.join(check_line.trim_start_matches("dsh plugin check "));
    assert!(project.join("README.md").exists() && project.join("wit/plugin.wit").exists());

    // The build command exactly as printed, with the toolchain on PATH.
    let mut command = Command::new("sh");
    command.args(["-c", &build]).current_dir(&project);
    match lang {
        "python" => {
            let bin = crate::languages::componentize_py();
            let path = format!(
                "{}:{}",
                bin.parent().unwrap().display(),
                std::env::var("PATH").unwrap_or_default()
            );
            command.env("PATH", path);
        }
        _ => {
            // The test plugins' target directory: wit-bindgen is built there already.
            let target = Path::new(env!("DSH_WASM_TARGET_DIR"));
            command.env("CARGO_TARGET_DIR", target);
            wasm = target.join(format!("wasm32-wasip2/release/{name}.wasm"));
        }
    }
    let built = command.output().unwrap();
    assert!(built.status.success(), "{build}: {built:?}");

    // Refused until granted `log` (progress needs no grant), with the lines to add...
    let (status, report) = check(&env, "", &wasm);
    assert_eq!(status, 1, "{report:#}");
    assert_eq!(report["kind"], "tool");
    let missing = report["missing_grants"].as_str().unwrap();
    assert!(missing.contains(&format!("[plugins.{name}]")), "{missing}");
    let grant: Vec<&str> = report["grant_lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .filter(|l| !l.starts_with("fs ="))
        .collect();
    let config = grant.join("\n") + "\n";
    // ...and served once they are in dsh.toml.
    let (status, report) = check(&env, &config, &wasm);
    assert_eq!(status, 0, "{report:#}");
    std::fs::create_dir_all(env.plugins_dir()).unwrap();
    std::fs::copy(&wasm, env.plugins_dir().join(format!("{name}.wasm"))).unwrap();
    let called = env.call_configured(&config, &name, &serde_json::json!({"name": "dsh"}), &[]);
    assert_eq!(called.content, "hello, dsh", "{called:?}");
}

#[test]
fn plugin_new_in_rust_builds_checks_and_answers_a_call() {
    new_build_check_call("rust");
}

#[test]
fn plugin_new_in_python_builds_checks_and_answers_a_call() {
    new_build_check_call("python");
}
