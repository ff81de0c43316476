//! `ask_git_push`: a guard that asks for approval when any string in a call's arguments
//! runs `git push` (as a command, also after `sudo`, `&&`, `;`, in `$(...)`, and with
//! git's own options first, as in `git -C dir push`). Every other call is allowed. The
//! rule is in [`push`]. No settings.

wit_bindgen::generate!({ path: "../../../wit/v0.2.0", world: "guard" });

mod push;

struct AskGitPush;

impl Guest for AskGitPush {
    fn check(call: PendingCall) -> Verdict {
        let Ok(args) = serde_json::from_str::<serde_json::Value>(&call.args_json) else {
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

export!(AskGitPush);
