//! Fuzz target `paths`: arbitrary path arguments through path normalization
//! ([`dsh::pipeline::paths::normalize`] and [`dsh::pipeline::paths::normalized`]). As its
//! property test (`pipeline/src/pipeline/paths/proptests.rs`) asserts: no panic;
//! normalizing is idempotent; a normalized path has no `.` or empty component, stays
//! absolute or relative as it was, and has no `..` after a named component (nor any in
//! an absolute path); and only the arguments the schema marks as paths change.

#![no_main]

use dsh::pipeline::paths::{normalize, normalized};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|input: (&str, &str)| {
    let (path, other) = input;

    let tidy = normalize(path);
    assert_eq!(normalize(&tidy), tidy, "not idempotent for {path:?}");

    if path.is_empty() {
        assert_eq!(tidy, "");
    } else {
        let absolute = path.starts_with('/');
        assert_eq!(tidy.starts_with('/'), absolute, "{path:?} -> {tidy:?}");
        if tidy != "/" && tidy != "." {
            let rest = tidy.strip_prefix('/').unwrap_or(&tidy);
            let mut named = false;
            for part in rest.split('/') {
                assert!(!part.is_empty() && part != ".", "{path:?} -> {tidy:?}");
                if part == ".." {
                    assert!(!absolute && !named, "{path:?} -> {tidy:?}");
                } else {
                    named = true;
                }
            }
        }
    }

    let schema = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "format": "path"},
            "other": {"type": "string"},
        }
    });
    let args = json!({"path": path, "other": other});
    match normalized(&schema, &args) {
        None => assert_eq!(tidy, path),
        Some(changed) => {
            assert_ne!(tidy, path);
            assert_eq!(changed, json!({"path": tidy, "other": other}));
        }
    }
});
