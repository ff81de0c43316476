//! The `checkpoints` and `undo` tools: the caller's recent calls that changed files
//! (whichever tool made the change) and putting one call's changes back, through the
//! host's `undo` interface, which records every call's changes, reaches only the
//! caller's own calls and refuses an undo that would overwrite a later change
//! (`undo-conflict`, passed through). The host answers JSON; this module renders it for
//! the model. The handlers take the host as an [`Undo`] so the native tests answer for
//! it.

use dsh_plugin::tool_files::undo as host_undo;
use dsh_plugin::{text, CallContext, ToolError, ToolResult};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{fit_lines, result_budget};

pub const CHECKPOINTS_DESCRIPTION: &str = "List your recent calls that changed files in the workspace (newest \
first), whichever tool made the change (bash, a job, a terminal, the file tools, a subagent): each call's id, tool, \
time, and the paths it created, modified, deleted or changed the mode of, with sizes. Pass a call's id to `undo` to \
put its files back.";

pub const UNDO_DESCRIPTION: &str = "Put back every file a call of yours changed, as it was before that call \
(created files are removed, deleted ones come back, modes and symlinks restored), whichever tool made the change. \
Refuses with UNDO_CONFLICT and changes nothing when a later call or something outside dsh changed one of those paths \
since; with and_later: true, your later calls that changed them are undone too. The undo is itself recorded: undo it \
to redo.";

/// The calls `checkpoints` lists when not told.
const DEFAULT_LIMIT: u32 = 20;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsArgs {
    /// How many of your most recent calls that changed files to list, newest first
    /// (1 to 100, default 20).
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UndoArgs {
    /// The call whose changes to put back, as `checkpoints` lists it: `call-N` for a
    /// call of this session, or `SESSION/call-N`.
    #[schemars(length(min = 1))]
    pub call_id: String,
    /// Also undo your later calls that changed the same paths since (newest first, all
    /// or none), instead of refusing with UNDO_CONFLICT (default false). A change made
    /// outside dsh is never overwritten.
    #[serde(default)]
    pub and_later: bool,
}

/// What the two tools need of the host's `undo` interface.
pub trait Undo {
    /// The caller's recent calls that changed files, newest first, as a JSON array
    /// (`undo.checkpoints`).
    fn checkpoints(&self, limit: u32) -> String;
    /// Puts a call's changes back and answers the JSON summary (`undo.undo`).
    fn undo(&self, call_id: &str, and_later: bool) -> Result<String, ToolError>;
}

impl Undo for crate::host::Host {
    fn checkpoints(&self, limit: u32) -> String {
        host_undo::checkpoints(limit)
    }

    fn undo(&self, call_id: &str, and_later: bool) -> Result<String, ToolError> {
        host_undo::undo(call_id, and_later)
    }
}

/// One call in the host's `checkpoints` answer. Read leniently: a field this version
/// does not know is ignored, and one it does not find is empty.
#[derive(Deserialize)]
struct Checkpoint {
    call_id: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    at: Value,
    #[serde(default)]
    changes: Vec<PathChange>,
    #[serde(default)]
    not_recorded: Vec<Value>,
    #[serde(default)]
    undone_by: Value,
}

/// One path a call changed.
#[derive(Deserialize)]
struct PathChange {
    path: String,
    #[serde(default)]
    change: String,
    #[serde(default)]
    size: Option<u64>,
}

/// The host's summary of a finished undo.
#[derive(Deserialize)]
struct Summary {
    #[serde(default)]
    undone: Vec<String>,
    #[serde(default)]
    restored: Vec<String>,
    #[serde(default)]
    not_restored: Vec<Value>,
}

pub fn checkpoints(
    undo: &dyn Undo,
    context: &CallContext,
    args: CheckpointsArgs,
) -> Result<ToolResult, ToolError> {
    let json = undo.checkpoints(args.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, 100));
    let Ok(list) = serde_json::from_str::<Value>(&json) else {
        // Not what this version reads: the host's own words rather than nothing.
        return Ok(text(json));
    };
    let shown = match serde_json::from_value::<Vec<Checkpoint>>(list.clone()) {
        Ok(calls) => render_checkpoints(context, &calls),
        Err(_) => json,
    };
    // MCP's structured content is an object: the array goes under `checkpoints`.
    let structured = serde_json::json!({ "checkpoints": list }).to_string();
    Ok(text(shown).with_structured_json(structured))
}

