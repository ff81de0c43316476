//! The `allow` setting of `ask_writes_outside`: the workspace-relative globs the file
//! tools write to without asking, read from the guard's settings and matched against a
//! path's workspace-relative form. Settings that do not parse are refused with a reason
//! naming the setting, so a mistake never widens what is allowed.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::Value;

/// The one setting.
const ALLOW: &str = "allow";

/// The globs of `allow`, as written and compiled.
#[derive(Debug)]
pub struct Allow {
    patterns: Vec<String>,
    set: GlobSet,
}

impl Allow {
    /// The `allow` of the guard's `settings` (a JSON object, `{}` when there are none):
    /// no globs when it is absent. Why it does not parse otherwise.
    pub fn from_settings(settings: &Value) -> Result<Allow, String> {
        let Value::Object(settings) = settings else {
            return Err(format!(
                "ask_writes_outside's settings are not a table of settings (got {}): set `{ALLOW} = [\"src/**\", ...]` under [plugins.ask_writes_outside.settings]",
                kind(settings)
            ));
        };
        if let Some(unknown) = settings.keys().find(|key| key.as_str() != ALLOW) {
            return Err(format!(
                "ask_writes_outside has no setting `{unknown}` (its one setting is `{ALLOW}`, a list of globs)"
            ));
        }
        let patterns = match settings.get(ALLOW) {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(pattern) => Ok(pattern.clone()),
                    other => Err(format!(
                        "ask_writes_outside's setting `{ALLOW}[{i}]` is {}, not a glob string",
                        kind(other)
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "ask_writes_outside's setting `{ALLOW}` is {}, not a list of globs (e.g. `{ALLOW} = [\"src/**\"]`)",
                    kind(other)
                ))
            }
        };
        let mut set = GlobSetBuilder::new();
        for (i, pattern) in patterns.iter().enumerate() {
            let bad = |why: String| {
                format!("ask_writes_outside's setting `{ALLOW}[{i}]` ({pattern:?}) {why}")
            };
            if pattern.starts_with('/') || pattern.split('/').any(|c| c == "." || c == "..") {
                // Paths are matched in their workspace-relative form, which never starts
                // with `/` or holds `.` or `..`: such a glob could never match.
                return Err(bad("is not relative to the workspace: write it as a path inside it without `/` first and without `.` or `..` (e.g. \"src/**\")".into()));
            }
            let glob = GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| bad(format!("is not a glob: {}", e.kind())))?;
            set.add(glob);
        }
        let set = set
            .build()
            .map_err(|e| format!("ask_writes_outside's setting `{ALLOW}` does not build: {e}"))?;
        Ok(Allow { patterns, set })
    }

    /// True when the workspace-relative `path` (`src/main.rs`) matches a glob.
    pub fn allows(&self, path: &str) -> bool {
        self.set.is_match(path)
    }

    /// The globs as a reason names them: `src/**, tests/**`, or `None` for none.
    pub fn shown(&self) -> Option<String> {
        (!self.patterns.is_empty()).then(|| self.patterns.join(", "))
    }
}

/// What a JSON value is, for a message.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "not JSON",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn allow(settings: Value) -> Allow {
        Allow::from_settings(&settings).unwrap()
    }

    #[test]
    fn no_settings_allow_nothing() {
        let none = allow(json!({}));
        assert_eq!(none.shown(), None);
        for path in ["src/a.rs", "a", "", "."] {
            assert!(!none.allows(path), "{path}");
        }
        assert!(!allow(json!({"allow": []})).allows("src/a.rs"));
    }

    #[test]
    fn a_star_stays_in_its_directory_and_a_double_star_goes_down() {
        let star = allow(json!({"allow": ["src/*"]}));
        assert!(star.allows("src/a"));
        assert!(!star.allows("src/a/b"));
        assert!(!star.allows("src"));
        assert!(!star.allows("xsrc/a"));
        let deep = allow(json!({"allow": ["src/**"]}));
        for path in ["src/a", "src/a/b", "src/a/b/c.rs", "src/.hidden"] {
            assert!(deep.allows(path), "{path}");
        }
        for path in ["src2/a", "x/src/a", "docs/x.md", "a"] {
            assert!(!deep.allows(path), "{path}");
        }
        let top = allow(json!({"allow": ["*.md"]}));
        assert!(top.allows("README.md"));
        assert!(!top.allows("docs/x.md"));
        let any_md = allow(json!({"allow": ["**/*.md", "tests/**"]}));
        assert!(any_md.allows("docs/deep/x.md") && any_md.allows("x.md"));
        assert!(any_md.allows("tests/e2e/a.rs"));
        assert_eq!(any_md.shown().as_deref(), Some("**/*.md, tests/**"));
    }

    #[test]
    fn matching_is_case_sensitive() {
        assert!(!allow(json!({"allow": ["src/**"]})).allows("SRC/a"));
    }

    #[test]
    fn settings_that_do_not_parse_are_refused_naming_the_setting() {
        for (settings, says) in [
            (
                json!({"allow": "src/**"}),
                "`allow` is a string, not a list of globs",
            ),
            (json!({"allow": true}), "`allow` is a boolean"),
            (json!({"allow": {"src": true}}), "`allow` is a table"),
            (
                json!({"allow": ["src/**", 3]}),
                "`allow[1]` is a number, not a glob string",
            ),
            (
                json!({"allow": ["src/[a"]}),
                "`allow[0]` (\"src/[a\") is not a glob",
            ),
            (
                json!({"allow": ["src/{a"]}),
                "`allow[0]` (\"src/{a\") is not a glob",
            ),
            (
                json!({"allow": ["/ws/src/**"]}),
                "is not relative to the workspace",
            ),
            (
                json!({"allow": ["./src/**"]}),
                "is not relative to the workspace",
            ),
            (
                json!({"allow": ["src/../docs/**"]}),
                "is not relative to the workspace",
            ),
            (json!({"alow": ["src/**"]}), "has no setting `alow`"),
            (
                json!({"allow": ["src/**"], "extra": 1}),
                "has no setting `extra`",
            ),
            (
                json!(["src/**"]),
                "settings are not a table of settings (got a list)",
            ),
            (
                Value::Null,
                "settings are not a table of settings (got not JSON)",
            ),
        ] {
            let error = Allow::from_settings(&settings).unwrap_err();
            assert!(error.contains(says), "{settings}: {error}");
            assert!(error.contains("ask_writes_outside"), "{settings}: {error}");
        }
    }
}
