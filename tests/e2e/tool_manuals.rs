//! `dsh tools`: the manuals the model reads.

use serde_json::Value;

use crate::support::Env;

#[test]
fn tools_json_lists_bash_with_command_and_description_required() {
    let env = Env::new();
    let output = env.dsh().args(["tools", "--json"]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let manuals: Value = serde_json::from_slice(&output.stdout).unwrap();
    let bash = manuals
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "bash")
        .expect("bash is listed");
    let schema = &bash["inputSchema"];
    assert_eq!(schema["type"], "object");
    let mut required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort();
    assert_eq!(required, ["command", "description"]);
    let mut properties: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    properties.sort();
    assert_eq!(
        properties,
        [
            "command",
            "description",
            "run_in_background",
            "timeoutMs",
            "workdir"
        ]
    );
    assert!(!bash["description"].as_str().unwrap().is_empty());
}

#[test]
fn an_unknown_scope_is_an_error_naming_the_known_ones() {
    let env = Env::new();
    let output = env
        .dsh()
        .args(["tools", "--scope", "nope"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown scope \"nope\"") && stderr.contains("default"),
        "{stderr}"
    );
}

#[test]
fn a_configured_scope_sees_only_its_tools() {
    let env = Env::new();
    let config = env.dir.path().join("dsh.toml");
    std::fs::write(&config, "[scopes]\nnothing = [\"lsp_*\"]\n").unwrap();
    let output = env
        .dsh()
        .args(["tools", "--json", "--scope", "nothing"])
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let manuals: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(manuals.as_array().unwrap().len(), 0);
    let call = env
        .dsh()
        .args([
            "call",
            "bash",
            r#"{"command":"true","description":"t"}"#,
            "--scope",
            "nothing",
        ])
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&call.stdout).starts_with("UNKNOWN_TOOL"));
}
