//! Property tests of [`commands`] and [`strings`], which read the untrusted text of a
//! call's arguments: neither panics nor runs away on any input (unbalanced quotes,
//! `$(` and backticks nested thousands deep, 64 KiB of shell noise), and a plain list of
//! simple commands is read back exactly, however it is separated, prefixed or nested in
//! `$(...)`.
//!
//! Each property runs 256 cases by default; set `PROPTEST_CASES` for a longer local
//! run, e.g. `PROPTEST_CASES=20000 cargo test -p guard_shell --release proptests`
//! (from `plugins/`, with `CARGO_TARGET_DIR=../target/wasm-plugins`).

use super::*;
use proptest::prelude::*;
use proptest::test_runner::Config;

/// `default` cases, or `PROPTEST_CASES` when it is set.
fn config(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        // A failure is kept as a plain #[test] below, not in a file beside the source.
        failure_persistence: None,
        ..Config::default()
    }
}

/// The pieces of shell syntax the scanner treats specially, and some words.
const TOKENS: &[&str] = &[
    "$(",
    "`",
    "'",
    "\"",
    ")",
    "(",
    "\\",
    ";",
    "&",
    "&&",
    "|",
    "||",
    ">",
    ">>",
    "<",
    "<(",
    ">(",
    "&>",
    "2>",
    "#",
    " ",
    "\t",
    "\n",
    "\r",
    "bash -c ",
    "sh -lc ",
    "eval ",
    "sudo ",
    "env -i ",
    "timeout 5 ",
    "x=1 ",
    "rm",
    "-rf",
    "/",
    "{",
    "}",
    "if",
    "then",
    "é",
    "\0",
];

/// Text made of shell syntax in any order.
fn shell_noise(max_tokens: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..max_tokens)
        .prop_map(|tokens| tokens.concat())
}

/// Words the scanner treats as prefixes or scripts: never generated as a program.
const RESERVED: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "su", "eval", "if", "then",
    "elif", "else", "do", "while", "until", "time", "sudo", "doas", "env", "nice", "ionice",
    "nohup", "command", "builtin", "exec", "stdbuf", "xargs", "timeout", "watch",
];

/// A program name that is not a prefix, a keyword or a shell.
fn program() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,8}".prop_filter("not a reserved word", |p| !RESERVED.contains(&p.as_str()))
}

/// One argument: what it is after quote removal, and how it is written.
fn argument() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        "[A-Za-z0-9_./,:+=-]{1,12}".prop_map(|word| (word.clone(), word)),
        // Single quotes keep anything literal, separators and `$(` included.
        "[^']{0,16}".prop_map(|word| (word.clone(), format!("'{word}'"))),
    ]
}

/// Prefixes that only run the rest of the command; the scanner drops them.
const PREFIXES: &[&str] = &[
    "",
    "sudo -u root ",
    "X_1=a ",
    "env -i ",
    "nohup ",
    "timeout -s KILL 10 ",
    "command ",
    "/usr/bin/",
];

const SEPARATORS: &[&str] = &["; ", ";", "\n", " && ", " || ", " | ", " & "];

/// Simple commands written as shell text: the words of each, and the text.
fn command_list() -> impl Strategy<Value = (Vec<Vec<String>>, String)> {
    let one = (
        prop::sample::select(PREFIXES),
        program(),
        prop::collection::vec(argument(), 0..5),
    );
    (
        prop::collection::vec((one, prop::sample::select(SEPARATORS)), 1..8),
        prop::bool::ANY,
    )
        .prop_map(|(commands, trailing_separator)| {
            let mut words = Vec::new();
            let mut text = String::new();
            let last = commands.len() - 1;
            for (at, ((prefix, program, args), separator)) in commands.into_iter().enumerate() {
                text.push_str(prefix);
                text.push_str(&program);
                let mut command = vec![program];
                for (word, written) in args {
                    text.push(' ');
                    text.push_str(&written);
                    command.push(word);
                }
                if at < last || trailing_separator {
                    text.push_str(separator);
                }
                words.push(command);
            }
            (words, text)
        })
}

fn words(text: &str) -> Vec<Vec<String>> {
    commands(text).into_iter().map(|c| c.words).collect()
}

/// A JSON value of bounded depth and size.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..8)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
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

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn any_text_is_scanned_without_a_panic(text in any::<String>()) {
        let _ = commands(&text);
    }

    #[test]
    fn shell_noise_is_scanned_without_a_panic(text in shell_noise(400)) {
        for command in commands(&text) {
            // A command is only kept when it has something in it.
            prop_assert!(!command.words.is_empty() || !command.writes.is_empty());
        }
    }

    #[test]
    fn deep_nesting_is_scanned_without_a_panic(
        opener in prop::sample::select(&["$(", "`", "(", "\"$(", "<(", "bash -c \"", "eval "][..]),
        depth in 0usize..20_000,
        tail in shell_noise(40),
    ) {
        let text = format!("{}{tail}", opener.repeat(depth));
        let _ = commands(&text);
    }

    #[test]
    fn commands_are_read_back_exactly((expected, text) in command_list()) {
        prop_assert_eq!(words(&text), expected, "{:?}", text);
    }

    #[test]
    fn commands_in_a_substitution_come_before_the_command_around_it(
        (mut expected, text) in command_list(),
        quoted in prop::bool::ANY,
    ) {
        let text = if quoted {
            format!("echo \"$({text})\"")
        } else {
            format!("echo $({text})")
        };
        expected.push(if quoted { vec!["echo".into(), String::new()] } else { vec!["echo".into()] });
        prop_assert_eq!(words(&text), expected, "{:?}", text);
    }

    #[test]
    fn strings_finds_every_string_leaf(value in json_value()) {
        let found = strings(&value);
        prop_assert_eq!(found.len(), string_leaves(&value));
        for text in found {
            let _ = commands(text);
        }
    }
}

proptest! {
    // 64 KiB texts: fewer cases, each scanned whole.
    #![proptest_config(config(16))]

    #[test]
    fn huge_texts_are_scanned_without_a_panic(unit in shell_noise(64)) {
        let text = unit.repeat((64 << 10) / unit.len().max(1));
        let _ = commands(&text);
    }
}

#[test]
fn strings_reads_values_as_deep_as_serde_json_parses() {
    // serde_json refuses nesting past 128, so no argument is deeper than this.
    let text = format!("{}\"x\"{}", "[".repeat(127), "]".repeat(127));
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(strings(&value), ["x"]);
}
