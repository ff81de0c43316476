//! `workspace_only`: a guard that keeps calls inside the session workspace
//! (`context.workdir`). It denies a call whose top-level `workdir`, `cwd`, `dir`,
//! `directory` or `path` argument resolves outside the workspace, and a `bash` command
//! that starts with `cd` to a place outside it. Paths are resolved lexically (the guard
//! has no filesystem), so symbolic links are not followed, and the `cd` check is best
//! effort: only a leading `cd` to a literal path is judged. The rules are in [`paths`].
//! No settings.

use dsh_plugin::{Guard, PendingCall, Verdict};

mod paths;

struct WorkspaceOnly;

impl Guard for WorkspaceOnly {
    fn check(call: PendingCall) -> Verdict {
        let Ok(args) = call.args::<serde_json::Value>() else {
            return Verdict::Deny("the arguments are not JSON".into());
        };
        match paths::leaves_workspace(&call.tool, &args, &call.context.workdir) {
            Some(reason) => Verdict::Deny(reason),
            None => Verdict::Allow,
        }
    }
}

dsh_plugin::export!(guard: WorkspaceOnly);
