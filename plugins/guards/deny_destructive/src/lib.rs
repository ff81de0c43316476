//! `deny_destructive`: a guard that denies a call when any string in its arguments (in
//! practice `bash`'s `command` and `terminal_send`'s `input`) holds a destructive shell
//! command: a recursive `rm` of `/`, a home directory or a top-level system directory,
//! `mkfs`, writing to a disk or memory device, a fork bomb, a recursive `chmod` / `chown`
//! of `/`. The rules are in [`destructive`]. No settings.

use dsh_plugin::{Guard, PendingCall, Verdict};

mod destructive;

struct DenyDestructive;

impl Guard for DenyDestructive {
    fn check(call: PendingCall) -> Verdict {
        let Ok(args) = call.args::<serde_json::Value>() else {
            return Verdict::Deny("the arguments are not JSON".into());
        };
        match guard_shell::strings(&args)
            .into_iter()
            .find_map(destructive::destructive)
        {
            Some(reason) => Verdict::Deny(reason),
            None => Verdict::Allow,
        }
    }
}

dsh_plugin::export!(guard: DenyDestructive);
