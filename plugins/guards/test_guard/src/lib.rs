//! `test_guard`: a test fixture whose verdict comes from its settings
//! (`context.settings-json`), so the host tests can load the same component under
//! several names (`allow_1.wasm`, `deny_x.wasm`, ...) with different behaviour.
//!
//! Settings: `verdict` is `allow` (the default), `deny`, `ask`, `trap` (panics), `loop`
//! (spins forever) or `oom` (allocates without bound); `tools` is a tool-name glob (`*`
//! stands for any characters) the verdict applies to, every other tool being allowed;
//! `reason` is the text of a deny or ask. An unknown verdict denies, naming it.
//! `args_contain` narrows the verdict further to calls whose arguments' JSON text
//! contains that string (so a test can show which arguments a guard saw).
//!
//! Rewrites (contract 0.2.0): `rewrite`, an object, rewrites the call's arguments to
//! them merged with it (its keys replace the call's); `rewrite_raw`, a string, rewrites
//! them to that text as it is (to test the host's refusal of a bad rewrite). Either one
//! takes the place of `verdict`.

use std::hint::black_box;

use dsh_plugin::{Guard, PendingCall, Verdict};
use serde_json::Value;

struct TestGuard;

impl Guard for TestGuard {
    fn check(call: PendingCall) -> Verdict {
        let settings: Value = call.settings();
        let setting = |name: &str| settings.get(name).and_then(Value::as_str);
        if setting("tools").is_some_and(|tools| !glob_matches(tools, &call.tool)) {
            return Verdict::Allow;
        }
        if setting("args_contain").is_some_and(|needle| !call.args_json.contains(needle)) {
            return Verdict::Allow;
        }
        if let Some(raw) = setting("rewrite_raw") {
            return Verdict::Rewrite(raw.to_owned());
        }
        if let Some(Value::Object(changes)) = settings.get("rewrite") {
            let mut args: Value = call.args().unwrap_or(Value::Null);
            if let Value::Object(args) = &mut args {
                args.extend(changes.clone());
            }
            return Verdict::Rewrite(args.to_string());
        }
        let verdict = setting("verdict").unwrap_or("allow");
        let reason = setting("reason").map_or_else(
            || format!("test_guard: {verdict} {}", call.tool),
            str::to_owned,
        );
        match verdict {
            "allow" => Verdict::Allow,
            "deny" => Verdict::Deny(reason),
            "ask" => Verdict::Ask(reason),
            "trap" => panic!("test_guard: trap on {}", call.tool),
            "loop" => spin(),
            "oom" => hoard(),
            other => Verdict::Deny(format!("test_guard: unknown verdict `{other}`")),
        }
    }
}

/// Burns CPU until the host stops it.
fn spin() -> ! {
    let mut count = 0u64;
    loop {
        count = black_box(count.wrapping_add(1));
    }
}

/// Takes memory a megabyte at a time, touching every page, until the host stops it.
fn hoard() -> ! {
    let mut chunks = Vec::new();
    loop {
        chunks.push(vec![1u8; 1 << 20]);
        black_box(&chunks);
    }
}

/// True when `name` matches `pattern`, where `*` stands for any run of characters.
fn glob_matches(pattern: &str, name: &str) -> bool {
    let mut pieces = pattern.split('*');
    let Some(mut rest) = name.strip_prefix(pieces.next().unwrap_or_default()) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        return rest.is_empty();
    };
    for piece in middle {
        let Some(at) = rest.find(piece) else {
            return false;
        };
        rest = &rest[at + piece.len()..];
    }
    rest.ends_with(last)
}

dsh_plugin::export!(guard: TestGuard);

#[cfg(test)]
mod tests {
    use super::glob_matches;

    #[test]
    fn globs() {
        for (pattern, name) in [
            ("echo", "echo"),
            ("*", "bash"),
            ("terminal_*", "terminal_send"),
            ("*_send", "terminal_send"),
            ("a*b*c", "abbc"),
            ("*", ""),
        ] {
            assert!(glob_matches(pattern, name), "{pattern} {name}");
        }
        for (pattern, name) in [
            ("echo", "echo2"),
            ("echo", "ech"),
            ("terminal_*", "bash"),
            ("a*b*b", "ab"),
            ("a*bc", "abc_"),
        ] {
            assert!(!glob_matches(pattern, name), "{pattern} {name}");
        }
    }
}
