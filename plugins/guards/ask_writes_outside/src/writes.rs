//! The verdict of `ask_writes_outside`: which tools it judges, which paths of a call it
//! judges, and the reason it asks or denies. A file-tool call is allowed only when every
//! path it writes, deletes or moves to is placed inside the workspace and matches an
//! `allow` glob; one it cannot place asks.

use serde_json::Value;

use crate::allow::Allow;
use crate::patch;
use crate::place;

/// What the guard decides about a call.
#[derive(Debug, PartialEq)]
pub enum Judgement {
    Allow,
    Ask(String),
    Deny(String),
}

/// One path a call touches: the tool's verb for it and the path as the call names it.
struct Touched<'a> {
    verb: &'static str,
    path: &'a str,
}

/// The verdict on a call to `tool` with `args`, in the workspace `workdir`, under the
/// guard's `settings` (a JSON object; anything else is refused).
pub fn judge(tool: &str, args: &Value, workdir: &str, settings: &Value) -> Judgement {
    let touched = match touched(tool, args) {
        Ok(Some(touched)) => touched,
        Ok(None) => return Judgement::Allow,
        Err(reason) => return Judgement::Deny(reason),
    };
    let allow = match Allow::from_settings(settings) {
        Ok(allow) => allow,
        Err(reason) => return Judgement::Deny(reason),
    };
    let Some(workspace) = place::workspace(workdir) else {
        return match touched.first() {
            Some(first) => Judgement::Ask(format!(
                "`{tool}` {} {}, and the workspace {workdir:?} is not an absolute path to place it in",
                first.verb, first.path
            )),
            None => Judgement::Allow,
        };
    };
    let shown_workspace = format!("/{}", workspace.join("/"));
    for Touched { verb, path } in touched {
        let Some(relative) = place::relative(&workspace, path) else {
            return Judgement::Ask(format!(
                "`{tool}` {verb} {path}, outside the workspace {shown_workspace}"
            ));
        };
        // The workspace itself is no file to write: it matches no glob.
        if !relative.is_empty() && allow.allows(&relative) {
            continue;
        }
        let shown = if relative.is_empty() { "." } else { &relative };
        return Judgement::Ask(match allow.shown() {
            Some(globs) => {
                format!("`{tool}` {verb} {shown}, outside {globs} (ask_writes_outside's allow)")
            }
            None => format!(
                "`{tool}` {verb} {shown}, and ask_writes_outside's allow names no place (every file-tool write asks)"
            ),
        });
    }
    Judgement::Allow
}

