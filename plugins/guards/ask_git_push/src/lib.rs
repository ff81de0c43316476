//! `ask_git_push`: a guard that asks for approval when any string in a call's arguments
//! runs `git push` (as a command, also after `sudo`, `&&`, `;`, in `$(...)`, and with
//! git's own options first, as in `git -C dir push`). Every other call is allowed. The
//! rule is in [`push`]. No settings.

use dsh_plugin::{Guard, PendingCall, Verdict};

mod push;

struct AskGitPush;

impl Guard for AskGitPush {
    fn check(call: PendingCall) -> Verdict {
        let Ok(args) = call.args::<serde_json::Value>() else {
            return Verdict::Deny("the arguments are not JSON".into());
        };
        match guard_shell::strings(&args)
            .into_iter()
            .find_map(push::git_push)
        {
            Some(command) => Verdict::Ask(format!("`{command}` publishes commits to a remote")),
            None => Verdict::Allow,
        }
    }
}

dsh_plugin::export!(guard: AskGitPush);
