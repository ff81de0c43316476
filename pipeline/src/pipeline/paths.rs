//! Path arguments, normalized before the gate: a tool marks a top-level string property
//! of its input schema as a path with `"format": "path"` (the file tools do), and every
//! such argument is tidied lexically before the gate, the guards and the tool see it:
//! `.` components and repeated or trailing `/` dropped, and `NAME/..` removed, so
//! `src/../x` is `x` and a rule or guard that judges `x` judges what the tool touches. A
//! leading `..` (of a relative path) stays for the tool's confinement to refuse; `/..` is
//! `/`. The tool acts on the tidied path, so what was judged is what is reached (a
//! symbolic link before a `..` is not followed: `link/../x` is `x`).

use serde_json::Value;

/// The JSON Schema `format` that marks a path argument.
pub const PATH_FORMAT: &str = "path";

/// `args` with every path argument of `schema` normalized, or `None` when none changes.
pub fn normalized(schema: &Value, args: &Value) -> Option<Value> {
    let properties = schema.get("properties")?.as_object()?;
    let mut changed: Option<Value> = None;
    for (name, property) in properties {
        if property.get("format").and_then(Value::as_str) != Some(PATH_FORMAT) {
            continue;
        }
        let Some(path) = args.get(name).and_then(Value::as_str) else {
            continue;
        };
        let tidy = normalize(path);
        if tidy != path {
            changed.get_or_insert_with(|| args.clone())[name] = Value::String(tidy);
        }
    }
    changed
}

/// `path` tidied lexically (see the module doc). An empty path stays empty.
pub fn normalize(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                // `/..` is `/`; a relative path keeps its leading `..`.
                _ if absolute => {}
                _ => parts.push(".."),
            },
            name => parts.push(name),
        }
    }
    match (absolute, parts.is_empty()) {
        (true, _) => format!("/{}", parts.join("/")),
        (false, true) => ".".into(),
        (false, false) => parts.join("/"),
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_are_tidied_lexically() {
        for (path, tidy) in [
            ("src/../x", "x"),
            ("src/./a//b/", "src/a/b"),
            ("./src/main.rs", "src/main.rs"),
            ("a/..", "."),
            (".", "."),
            ("../x", "../x"),
            ("a/../../x", "../x"),
            ("../../etc/passwd", "../../etc/passwd"),
            ("/ws/src/../../etc", "/etc"),
            ("/../..", "/"),
            ("//ws//a", "/ws/a"),
            ("/", "/"),
            ("", ""),
            ("a\0b/../c", "c"),
            ("src/...", "src/..."),
        ] {
            assert_eq!(normalize(path), tidy, "{path:?}");
        }
    }

    #[test]
    fn only_the_arguments_marked_as_paths_change() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "format": "path"},
                "old_string": {"type": "string"},
                "dir": {"type": "string", "format": "path"},
            }
        });
        let args = json!({"path": "src/../x", "old_string": "a/../b", "dir": 3});
        assert_eq!(
            normalized(&schema, &args),
            Some(json!({"path": "x", "old_string": "a/../b", "dir": 3}))
        );
        assert_eq!(normalized(&schema, &json!({"path": "src/x"})), None);
        assert_eq!(normalized(&json!({"type": "object"}), &args), None);
    }
}
