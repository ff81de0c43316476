//! The rules of `deny_destructive`: which shell commands destroy a system, and the
//! reason shown to the model, naming what matched.
//!
//! A command counts by its program word (after `sudo`, `env`, `;`, `&&`, `$(`, ...), so
//! `echo mkfs` or `grep -r "rm -rf /"` are allowed. Paths are judged as written:
//! `rm -rf /usr/../` is `/`, but `rm -rf "$DIR"` is not expanded.

use guard_shell::Command;

/// Why running the shell text `text` would be destructive, or `None`.
pub fn destructive(text: &str) -> Option<String> {
    if let Some(name) = fork_bomb(text) {
        return Some(format!("`{name}(){{ {name}|{name}& }}` is a fork bomb"));
    }
    guard_shell::commands(text)
        .iter()
        .find_map(destructive_command)
}

fn destructive_command(command: &Command) -> Option<String> {
    if let Some((target, device)) = command
        .writes
        .iter()
        .find_map(|t| device(t).map(|d| (t, d)))
    {
        return Some(format!("`> {target}` would overwrite {device}"));
    }
    let program = command.program()?;
    let args = command.args();
    let quoted = command.words.join(" ");
    match program {
        "rm" => recursive_targets(args, &["-r", "-R", "--recursive"])
            .into_iter()
            .next()
            .map(|what| format!("`{quoted}` would delete {what}")),
        "chmod" | "chown" | "chgrp" => {
            let change = if program == "chmod" {
                "permissions"
            } else {
                "ownership"
            };
            recursive_targets(args, &["-R", "--recursive"])
                .into_iter()
                .find(|what| !matches!(what, Critical::Home | Critical::AboveHome))
                .map(|what| format!("`{quoted}` would change the {change} of {what}"))
        }
        "mkfs" | "mke2fs" => Some(format!("`{quoted}` would format a filesystem")),
        _ if program.starts_with("mkfs.") => Some(format!("`{quoted}` would format a filesystem")),
        "dd" => args.iter().find_map(|arg| {
            let target = arg.strip_prefix("of=")?;
            device(target).map(|device| format!("`dd of={target}` would overwrite {device}"))
        }),
        "shred" | "wipefs" | "blkdiscard" | "tee" => args.iter().find_map(|arg| {
            device(arg).map(|device| format!("`{program} {arg}` would overwrite {device}"))
        }),
        _ => None,
    }
}

/// The critical targets of a command given a recursive flag: a word in `flags`, or a
/// short-option cluster holding one of their letters (`-rf`, `-Rv`). None without one.
fn recursive_targets(args: &[String], flags: &[&str]) -> Vec<Critical> {
    let letters: Vec<char> = flags
        .iter()
        .filter(|f| f.len() == 2)
        .filter_map(|f| f.chars().nth(1))
        .collect();
    let mut recursive = false;
    let mut targets = Vec::new();
    let mut options_ended = false;
    for arg in args {
        if options_ended || arg.len() < 2 || !arg.starts_with('-') {
            targets.extend(critical(arg));
        } else if arg == "--" {
            options_ended = true;
        } else {
            recursive |= flags.contains(&arg.as_str())
                || (!arg.starts_with("--") && arg.contains(letters.as_slice()));
        }
    }
    if recursive {
        targets
    } else {
        Vec::new()
    }
}

/// A path whose recursive deletion or permission change wrecks the system.
#[derive(Debug, PartialEq, Eq)]
enum Critical {
    Filesystem,
    Home,
    AboveHome,
    SystemDirectory(String),
}

impl std::fmt::Display for Critical {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Critical::Filesystem => write!(f, "the whole filesystem"),
            Critical::Home => write!(f, "the home directory"),
            Critical::AboveHome => write!(f, "the directory holding the home directory"),
            Critical::SystemDirectory(dir) => write!(f, "the system directory {dir}"),
        }
    }
}

/// Top-level directories a system cannot lose.
const SYSTEM_DIRECTORIES: &[&str] = &[
    "bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media", "mnt", "opt",
    "proc", "root", "run", "sbin", "srv", "sys", "usr", "var",
];