pub fn undo(
    undo: &dyn Undo,
    context: &CallContext,
    args: UndoArgs,
) -> Result<ToolResult, ToolError> {
    let json = undo.undo(&args.call_id, args.and_later)?;
    Ok(text(match serde_json::from_str::<Summary>(&json) {
        Ok(summary) => render_summary(context, &args.call_id, &summary),
        // Done, but not in words this version reads: the host's own.
        Err(_) => format!("Undid {}: {json}", args.call_id),
    }))
}

/// One block per call: its id, tool and time, then a line per changed path, what was
/// not recorded and which call undid it; cut to the call's output budget.
fn render_checkpoints(context: &CallContext, calls: &[Checkpoint]) -> String {
    if calls.is_empty() {
        return "No recorded changes.".into();
    }
    let mut out = String::new();
    for call in calls {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&call.call_id);
        for part in [call.tool.clone(), shown(&call.at)] {
            if !part.is_empty() {
                out.push_str("  ");
                out.push_str(&part);
            }
        }
        out.push('\n');
        for change in &call.changes {
            out.push_str(&format!("  {:<8}  {}", change.change, change.path));
            if let Some(size) = change.size {
                out.push_str(&format!("  ({})", human_size(size)));
            }
            out.push('\n');
        }
        for missed in &call.not_recorded {
            out.push_str(&format!("  not recorded: {}\n", shown(missed)));
        }
        let undone_by = shown(&call.undone_by);
        if !undone_by.is_empty() {
            out.push_str(&format!("  undone by {undone_by}\n"));
        }
    }
    if fit_lines(&mut out, result_budget(context)) {
        out.push_str("[cut to fit the output: pass a smaller limit to see fewer calls whole]\n");
    }
    out.pop();
    out
}

/// "Undid call-X: restored N paths:" and the paths, then what was not restored.
fn render_summary(context: &CallContext, asked: &str, summary: &Summary) -> String {
    let calls = match summary.undone.as_slice() {
        [] => asked.to_string(),
        undone => undone.join(", "),
    };
    let count = summary.restored.len();
    let mut out = match count {
        0 => format!("Undid {calls}: restored no paths.\n"),
        1 => format!("Undid {calls}: restored 1 path:\n"),
        _ => format!("Undid {calls}: restored {count} paths:\n"),
    };
    for path in &summary.restored {
        out.push_str(&format!("  {path}\n"));
    }
    for missed in &summary.not_restored {
        out.push_str(&format!("  not restored: {}\n", shown(missed)));
    }
    let cut = fit_lines(&mut out, result_budget(context));
    if cut {
        out.push_str("[list cut to fit the output]\n");
    }
    out.push_str(&format!(
        "This undo is recorded as {0}: undo {0} to redo.",
        context.call_id
    ));
    out
}

