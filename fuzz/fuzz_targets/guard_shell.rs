//! Fuzz target `guard_shell`: arbitrary text (the fuzzer's bytes, decoded lossily) into
//! the guards' shell reader ([`guard_shell::commands`]), as it is and nested in a
//! command substitution; and the same bytes, when they are JSON, through
//! [`guard_shell::strings`]. As its property test
//! (`plugins/guards/guard_shell/src/proptests.rs`) asserts: no panic (nor a run away:
//! libFuzzer's `-timeout` catches that); a command is only kept when it has words or
//! writes; `strings` finds every string leaf of a value.

#![no_main]

use guard_shell::{commands, strings};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// Every command kept has something in it.
fn scan(text: &str) {
    for command in commands(text) {
        assert!(
            !command.words.is_empty() || !command.writes.is_empty(),
            "an empty command kept from {text:?}"
        );
    }
}

/// The string leaves of `value`, counted without [`strings`].
fn string_leaves(value: &Value) -> usize {
    match value {
        Value::String(_) => 1,
        Value::Array(items) => items.iter().map(string_leaves).sum(),
        Value::Object(fields) => fields.values().map(string_leaves).sum(),
        _ => 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    scan(&text);
    scan(&format!("echo \"$({text})\""));

    if let Ok(value) = serde_json::from_slice::<Value>(data) {
        let found = strings(&value);
        assert_eq!(found.len(), string_leaves(&value));
        for text in found {
            scan(text);
        }
    }
});
