//! Property tests of [`normalize`] and [`normalized`], which tidy the path arguments a
//! model sends: normalizing is idempotent, leaves no `.` or empty component, keeps an
//! absolute path absolute (and a relative one relative), never leaves a `..` after a
//! named component (nor any `..` in an absolute path), and only path arguments change.
//!
//! Each property runs 1024 cases by default; set `PROPTEST_CASES` for a longer local
//! run, e.g. `PROPTEST_CASES=100000 cargo test -p dsh --lib paths::proptests`.

use super::*;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::json;

/// `default` cases, or `PROPTEST_CASES` when it is set.
fn config(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        // A failure is kept as a plain #[test], not in a file beside the source.
        failure_persistence: None,
        ..Config::default()
    }
}

/// Paths built of the components that matter, with or without a leading `/`.
fn path() -> impl Strategy<Value = String> {
    let component = prop::sample::select(
        &[
            "", ".", "..", "...", "a", "b", ".a", "a.", " ", "é", "a\0b", "\\",
        ][..],
    );
    prop_oneof![
        (
            prop::bool::ANY,
            prop::collection::vec(component, 0..12),
            prop::bool::ANY
        )
            .prop_map(|(absolute, parts, trailing)| {
                let mut path = if absolute {
                    "/".to_string()
                } else {
                    String::new()
                };
                path.push_str(&parts.join("/"));
                if trailing {
                    path.push('/');
                }
                path
            }),
        any::<String>(),
        "[./a]{0,24}",
    ]
}

proptest! {
    #![proptest_config(config(1024))]

    #[test]
    fn normalizing_is_idempotent(path in path()) {
        let once = normalize(&path);
        prop_assert_eq!(normalize(&once), once.clone(), "{:?}", path);
    }

    #[test]
    fn a_normalized_path_is_tidy(path in path()) {
        let tidy = normalize(&path);
        if path.is_empty() {
            prop_assert_eq!(tidy, "");
            return Ok(());
        }
        let absolute = path.starts_with('/');
        prop_assert_eq!(tidy.starts_with('/'), absolute, "{:?} -> {:?}", path, tidy);
        if tidy == "/" || tidy == "." {
            return Ok(());
        }
        let rest = tidy.strip_prefix('/').unwrap_or(&tidy);
        let mut named = false;
        for part in rest.split('/') {
            prop_assert!(!part.is_empty() && part != ".", "{:?} -> {:?}", path, tidy);
            if part == ".." {
                prop_assert!(!absolute && !named, "{:?} -> {:?}", path, tidy);
            } else {
                named = true;
            }
        }
    }

    #[test]
    fn only_path_arguments_are_normalized(path in path(), other in path()) {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "format": "path"},
                "other": {"type": "string"},
            }
        });
        let args = json!({"path": path, "other": other});
        let tidy = normalize(&path);
        match normalized(&schema, &args) {
            None => prop_assert_eq!(&tidy, &path),
            Some(changed) => {
                prop_assert_ne!(&tidy, &path);
                prop_assert_eq!(changed, json!({"path": tidy, "other": other}));
            }
        }
    }
}
