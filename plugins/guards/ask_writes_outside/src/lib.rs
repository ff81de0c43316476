//! `ask_writes_outside`: a guard that asks for approval before the file tools write
//! outside the places its settings allow. It judges `write` and `edit` (their `path`
//! argument) and `apply_patch` (every path its patch's `*** Add File:`, `*** Update
//! File:`, `*** Delete File:` and `*** Move to:` lines name); every other tool is
//! allowed, so what a `bash` command writes is not judged.
//!
//! Settings (`[plugins.ask_writes_outside.settings]` in `dsh.toml`): `allow`, globs
//! relative to the workspace (`context.workdir`) naming where the file tools write
//! without asking, e.g. `["src/**"]`. The default, `[]`, asks before every write.
//! Settings that do not parse deny the file tools' calls, naming the setting.
//!
//! Paths are placed by their words alone (the guard has no filesystem): a symbolic link
//! inside an allowed directory is not followed. The setting is read in [`allow`], paths
//! are placed in [`place`], a patch's paths are found in [`patch`], and the verdict is
//! made in [`writes`].

use dsh_plugin::{Guard, PendingCall, Verdict};

mod allow;
mod patch;
mod place;
mod writes;

struct AskWritesOutside;

impl Guard for AskWritesOutside {
    fn check(call: PendingCall) -> Verdict {
        let Ok(args) = call.args::<serde_json::Value>() else {
            return Verdict::Deny("the arguments are not JSON".into());
        };
        // The host hands `{}` when there are no settings; `Null` is what the SDK gives
        // for settings that are not JSON, which `writes` refuses.
        let settings: serde_json::Value = call.settings();
        match writes::judge(&call.tool, &args, &call.context.workdir, &settings) {
            writes::Judgement::Allow => Verdict::Allow,
            writes::Judgement::Ask(reason) => Verdict::Ask(reason),
            writes::Judgement::Deny(reason) => Verdict::Deny(reason),
        }
    }
}

dsh_plugin::export!(guard: AskWritesOutside);

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_plugin::CallContext;
    use serde_json::json;

    fn check(tool: &str, args_json: &str, settings_json: &str) -> Verdict {
        AskWritesOutside::check(PendingCall {
            tool: tool.into(),
            args_json: args_json.into(),
            context: CallContext {
                owner: "owner".into(),
                session: "session".into(),
                call_id: "call-1".into(),
                workdir: "/ws".into(),
                scope: "default".into(),
                settings_json: settings_json.into(),
                output_budget: 30_000,
            },
        })
    }

    #[test]
    fn the_component_reads_its_settings_and_arguments_from_the_call() {
        let src = r#"{"allow":["src/**"]}"#;
        let write = |path: &str| json!({"path": path, "content": "x"}).to_string();
        assert!(matches!(
            check("write", &write("src/a.rs"), src),
            Verdict::Allow
        ));
        assert!(matches!(
            check("write", &write("docs/x.md"), src),
            Verdict::Ask(reason)
                if reason == "`write` writes docs/x.md, outside src/** (ask_writes_outside's allow)"
        ));
        // No settings: `{}`, so every write asks.
        assert!(matches!(
            check("write", &write("src/a.rs"), "{}"),
            Verdict::Ask(_)
        ));
        // Settings that are not JSON (the SDK gives `Null`) deny.
        assert!(matches!(
            check("write", &write("src/a.rs"), "not json"),
            Verdict::Deny(reason) if reason.contains("ask_writes_outside's settings")
        ));
        assert!(matches!(
            check("write", "not json", src),
            Verdict::Deny(reason) if reason == "the arguments are not JSON"
        ));
        assert!(matches!(
            check("bash", r#"{"command":"echo x > /etc/x"}"#, src),
            Verdict::Allow
        ));
    }
}