/// A JSON value as a line shows it: a string as it is, nothing for null, anything else
/// as JSON.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `bytes` as people read it: `512 B`, `1.2 KiB`, `3.4 MiB`, `1.0 GiB`.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::tools::testing::{context, failed, ok_text};
    use dsh_plugin::{error, ErrorCode};

    /// Canned answers, and what was asked.
    struct Canned {
        checkpoints: String,
        undo: Result<String, ToolError>,
        asked: RefCell<Vec<String>>,
    }

    impl Canned {
        fn new(checkpoints: &str, undo: Result<&str, ToolError>) -> Canned {
            Canned {
                checkpoints: checkpoints.into(),
                undo: undo.map(Into::into),
                asked: RefCell::default(),
            }
        }
    }

    impl Undo for Canned {
        fn checkpoints(&self, limit: u32) -> String {
            self.asked.borrow_mut().push(format!("checkpoints {limit}"));
            self.checkpoints.clone()
        }

        fn undo(&self, call_id: &str, and_later: bool) -> Result<String, ToolError> {
            self.asked
                .borrow_mut()
                .push(format!("undo {call_id} {and_later}"));
            self.undo.clone()
        }
    }

    fn list(host: &Canned, args: serde_json::Value) -> ToolResult {
        checkpoints(host, &context(), serde_json::from_value(args).unwrap()).into()
    }

    #[test]
    fn checkpoints_renders_a_block_per_call_and_keeps_the_json() {
        let json = r#"[
            {"call_id": "s17/call-7", "tool": "bash", "at": "2026-12-07T04:10:02Z",
             "changes": [{"path": "src/main.rs", "change": "modified", "size": 1234},
                         {"path": "old.txt", "change": "deleted", "size": null},
                         {"path": "run.sh", "change": "mode", "size": 10}],
             "not_recorded": ["target/: too many paths"], "undone_by": "s17/call-9",
             "extra": 1},
            {"call_id": "s17/call-3", "tool": "write", "at": "2026-12-07T04:00:00Z",
             "changes": [{"path": "big.bin", "change": "created", "size": 3670016}],
             "not_recorded": [], "undone_by": null}
        ]"#;
        let host = Canned::new(json, Ok("{}"));
        let result = list(&host, serde_json::json!({}));
        let structured: Value =
            serde_json::from_str(result.structured_json.as_deref().unwrap()).unwrap();
        assert_eq!(structured["checkpoints"][0]["call_id"], "s17/call-7");
        assert_eq!(
            ok_text(result),
            "s17/call-7  bash  2026-12-07T04:10:02Z\n\
             \x20 modified  src/main.rs  (1.2 KiB)\n\
             \x20 deleted   old.txt\n\
             \x20 mode      run.sh  (10 B)\n\
             \x20 not recorded: target/: too many paths\n\
             \x20 undone by s17/call-9\n\
             \n\
             s17/call-3  write  2026-12-07T04:00:00Z\n\
             \x20 created   big.bin  (3.5 MiB)"
        );
        assert_eq!(*host.asked.borrow(), ["checkpoints 20"]);
        list(&host, serde_json::json!({"limit": 5}));
        assert_eq!(host.asked.borrow()[1], "checkpoints 5");
    }

    #[test]
    fn checkpoints_says_when_nothing_is_recorded_and_shows_an_unread_answer_as_it_is() {
        let host = Canned::new("[]", Ok("{}"));
        assert_eq!(
            ok_text(list(&host, serde_json::json!({}))),
            "No recorded changes."
        );
        let host = Canned::new(r#"{"surprise": true}"#, Ok("{}"));
        assert_eq!(
            ok_text(list(&host, serde_json::json!({}))),
            r#"{"surprise": true}"#
        );
    }

    #[test]
    fn checkpoints_arguments_are_checked() {
        assert!(serde_json::from_value::<CheckpointsArgs>(serde_json::json!({"max": 3})).is_err());
        let schema: Value = dsh_plugin::schema_for::<CheckpointsArgs>();
        assert_eq!(schema["properties"]["limit"]["minimum"], 1);
        assert_eq!(schema["properties"]["limit"]["maximum"], 100);
        assert!(schema.get("required").is_none());
    }

    #[test]
    fn undo_renders_the_summary_and_names_the_call_that_redoes_it() {
        let host = Canned::new(
            "[]",
            Ok(
                r#"{"undone": ["call-7"], "restored": ["src/main.rs", "old.txt"],
                  "not_restored": ["run.sh: mode kept (a symlink now)"]}"#,
            ),
        );
        let result: ToolResult = undo(
            &host,
            &context(),
            serde_json::from_value(serde_json::json!({"call_id": "call-7"})).unwrap(),
        )
        .into();
        assert_eq!(
            ok_text(result),
            "Undid call-7: restored 2 paths:\n  src/main.rs\n  old.txt\n  \
             not restored: run.sh: mode kept (a symlink now)\n\
             This undo is recorded as call-1: undo call-1 to redo."
        );
        assert_eq!(*host.asked.borrow(), ["undo call-7 false"]);
    }

    #[test]
    fn undo_with_and_later_names_every_call_undone() {
        let host = Canned::new(
            "[]",
            Ok(r#"{"undone": ["call-9", "call-7"], "restored": ["a"], "not_restored": []}"#),
        );
        let result: ToolResult = undo(
            &host,
            &context(),
            serde_json::from_value(serde_json::json!({"call_id": "call-7", "and_later": true}))
                .unwrap(),
        )
        .into();
        assert!(ok_text(result).starts_with("Undid call-9, call-7: restored 1 path:\n  a\n"));
        assert_eq!(*host.asked.borrow(), ["undo call-7 true"]);
    }

    #[test]
    fn undo_passes_the_hosts_error_through() {
        let host = Canned::new(
            "[]",
            Err(error(
                ErrorCode::UndoConflict,
                "src/main.rs was changed since by call-9 (bash)",
            )),
        );
        let result: ToolResult = undo(
            &host,
            &context(),
            serde_json::from_value(serde_json::json!({"call_id": "call-7"})).unwrap(),
        )
        .into();
        assert_eq!(
            failed(result),
            (
                ErrorCode::UndoConflict,
                "src/main.rs was changed since by call-9 (bash)".to_string()
            )
        );
        assert!(serde_json::from_value::<UndoArgs>(serde_json::json!({})).is_err());
    }

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KiB");
        assert_eq!(human_size(1_288), "1.3 KiB");
        assert_eq!(human_size(5 << 30), "5.0 GiB");
    }
}
