//! `workspace_only`: a guard that keeps calls inside the session workspace
//! (`context.workdir`). It denies a call whose top-level `workdir`, `cwd`, `dir`,
//! `directory` or `path` argument resolves outside the workspace, and a `bash` command
//! that starts with `cd` to a place outside it. Paths are resolved lexically (the guard
//! has no filesystem), so symbolic links are not followed, and the `cd` check is best
//! effort: only a leading `cd` to a literal path is judged. The rules are in [`paths`].
//! No settings.

wit_bindgen::generate!({ path: "../../../wit/v0.2.0", world: "guard" });

mod paths;

struct WorkspaceOnly;

impl Guest for WorkspaceOnly {
    fn check(call: PendingCall) -> Verdict {
        let Ok(args) = serde_json::from_str::<serde_json::Value>(&call.args_json) else {
            return Verdict::Deny("the arguments are not JSON".into());
        };
        match paths::leaves_workspace(&call.tool, &args, &call.context.workdir) {
            Some(reason) => Verdict::Deny(reason),
            None => Verdict::Allow,
        }
    }
}

export!(WorkspaceOnly);
