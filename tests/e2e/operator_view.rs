//! What an operator sees of dsh itself: the example configuration loads as it is, and
//! the log on stderr is plain text when stderr is not a terminal.

use std::path::Path;

use crate::support::Env;

/// `examples/dsh.toml` is a configuration dsh runs with (that it shows every section and
/// key is checked by a unit test of `config`).
#[test]
fn the_example_config_loads() {
    let env = Env::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/dsh.toml");
    let output = env
        .dsh()
        .arg("--config")
        .arg(&example)
        .args(["tools", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let tools: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names = tools.to_string();
    assert!(
        names.contains("\"bash\"") && names.contains("\"lsp\""),
        "{names}"
    );
}

/// The log on a pipe (or in a file) has no ANSI colour codes; neither has it with
/// `NO_COLOR` set.
#[test]
fn the_log_on_a_pipe_has_no_colour_codes() {
    let env = Env::new();
    for no_color in [None, Some("1")] {
        let mut command = env.dsh();
        command
            .env("RUST_LOG", "dsh=info")
            .env_remove("NO_COLOR")
            .args(["call", "bash", r#"{"command":"echo hi","description":"d"}"#])
            .stdin(std::process::Stdio::null());
        if let Some(value) = no_color {
            command.env("NO_COLOR", value);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(log.contains("INFO"), "info lines are logged: {log}");
        assert!(!output.stderr.contains(&0x1b), "an ESC byte in: {log:?}");
    }
}
