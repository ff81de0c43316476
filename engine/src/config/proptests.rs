//! Property tests of [`Config::parse`], which reads the operator's `dsh.toml`: any text,
//! and any TOML whose sections and keys are `dsh.toml`'s own with values of any type and
//! size, is either a config or an `Err` with a message; nothing panics.
//!
//! Each property runs 512 cases by default; set `PROPTEST_CASES` for a longer local
//! run, e.g. `PROPTEST_CASES=50000 cargo test -p dsh --lib config::proptests`.

use super::*;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;

/// `default` cases, or `PROPTEST_CASES` when it is set.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        // A failure is kept as a plain #[test], not in a file beside the source.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// `dsh.toml`'s tables (dotted: nested) and keys, as the module doc lists them.
const KEYS: &[(&str, &str)] = &[
    ("limits", "output_budget_bytes"),
    ("limits", "call_timeout_ms"),
    ("limits", "max_retries"),
    ("limits", "max_spill_bytes"),
    ("limits", "max_calls_in_flight"),
    ("limits", "max_queued_calls"),
    ("pipeline", "guards"),
    ("pipeline", "filters"),
    ("process", "kill_grace_ms"),
    ("process", "containment"),
    ("process", "pids_max"),
    ("process", "memory_max_mb"),
    ("process.env", "inherit"),
    ("process.env", "include"),
    ("process.env", "exclude"),
    ("process.env", "set"),
    ("process.executor", "default"),
    ("process.executor", "scopes"),
    ("process.executor", "tools"),
    ("process.sandbox", "write"),
    ("process.sandbox", "tcp_ports"),
    ("process.sandbox", "require"),
    ("process.sandbox", "unix_sockets"),
    ("gate", "default"),
    ("gate", "rules"),
    ("jobs", "max_running_per_owner"),
    ("jobs", "max_output_bytes"),
    ("jobs", "tail_bytes"),
    ("jobs", "max_wait_ms"),
    ("terminal", "max_sessions"),
    ("terminal", "scrollback_bytes"),
    ("terminal", "shell"),
    ("lsp", "idle_ms"),
    ("lsp", "defaults"),
    ("lsp.servers.x", "command"),
    ("lsp.servers.x", "extensions"),
    ("lsp.servers.x", "settings"),
    ("files", "max_tracked_files_per_owner"),
    ("files", "max_read_bytes"),
    ("files", "extra_roots"),
    ("serve", "owner_grace_ms"),
    ("serve", "max_request_bytes"),
    ("serve", "stdio_max_message_bytes"),
    ("serve", "progress_interval_ms"),
    ("serve", "http_max_sessions"),
    ("serve", "http_max_connections"),
    ("serve", "http_allowed_origins"),
    ("serve", "http_scope_tokens"),
    ("serve", "http_principals"),
    ("serve", "task_after_ms"),
    ("serve", "reload_debounce_ms"),
    ("serve", "upgrade_drain_ms"),
    ("state", "max_sessions"),
    ("state", "max_session_age_days"),
    ("scopes", "readonly"),
    ("plugins.a", "connect"),
    ("plugins.a", "bind"),
    ("plugins.a", "dns"),
    ("plugins.a", "settings"),
    ("plugins.a", "memory_mb"),
    ("nonsense", "key"),
];

/// Words a value of `dsh.toml` is often made of, so that parsing gets past the types.
const WORDS: &[&str] = &[
    "auto",
    "cgroup",
    "subreaper",
    "local",
    "sandbox",
    "allow",
    "deny",
    "ask",
    "safe",
    "none",
    "fs",
    "net",
    "signals",
    "bash",
    "*",
    "/",
    "/srv/x",
    "relative",
    "10.0.0.1:80",
    "127.0.0.1",
    "[::1]:0",
    "0.0.0.0/0",
    "http://dev.example:*",
    "(",
    "rm\\s+-rf",
    "",
];