/// What `target` is when it is `/`, a top-level system directory, or a home directory
/// (`~`, `~user`, `$HOME`, `${HOME}`), after `.`, `..`, repeated `/` and trailing `/*`.
fn critical(target: &str) -> Option<Critical> {
    let home_rest = if let Some(rest) = target.strip_prefix('~') {
        Some(rest.find('/').map_or("", |slash| &rest[slash..]))
    } else {
        ["$HOME", "${HOME}"]
            .iter()
            .find_map(|home| target.strip_prefix(home))
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    let (in_home, rest) = match home_rest {
        Some(rest) => (true, rest),
        None if target.starts_with('/') => (false, target),
        None => return None,
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.pop().is_none() && in_home => return Some(Critical::AboveHome),
            ".." => {}
            _ => parts.push(part),
        }
    }
    while parts.last() == Some(&"*") {
        parts.pop();
    }
    match (in_home, parts.as_slice()) {
        (true, []) => Some(Critical::Home),
        (false, []) => Some(Critical::Filesystem),
        (false, [dir]) if SYSTEM_DIRECTORIES.contains(dir) => {
            Some(Critical::SystemDirectory(format!("/{dir}")))
        }
        _ => None,
    }
}

/// What writing to `path` would overwrite, when it is a disk or memory device.
fn device(path: &str) -> Option<&'static str> {
    const DISKS: &[&str] = &[
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "md", "dm-", "disk/", "mapper/",
    ];
    let name = path.strip_prefix("/dev/")?;
    match name {
        "mem" => Some("physical memory (/dev/mem)"),
        "kmem" => Some("kernel memory (/dev/kmem)"),
        "port" => Some("I/O ports (/dev/port)"),
        _ if DISKS.iter().any(|disk| name.starts_with(disk)) => Some("a disk device"),
        _ => None,
    }
}

