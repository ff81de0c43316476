//! The rule of `ask_git_push`: does a shell text run `git push`?

/// git's own options that take a separate value, before the subcommand.
const VALUED_OPTIONS: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--config-env",
];

/// The `git push` command the shell text `text` runs, as the guard read it, or `None`.
pub fn git_push(text: &str) -> Option<String> {
    guard_shell::commands(text)
        .into_iter()
        .find(|command| {
            command.program() == Some("git") && subcommand(command.args()) == Some("push")
        })
        .map(|command| command.words.join(" "))
}

/// git's subcommand: the first word that is neither an option nor an option's value.
fn subcommand(args: &[String]) -> Option<&str> {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if VALUED_OPTIONS.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::git_push;

    #[test]
    fn git_push_is_found_as_a_command() {
        for (text, command) in [
            ("git push", "git push"),
            (
                "git push origin main --force",
                "git push origin main --force",
            ),
            ("git -C ../repo push", "git -C ../repo push"),
            (
                "git -c push.default=current push",
                "git -c push.default=current push",
            ),
            (
                "git --git-dir .git --no-pager push -u origin HEAD",
                "git --git-dir .git --no-pager push -u origin HEAD",
            ),
            ("git add . && git commit -m wip && git push", "git push"),
            ("make; git push", "git push"),
            ("cargo test || true\ngit push", "git push"),
            ("sudo -u deploy git push", "git push"),
            ("/usr/bin/git push", "git push"),
            ("echo $(git push 2>&1)", "git push"),
            ("bash -c 'git push'", "git push"),
            ("GIT_SSH_COMMAND=ssh git push", "git push"),
        ] {
            assert_eq!(git_push(text).as_deref(), Some(command), "{text:?}");
        }
    }

    #[test]
    fn other_commands_are_not_pushes() {
        for text in [
            "git status",
            "git pull",
            "git commit -m 'git push later'",
            "git log --grep push",
            "git -C push status",
            "echo git push",
            "grep -r 'git push' docs",
            "git stash push -m wip",
            "gitpush",
            "git",
            "",
        ] {
            assert_eq!(git_push(text), None, "{text:?}");
        }
    }
}