/// A TOML value of any type, of bounded depth and size.
fn toml_value() -> impl Strategy<Value = toml::Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(toml::Value::Integer),
        (0i64..70_000).prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        any::<bool>().prop_map(toml::Value::Boolean),
        any::<String>().prop_map(toml::Value::String),
        prop::sample::select(WORDS).prop_map(|word| toml::Value::String(word.into())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        let key = prop_oneof![
            prop::sample::select(
                &["path", "write", "action", "tool", "arg", "pattern", "reason", "x"][..]
            )
            .prop_map(String::from),
            any::<String>(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(toml::Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|table| toml::Value::Table(table.into_iter().collect())),
        ]
    })
}

/// A `dsh.toml` of known tables and keys with values of any type.
fn toml_config() -> impl Strategy<Value = toml::Table> {
    prop::collection::vec((prop::sample::select(KEYS), toml_value()), 0..8).prop_map(|entries| {
        let mut root = toml::Table::new();
        for ((section, key), value) in entries {
            let mut table = &mut root;
            for name in section.split('.') {
                let entry = table
                    .entry(name)
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if !entry.is_table() {
                    *entry = toml::Value::Table(toml::Table::new());
                }
                table = entry.as_table_mut().expect("made a table");
            }
            table.insert(key.into(), value);
        }
        root
    })
}

/// `[[gate.rules]]` with any strings: `pattern` is compiled as a regex.
fn gate_rules() -> impl Strategy<Value = String> {
    let text = || prop_oneof![any::<String>(), "[()\\[\\]{}*+?|\\\\^$.a-z0-9,]{0,24}"];
    prop::collection::vec(
        (
            prop::sample::select(&["deny", "allow", "ask", "nope"][..]),
            prop::option::of(text()),
            prop::option::of(text()),
        ),
        0..4,
    )
    .prop_map(|rules| {
        let mut out = String::new();
        for (action, arg, pattern) in rules {
            let mut rule = toml::Table::new();
            rule.insert("action".into(), action.into());
            rule.insert("tool".into(), "*".into());
            if let Some(arg) = arg {
                rule.insert("arg".into(), arg.into());
            }
            if let Some(pattern) = pattern {
                rule.insert("pattern".into(), pattern.into());
            }
            out.push_str("[[gate.rules]]\n");
            out.push_str(&toml::to_string(&rule).expect("a table serializes"));
        }
        out
    })
}

/// TOML syntax in any order.
fn toml_noise() -> impl Strategy<Value = String> {
    let token = prop::sample::select(
        &[
            "[",
            "]",
            "[[",
            "]]",
            "=",
            "\"",
            "'",
            "'''",
            "\"\"\"",
            "\n",
            " ",
            ",",
            ".",
            "{",
            "}",
            "#",
            "\\",
            "limits",
            "gate",
            "rules",
            "plugins",
            "serve",
            "1",
            "-1",
            "1e999",
            "true",
            "x",
            "inf",
            "nan",
            "1979-05-27T07:32:00Z",
            "0x7fffffffffffffff",
        ][..],
    );
    prop::collection::vec(token, 0..200).prop_map(|tokens| tokens.concat())
}

/// What a parse must be: a config, or an error with something to say.
fn check(text: &str) -> Result<(), TestCaseError> {
    if let Err(message) = Config::parse(text) {
        prop_assert!(!message.trim().is_empty(), "an empty error for {:?}", text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn any_text_parses_or_is_an_error_with_a_message(text in any::<String>()) {
        check(&text)?;
    }

    #[test]
    fn toml_syntax_in_any_order_parses_or_is_an_error_with_a_message(text in toml_noise()) {
        check(&text)?;
    }

    #[test]
    fn known_keys_with_values_of_any_type_parse_or_are_an_error_with_a_message(
        table in toml_config(),
    ) {
        check(&toml::to_string(&table).expect("a table serializes"))?;
    }

    #[test]
    fn gate_rules_with_any_strings_parse_or_are_an_error_with_a_message(text in gate_rules()) {
        check(&text)?;
    }
}