/// The function name of a fork bomb, `NAME(){ NAME|NAME& }` (whitespace ignored, also
/// `function NAME`), when `text` defines one.
fn fork_bomb(text: &str) -> Option<String> {
    let squeezed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    squeezed.match_indices("(){").find_map(|(at, _)| {
        let start = squeezed[..at]
            .rfind([';', '&', '|', '(', ')', '{', '}', '\'', '"'])
            .map_or(0, |i| i + 1);
        let defined = &squeezed[start..at];
        let body = &squeezed[at + 3..];
        [Some(defined), defined.strip_prefix("function")]
            .into_iter()
            .flatten()
            .find(|name| !name.is_empty() && body.starts_with(&format!("{name}|{name}&")))
            .map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::destructive;

    #[track_caller]
    fn denied(text: &str, expected: &str) {
        match destructive(text) {
            Some(reason) => assert!(
                reason.contains(expected),
                "{text:?}: reason {reason:?} lacks {expected:?}"
            ),
            None => panic!("{text:?} was allowed"),
        }
    }

    #[track_caller]
    fn allowed(text: &str) {
        assert_eq!(destructive(text), None, "{text:?} was denied");
    }

    #[test]
    fn recursive_rm_of_the_filesystem_root() {
        assert_eq!(
            destructive("rm -rf /").as_deref(),
            Some("`rm -rf /` would delete the whole filesystem")
        );
        for text in [
            "rm -fr /",
            "rm -r -f /",
            "rm -R -f /",
            "rm -Rf /*",
            "rm --recursive --force /",
            "rm -rf --no-preserve-root /",
            "rm -rfv //",
            "rm -rf /usr/../",
            "rm -rf -- /",
            "rm -r /",
            "sudo rm -rf /",
            "/bin/rm -rf /",
            "\\rm -rf /",
            "cd /tmp && rm -rf /",
            "echo $(rm -rf /)",
            "bash -c 'rm -rf /'",
            "FORCE=1 sudo -E rm -rf / &",
        ] {
            denied(text, "would delete the whole filesystem");
        }
    }

    #[test]
    fn recursive_rm_of_home_and_system_directories() {
        denied("rm -rf ~", "the home directory");
        denied("rm -rf ~/", "the home directory");
        denied("rm -rf ~/*", "the home directory");
        denied("rm -rf $HOME", "the home directory");
        denied("rm -rf \"$HOME\"/", "the home directory");
        denied("rm -rf ${HOME}/*", "the home directory");
        denied("rm -rf ~alice", "the home directory");
        denied("rm -rf ~/..", "holding the home directory");
        for dir in [
            "/home", "/etc", "/usr", "/var", "/boot", "/bin", "/lib", "/root", "/usr/", "/etc/*",
        ] {
            denied(&format!("rm -rf {dir}"), "the system directory /");
        }
        assert_eq!(
            destructive("rm -rf /tmp/x /etc").as_deref(),
            Some("`rm -rf /tmp/x /etc` would delete the system directory /etc")
        );
    }

    #[test]
    fn ordinary_rm_is_allowed() {
        for text in [
            "rm -rf ./build",
            "rm -rf target",
            "rm -rf /tmp/build",
            "rm -rf /home/alice/project/target",
            "rm -rf ~/project/target",
            "rm -rf $HOME/.cache/pip",
            "rm -rf *",
            "rm -f /etc",
            "rm /",
            "rm -rf \"$DIR\"",
            "rm -- -rf",
            "ls /",
            "ls -la / /etc",
            "grep -r \"rm -rf /\" .",
            "echo 'rm -rf /'",
            "git commit -m 'do not rm -rf /'",
        ] {
            allowed(text);
        }
    }

    #[test]
    fn mkfs_as_a_command_word() {
        for text in [
            "mkfs /dev/sda1",
            "mkfs.ext4 /dev/sda1",
            "sudo mkfs.xfs -f /dev/nvme0n1p2",
            "true && mkfs -t ext4 /dev/sdb",
            "x; mkfs.vfat /dev/sdc1",
            "echo | mkfs.ext4 /dev/sdb",
            "$(mkfs.ext4 /dev/sdb)",
            "`mkfs.ext4 /dev/sdb`",
            "/sbin/mkfs.btrfs /dev/vdb",
            "mke2fs /dev/sdb1",
        ] {
            denied(text, "would format a filesystem");
        }
        for text in [
            "echo mkfs is a word",
            "man mkfs",
            "grep mkfs.ext4 notes.txt",
            "ls /sbin/mkfs.*",
            "which mkfs",
        ] {
            allowed(text);
        }
    }

    #[test]
    fn writing_to_devices() {
        for text in [
            "dd if=/dev/zero of=/dev/sda",
            "dd if=image.iso of=/dev/sdb bs=4M status=progress",
            "sudo dd of=/dev/nvme0n1 if=/dev/urandom",
            "dd if=x of=/dev/mmcblk0",
            "dd if=x of=/dev/vda",
            "dd if=x of=/dev/hda",
            "dd if=x of=/dev/xvda1",
            "dd if=x of=/dev/mapper/root",
        ] {
            denied(text, "would overwrite a disk device");
        }
        denied(
            "echo hi > /dev/sda",
            "`> /dev/sda` would overwrite a disk device",
        );
        denied("cat image >/dev/sdb1", "a disk device");
        denied("cat x >> /dev/nvme0n1", "a disk device");
        denied(
            "shred /dev/sda",
            "`shred /dev/sda` would overwrite a disk device",
        );
        denied("shred -n 3 -z /dev/nvme0n1", "a disk device");
        denied("wipefs -a /dev/sdb", "a disk device");
        denied("echo x | sudo tee /dev/sda", "a disk device");
        denied("dd if=x of=/dev/mem", "physical memory");
        denied("echo 1 > /dev/kmem", "kernel memory");
        denied("cat x > /dev/port", "I/O ports");
        for text in [
            "dd if=/dev/zero of=disk.img bs=1M count=10",
            "dd if=/dev/sda of=backup.img",
            "cat /dev/sda | head -c 512 | xxd",
            "echo hi > /dev/null",
            "cmd 2>/dev/null >/dev/stderr",
            "shred secret.txt",
            "tee log.txt",
            "ls /dev/sda*",
        ] {
            allowed(text);
        }
    }

    #[test]
    fn fork_bombs() {
        denied(":(){ :|:& };:", "is a fork bomb");
        denied(":(){:|:&};:", "`:(){ :|:& }` is a fork bomb");
        denied(": ( ) { : | : & } ; :", "fork bomb");
        denied("bomb() { bomb | bomb & }; bomb", "`bomb(){ bomb|bomb& }`");
        denied("function f() { f|f & }; f", "`f(){ f|f& }`");
        denied("echo start; :(){ :|:& };:", "fork bomb");
        allowed("f() { echo hi | cat & }; f");
        allowed("greet() { echo hello; }; greet | tee out");
    }

    #[test]
    fn recursive_permission_changes_of_the_system() {
        assert_eq!(
            destructive("chmod -R 777 /").as_deref(),
            Some("`chmod -R 777 /` would change the permissions of the whole filesystem")
        );
        denied(
            "sudo chmod --recursive 000 /etc",
            "permissions of the system directory /etc",
        );
        denied(
            "chown -R nobody:nogroup /usr",
            "ownership of the system directory /usr",
        );
        denied("chgrp -Rv staff /", "ownership of the whole filesystem");
        for text in [
            "chmod -R 755 ./dist",
            "chmod 777 /",
            "chmod -R u+w ~",
            "chown -R me ~/project",
            "chmod -r file",
        ] {
            allowed(text);
        }
    }
}
