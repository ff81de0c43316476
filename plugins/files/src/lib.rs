//! The model's file tools, as one plugin of the `tool-files` world: `read`, `write`,
//! `edit`, `apply_patch`, `glob` and `grep`, and `checkpoints` and `undo` (the caller's
//! recent calls that changed files, whatever tool made the change, and putting one's
//! changes back, through the host's `undo` interface). The workspace, and each extra
//! root the operator gives the file tools (`[files] extra_roots`), is a read-only WASI
//! preopen at its own absolute path (what `glob` and `grep` walk, fast); every read that
//! counts for freshness and every change goes through the host's `files` interface
//! (`files.read`; `files.read-lines` for `read`, which is sent only the page it shows;
//! and one all-or-none `files.commit` per call), which confines paths,
//! refuses stale writes and changes in a read-only extra root (`DENIED`). A path in the
//! workspace is shown relative to it, one in an extra root absolute.
//!
//! Settings (`[plugins.files.settings]` in `dsh.toml`): `max_read_bytes` (32 MiB, the
//! largest file read, edit and apply_patch take), `glob_limit` (200 paths) and
//! `grep_head_limit` (250, grep's default `head_limit`).
//!
//! The logic lives in plain modules tested natively: [`paths`], [`sniff`], [`pager`],
//! [`replace`], [`redaction`], [`patch`], [`fsys`], [`walk`], [`recent`], [`find`] and
//! [`search`]; [`tools`] holds the eight tools' schemas, descriptions and handlers, and
//! [`host`] the `files` interface behind a trait (`undo`'s trait is in [`tools::undo`]).

pub mod find;
pub mod fsys;
pub mod host;
pub mod pager;
pub mod patch;
pub mod paths;
pub mod recent;
pub mod redaction;
pub mod replace;
pub mod search;
pub mod sniff;
pub mod tools;
pub mod walk;

#[cfg(test)]
mod roots_tests;

use dsh_plugin::{CallContext, Tool, ToolResult, Tools};

use host::Host;

struct FileTools;

impl Tools for FileTools {
    fn tools() -> Vec<Tool> {
        vec![
            Tool::new(
                "read",
                tools::read::DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::read::run(&Host, c, a).into() },
            )
            .idempotent(),
            Tool::new(
                "write",
                tools::write::DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::write::run(&Host, c, a).into() },
            )
            .idempotent(),
            Tool::new(
                "edit",
                tools::edit::DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::edit::run(&Host, c, a).into() },
            ),
            Tool::new(
                "apply_patch",
                tools::apply_patch::DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::apply_patch::run(&Host, c, a).into() },
            ),
            Tool::new(
                "glob",
                tools::glob::DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::glob::run(c, a).into() },
            )
            .idempotent(),
            Tool::new(
                "grep",
                tools::grep::DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::grep::run(c, a).into() },
            )
            .idempotent(),
            Tool::new(
                "checkpoints",
                tools::undo::CHECKPOINTS_DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::undo::checkpoints(&Host, c, a).into() },
            )
            .idempotent(),
            Tool::new(
                "undo",
                tools::undo::UNDO_DESCRIPTION,
                |c: &CallContext, a| -> ToolResult { tools::undo::undo(&Host, c, a).into() },
            ),
        ]
    }
}

dsh_plugin::export!(tool_files: FileTools);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_tools_with_valid_closed_schemas_and_descriptions() {
        let specs = dsh_plugin::describe(&FileTools::tools());
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "read",
                "write",
                "edit",
                "apply_patch",
                "glob",
                "grep",
                "checkpoints",
                "undo"
            ]
        );
        for spec in &specs {
            let schema: serde_json::Value = serde_json::from_str(&spec.input_schema).unwrap();
            assert_eq!(schema["type"], "object", "{}", spec.name);
            assert_eq!(schema["additionalProperties"], false, "{}", spec.name);
            assert!(!spec.input_schema.contains("$ref"), "{}", spec.name);
            for (name, property) in schema["properties"].as_object().unwrap() {
                assert!(
                    property["description"].is_string(),
                    "{}.{name} has no description",
                    spec.name
                );
            }
            assert!(spec.description.len() > 200, "{}", spec.name);
        }
        let grep: serde_json::Value = serde_json::from_str(&specs[5].input_schema).unwrap();
        assert_eq!(
            grep["properties"]["output_mode"]["enum"],
            serde_json::json!(["content", "files_with_matches", "count"])
        );
        assert!(grep["properties"]["type"].is_object());
        assert_eq!(grep["required"], serde_json::json!(["pattern"]));
        let edit: serde_json::Value = serde_json::from_str(&specs[2].input_schema).unwrap();
        assert_eq!(
            edit["required"],
            serde_json::json!(["path", "old_string", "new_string"])
        );
        let undo: serde_json::Value = serde_json::from_str(&specs[7].input_schema).unwrap();
        assert_eq!(undo["required"], serde_json::json!(["call_id"]));
        assert_eq!(
            specs.iter().map(|s| s.idempotent).collect::<Vec<_>>(),
            [true, true, false, false, true, true, true, false]
        );
    }
}