/// The paths a call to `tool` writes, deletes or moves to, in order; `None` for a tool
/// the guard does not judge; why not when the argument that names them is missing.
fn touched<'a>(tool: &str, args: &'a Value) -> Result<Option<Vec<Touched<'a>>>, String> {
    let argument = |name: &str| {
        args.get(name).and_then(Value::as_str).ok_or_else(|| {
            format!("`{tool}` has no string argument `{name}`, so ask_writes_outside cannot place what it writes")
        })
    };
    Ok(Some(match tool {
        "write" => vec![Touched {
            verb: "writes",
            path: argument("path")?,
        }],
        "edit" => vec![Touched {
            verb: "edits",
            path: argument("path")?,
        }],
        "apply_patch" => patch::touched(argument("patch")?)
            .into_iter()
            .map(|t| Touched {
                verb: t.verb,
                path: t.path,
            })
            .collect(),
        _ => return Ok(None),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn src() -> Value {
        json!({"allow": ["src/**"]})
    }

    fn write(path: &str, settings: &Value) -> Judgement {
        judge(
            "write",
            &json!({"path": path, "content": "x"}),
            "/ws",
            settings,
        )
    }

    fn edit(path: &str) -> Judgement {
        judge(
            "edit",
            &json!({"path": path, "old_string": "a", "new_string": "b"}),
            "/ws",
            &src(),
        )
    }

    fn apply_patch(patch: &str, settings: &Value) -> Judgement {
        judge("apply_patch", &json!({"patch": patch}), "/ws", settings)
    }

    fn ask(reason: &str) -> Judgement {
        Judgement::Ask(reason.into())
    }

    #[test]
    fn writes_under_an_allowed_glob_are_allowed() {
        for path in [
            "src/a.rs",
            "src/./a",
            "./src/a",
            "src//deep/er/a.rs",
            "/ws/src/a",
            "/ws/./src/a",
            "src/x/../a",
        ] {
            assert_eq!(write(path, &src()), Judgement::Allow, "{path}");
            assert_eq!(edit(path), Judgement::Allow, "{path}");
        }
    }

    #[test]
    fn writes_elsewhere_in_the_workspace_ask_naming_the_tool_and_the_path() {
        assert_eq!(
            write("docs/x.md", &src()),
            ask("`write` writes docs/x.md, outside src/** (ask_writes_outside's allow)")
        );
        assert_eq!(
            edit("/ws/README.md"),
            ask("`edit` edits README.md, outside src/** (ask_writes_outside's allow)")
        );
        // The host tidies `path` arguments, but a guard that resolves them itself
        // does not depend on it.
        assert_eq!(
            write("src/../x", &src()),
            ask("`write` writes x, outside src/** (ask_writes_outside's allow)")
        );
        assert_eq!(
            write("/ws/src/../Cargo.toml", &src()),
            ask("`write` writes Cargo.toml, outside src/** (ask_writes_outside's allow)")
        );
        for path in ["src", "/ws", ".", "src2/a", "x/src/a", "SRC/a", " src/a"] {
            assert!(matches!(write(path, &src()), Judgement::Ask(_)), "{path:?}");
        }
    }

    #[test]
    fn writes_outside_the_workspace_ask() {
        assert_eq!(
            write("/etc/passwd", &src()),
            ask("`write` writes /etc/passwd, outside the workspace /ws")
        );
        assert_eq!(
            write("../src/x", &src()),
            ask("`write` writes ../src/x, outside the workspace /ws")
        );
        for path in [
            "/src/a",
            "/ws2/src/a",
            "../ws/src/a",
            "/ws/../ws/src/a",
            "src/../../ws/src/a",
        ] {
            assert!(matches!(write(path, &src()), Judgement::Ask(_)), "{path}");
        }
        // Even when everything is allowed.
        let everything = json!({"allow": ["**"]});
        assert_eq!(write("docs/x.md", &everything), Judgement::Allow);
        assert!(matches!(
            write("/etc/passwd", &everything),
            Judgement::Ask(_)
        ));
        assert!(matches!(write("../x", &everything), Judgement::Ask(_)));
    }

    #[test]
    fn a_star_does_not_cross_a_slash() {
        let star = json!({"allow": ["src/*"]});
        assert_eq!(write("src/a", &star), Judgement::Allow);
        assert_eq!(
            write("src/a/b", &star),
            ask("`write` writes src/a/b, outside src/* (ask_writes_outside's allow)")
        );
    }

    #[test]
    fn no_settings_ask_before_every_write() {
        for settings in [json!({}), json!({"allow": []})] {
            assert_eq!(
                write("src/a.rs", &settings),
                ask("`write` writes src/a.rs, and ask_writes_outside's allow names no place (every file-tool write asks)")
            );
        }
    }

    #[test]
    fn bad_settings_deny_file_tool_calls_naming_the_setting() {
        for settings in [
            json!({"allow": "src/**"}),
            json!({"allow": [1]}),
            json!({"allow": ["src/[x"]}),
            json!({"allow": ["/ws/src/**"]}),
        ] {
            match write("src/a.rs", &settings) {
                Judgement::Deny(reason) => assert!(
                    reason.contains("ask_writes_outside's setting `allow"),
                    "{settings}: {reason}"
                ),
                other => panic!("{settings}: {other:?}"),
            }
            assert!(matches!(
                apply_patch(
                    "*** Begin Patch\n*** Delete File: src/a\n*** End Patch",
                    &settings
                ),
                Judgement::Deny(_)
            ));
        }
        assert!(matches!(
            write("src/a.rs", &json!({"alow": ["src/**"]})),
            Judgement::Deny(reason) if reason.contains("no setting `alow`")
        ));
        assert!(matches!(
            write("src/a.rs", &Value::Null),
            Judgement::Deny(reason) if reason.contains("ask_writes_outside's settings")
        ));
    }

    #[test]
    fn other_tools_are_allowed_whatever_the_settings() {
        for settings in [src(), json!({}), json!({"allow": 3}), Value::Null] {
            for (tool, args) in [
                ("bash", json!({"command": "echo x > docs/x.md"})),
                ("read", json!({"path": "/etc/passwd"})),
                ("glob", json!({"pattern": "**"})),
                ("grep", json!({"pattern": "x", "path": ".."})),
                ("Write", json!({"path": "docs/x"})),
            ] {
                assert_eq!(judge(tool, &args, "/ws", &settings), Judgement::Allow);
            }
        }
    }

    #[test]
    fn a_patch_is_allowed_only_when_every_file_is() {
        let inside = "*** Begin Patch\n\
                      *** Add File: src/new.rs\n\
                      +x\n\
                      *** Update File: ./src/lib.rs\n\
                      *** Move to: src/b/lib.rs\n\
                      @@\n\
                      -a\n\
                      +b\n\
                      *** Delete File: /ws/src/old.rs\n\
                      *** End Patch";
        assert_eq!(apply_patch(inside, &src()), Judgement::Allow);
        let second_outside = "*** Begin Patch\n\
                              *** Add File: src/a.rs\n\
                              +x\n\
                              *** Add File: docs/b.md\n\
                              +y\n\
                              *** Add File: docs/c.md\n\
                              +z\n\
                              *** End Patch";
        assert_eq!(
            apply_patch(second_outside, &src()),
            ask("`apply_patch` adds docs/b.md, outside src/** (ask_writes_outside's allow)")
        );
    }

    #[test]
    fn a_patch_path_is_resolved_by_the_guard() {
        // The host does not tidy the patch text: `src/../x` is `x`.
        let patch = "*** Begin Patch\n*** Delete File: src/../x\n*** End Patch";
        assert_eq!(
            apply_patch(patch, &src()),
            ask("`apply_patch` deletes x, outside src/** (ask_writes_outside's allow)")
        );
        for path in ["src/./a", "./src/a", "/ws/src/a", "src//a"] {
            let patch = format!("*** Begin Patch\n*** Delete File: {path}\n*** End Patch");
            assert_eq!(apply_patch(&patch, &src()), Judgement::Allow, "{path}");
        }
        for path in ["../src/x", "/etc/x", "../ws/src/x", "src/../../ws/src/x"] {
            let patch = format!("*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch");
            assert_eq!(
                apply_patch(&patch, &src()),
                ask(&format!(
                    "`apply_patch` adds {path}, outside the workspace /ws"
                )),
                "{path}"
            );
        }
    }

    #[test]
    fn a_move_out_of_the_allowed_globs_asks() {
        let patch = "*** Begin Patch\n\
                     *** Update File: src/lib.rs\n\
                     *** Move to: docs/lib.rs\n\
                     @@\n\
                     -a\n\
                     +b\n\
                     *** End Patch";
        assert_eq!(
            apply_patch(patch, &src()),
            ask("`apply_patch` moves a file to docs/lib.rs, outside src/** (ask_writes_outside's allow)")
        );
        let into =
            "*** Begin Patch\n*** Update File: docs/a.md\n*** Move to: src/a.md\n*** End Patch";
        assert_eq!(
            apply_patch(into, &src()),
            ask("`apply_patch` updates docs/a.md, outside src/** (ask_writes_outside's allow)")
        );
    }

    #[test]
    fn a_patch_naming_no_file_is_allowed_as_it_changes_nothing() {
        assert_eq!(apply_patch("not a patch", &src()), Judgement::Allow);
        assert_eq!(
            apply_patch("*** Begin Patch\n*** End Patch", &json!({})),
            Judgement::Allow
        );
    }

    #[test]
    fn arguments_that_do_not_name_a_path_deny() {
        for (tool, args) in [
            ("write", json!({"content": "x"})),
            ("edit", json!({"path": 3})),
            ("apply_patch", json!({"input": "*** Begin Patch"})),
            ("write", json!("src/a")),
        ] {
            assert!(
                matches!(judge(tool, &args, "/ws", &src()), Judgement::Deny(reason) if reason.contains("cannot place")),
                "{tool} {args}"
            );
        }
    }

    #[test]
    fn a_workspace_that_is_not_absolute_places_nothing() {
        assert!(matches!(
            judge("write", &json!({"path": "src/a"}), "", &src()),
            Judgement::Ask(reason) if reason.contains("not an absolute path")
        ));
        assert!(matches!(
            judge("write", &json!({"path": "/ws/src/a"}), "ws", &src()),
            Judgement::Ask(_)
        ));
    }

    #[test]
    fn the_workspace_is_named_as_placed() {
        assert_eq!(
            judge("write", &json!({"path": "/etc/x"}), "/ws/", &src()),
            ask("`write` writes /etc/x, outside the workspace /ws")
        );
        assert_eq!(
            judge("write", &json!({"path": "/ws/src/a"}), "/ws/", &src()),
            Judgement::Allow
        );
    }
}
