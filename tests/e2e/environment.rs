//! The environment commands get (`[process.env]`): what `env` prints in a `bash` call and
//! in a background job when `dsh` itself was started with secrets in its environment.
//! (Terminals: tests/mcp/test_environment.py.)

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::mcp_stdio::McpServer;
use crate::support::{unique_marker, Env};

/// Variables every test starts `dsh` with: two secrets and the ones a shell needs.
fn with_host_variables(command: &mut Command, marker: &str) {
    command
        .env("DSH_HTTP_TOKEN", format!("bearer-{marker}"))
        .env("AWS_SECRET_ACCESS_KEY", format!("aws-{marker}"))
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", "/root-of-e2e")
        .env("LANG", "C.UTF-8")
        .env("E2E_ORDINARY", format!("ordinary-{marker}"));
}

/// `env` run by a `bash` call of `dsh` under `config`, as NAME → VALUE.
fn env_of_a_bash_call(
    env: &Env,
    config: &str,
    extra: &[(&str, String)],
) -> BTreeMap<String, String> {
    let marker = unique_marker();
    let mut command = env.dsh_configured(config);
    with_host_variables(&mut command, &marker);
    command.envs(extra.iter().map(|(k, v)| (k, v)));
    let output = command
        .args([
            "call",
            "bash",
            &json!({"command": "env", "description": "print the environment"}).to_string(),
            "--json",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let result = crate::support::CallOutput::parse(output);
    assert_eq!(result.code, None, "{result:?}");
    variables(&result.content)
}

/// `NAME=VALUE` lines as a map (other lines, like `[exit code: 0]`, are skipped).
fn variables(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn assert_no_secrets(variables: &BTreeMap<String, String>) {
    for secret in [
        "DSH_HTTP_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DSH_STATE_DIR",
        "DSH_WORKDIR",
    ] {
        assert!(
            !variables.contains_key(secret),
            "{secret} reached the command: {variables:?}"
        );
    }
}

#[test]
fn a_bash_call_gets_path_home_and_lang_but_no_secret_of_dsh() {
    let env = Env::new();
    let seen = env_of_a_bash_call(&env, "", &[]);
    assert_no_secrets(&seen);
    assert_eq!(
        seen.get("PATH"),
        std::env::var("PATH").ok().as_ref(),
        "{seen:?}"
    );
    assert_eq!(
        seen.get("HOME").map(String::as_str),
        Some("/root-of-e2e"),
        "{seen:?}"
    );
    assert_eq!(
        seen.get("LANG").map(String::as_str),
        Some("C.UTF-8"),
        "{seen:?}"
    );
    assert!(seen["E2E_ORDINARY"].starts_with("ordinary-"), "{seen:?}");
}

#[test]
fn an_included_secret_looking_variable_is_passed_and_the_others_are_not() {
    let env = Env::new();
    let seen = env_of_a_bash_call(
        &env,
        "[process.env]\ninclude = [\"e2e_service_token\"]\n",
        &[("E2E_SERVICE_TOKEN", "passed-on-purpose".to_string())],
    );
    assert_eq!(
        seen.get("E2E_SERVICE_TOKEN").map(String::as_str),
        Some("passed-on-purpose"),
        "{seen:?}"
    );
    assert_no_secrets(&seen);
}

#[test]
fn set_gives_variables_their_configured_values() {
    let env = Env::new();
    let seen = env_of_a_bash_call(
        &env,
        "[process.env.set]\nE2E_ORDINARY = \"replaced\"\nE2E_NEW = \"a=b c\"\n",
        &[],
    );
    assert_eq!(
        seen.get("E2E_ORDINARY").map(String::as_str),
        Some("replaced"),
        "{seen:?}"
    );
    assert_eq!(
        seen.get("E2E_NEW").map(String::as_str),
        Some("a=b c"),
        "{seen:?}"
    );
}

#[test]
fn inherit_none_drops_an_ordinary_variable_and_keeps_path() {
    let env = Env::new();
    let seen = env_of_a_bash_call(&env, "[process.env]\ninherit = \"none\"\n", &[]);
    assert!(!seen.contains_key("E2E_ORDINARY"), "{seen:?}");
    assert_eq!(
        seen.get("PATH"),
        std::env::var("PATH").ok().as_ref(),
        "{seen:?}"
    );
    assert_eq!(
        seen.get("LANG").map(String::as_str),
        Some("C.UTF-8"),
        "{seen:?}"
    );
    assert_no_secrets(&seen);
}

#[test]
fn exclude_wins_over_include() {
    let env = Env::new();
    let seen = env_of_a_bash_call(
        &env,
        "[process.env]\ninclude = [\"E2E_*\"]\nexclude = [\"E2E_ORDINARY\"]\n",
        &[("E2E_OTHER_TOKEN", "included".to_string())],
    );
    assert!(!seen.contains_key("E2E_ORDINARY"), "{seen:?}");
    assert_eq!(
        seen.get("E2E_OTHER_TOKEN").map(String::as_str),
        Some("included"),
        "{seen:?}"
    );
}

#[test]
fn a_bad_set_name_stops_dsh_naming_the_key() {
    let env = Env::new();
    let output = env
        .dsh_configured("[process.env.set]\n\"A=B\" = \"x\"\n")
        .args([
            "call",
            "bash",
            r#"{"command":"true","description":"nothing"}"#,
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("process.env.set") && stderr.contains("A=B"),
        "{stderr}"
    );
}

/// Everything a background job printed, read with `job_output` until it ended.
fn whole_job_output(server: &McpServer, job: &str) -> String {
    let status =
        regex::Regex::new(r"(?s)\A(.*?)\[[a-z]+-\d+: ([^\n]*); next cursor: (\d+)\]\z").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut cursor, mut body) = (0u64, String::new());
    loop {
        let text = server.call_ok(
            "job_output",
            json!({"id": job, "since": cursor, "wait_ms": 2000}),
        );
        let parts = status
            .captures(&text)
            .unwrap_or_else(|| panic!("no status line: {text:?}"));
        body.push_str(&parts[1]);
        cursor = parts[3].parse().unwrap();
        if &parts[2] != "running" {
            return body;
        }
        assert!(Instant::now() < deadline, "{job} still running: {text:?}");
    }
}

#[test]
fn a_background_job_gets_the_same_environment_as_a_foreground_call() {
    let env = Env::new();
    let marker = unique_marker();
    let mut command = env.dsh_configured(
        "[process.env]\ninclude = [\"E2E_SERVICE_TOKEN\"]\n[process.env.set]\nE2E_NEW = \"set-value\"\n",
    );
    with_host_variables(&mut command, &marker);
    command.env("E2E_SERVICE_TOKEN", "passed-on-purpose");
    let server = McpServer::start_command(&env, command);

    let foreground = variables(&server.call_ok(
        "bash",
        json!({"command": "env", "description": "environment"}),
    ));
    let started = server.call_ok(
        "bash",
        json!({"command": "env", "description": "environment", "run_in_background": true}),
    );
    let job = regex::Regex::new(r"\Astarted background job (bash-\d+)")
        .unwrap()
        .captures(&started)
        .unwrap_or_else(|| panic!("not started: {started:?}"))[1]
        .to_string();
    let background = variables(&whole_job_output(&server, &job));

    assert_no_secrets(&foreground);
    assert_no_secrets(&background);
    assert_eq!(
        foreground.keys().collect::<Vec<_>>(),
        background.keys().collect::<Vec<_>>(),
        "the same variable names"
    );
    for name in [
        "PATH",
        "HOME",
        "LANG",
        "E2E_ORDINARY",
        "E2E_SERVICE_TOKEN",
        "E2E_NEW",
    ] {
        assert!(
            foreground.contains_key(name),
            "{name} missing: {foreground:?}"
        );
        assert_eq!(foreground.get(name), background.get(name), "{name}");
    }
    assert_eq!(background["E2E_NEW"], "set-value");
}
