//! The files service against real directories: reads and commits, stale files, owners,
//! all-or-none, modes, escapes (`..`, absolute paths, links out, a directory swapped for
//! a link while commits run), FIFOs, and dsh's own files.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;

struct Fixture {
    _root: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    service: FileService,
}

/// A workspace `root/ws` with the state directory beside it and `ws/dsh.toml` and
/// `ws/plugins` as the configuration and plugin directory.
fn fixture() -> Fixture {
    fixture_with(FilesConfig::default(), false)
}

fn fixture_with(config: FilesConfig, state_inside: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join("plugins")).unwrap();
    std::fs::write(ws.join("dsh.toml"), "[limits]\n").unwrap();
    std::fs::write(ws.join("plugins/x.wasm"), "wasm").unwrap();
    let state = match state_inside {
        true => ws.join(".state"),
        false => root.join("state"),
    };
    std::fs::create_dir_all(state.join("cache")).unwrap();
    std::fs::write(state.join("cache/key"), "secret").unwrap();
    let own = OwnFiles::new(
        &state,
        Some(&ws.join("dsh.toml")),
        Some(&ws.join("plugins")),
    );
    let service = FileService::new(config, Some(ws.clone()), own);
    Fixture {
        _root: dir,
        root,
        ws,
        service,
    }
}

impl Fixture {
    fn read(&self, owner: &str, path: &str) -> Result<FileRead, ToolError> {
        self.service
            .read(owner, &self.ws, path, u64::MAX, true, &CallReads::default())
    }

    fn commit(&self, owner: &str, changes: Vec<Change>) -> Result<Vec<Changed>, ToolError> {
        self.service
            .commit(owner, &self.ws, changes, &CallReads::default())
    }

    fn write(&self, owner: &str, path: &str, contents: &str) -> Result<Vec<Changed>, ToolError> {
        self.commit(owner, vec![write(path, contents)])
    }

    fn put(&self, path: &str, contents: &str) {
        let path = self.ws.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn text(&self, path: &str) -> String {
        std::fs::read_to_string(self.ws.join(path)).unwrap()
    }

    /// Every name in the workspace (recursively), sorted, `plugins` and `dsh.toml` left
    /// out.
    fn names(&self) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, into: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                into.push(path.strip_prefix(base).unwrap().display().to_string());
                if entry.file_type().unwrap().is_dir() {
                    walk(&path, base, into);
                }
            }
        }
        let mut names = Vec::new();
        walk(&self.ws, &self.ws, &mut names);
        names.retain(|n| !n.starts_with("plugins") && n != "dsh.toml");
        names.sort();
        names
    }
}

fn write(path: &str, contents: &str) -> Change {
    Change::Write {
        path: path.into(),
        contents: contents.as_bytes().to_vec(),
        mode_from: None,
    }
}

fn fails(result: Result<impl std::fmt::Debug, ToolError>) -> (ErrorCode, String) {
    let error = result.unwrap_err();
    (error.code, error.message)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn a_read_file_is_replaced_whole_and_the_writer_counts_as_having_read_it() {
    let f = fixture();
    f.put("src/main.rs", "fn main() {}\n");
    let read = f.read("a", "src/main.rs").unwrap();
    assert_eq!(read.path, "src/main.rs");
    assert_eq!(read.contents, b"fn main() {}\n");
    assert_eq!(read.mode, mode(&f.ws.join("src/main.rs")));
    // The same file by its absolute path and with `.` and `..` in it.
    let absolute = format!("{}/src/../src/./main.rs", f.ws.display());
    assert_eq!(f.read("a", &absolute).unwrap().path, "src/main.rs");

    let changed = f
        .write("a", "src/main.rs", "fn main() { run() }\n")
        .unwrap();
    assert_eq!(
        changed,
        [Changed {
            path: "src/main.rs".into(),
            created: false,
            bytes: 20,
        }]
    );
    assert_eq!(f.text("src/main.rs"), "fn main() { run() }\n");
    // What it wrote counts as read: a second commit needs no read in between.
    f.write("a", "src/main.rs", "fn main() {}\n").unwrap();
    assert_eq!(f.text("src/main.rs"), "fn main() {}\n");
    // No temporary file is left.
    assert_eq!(f.names(), ["src", "src/main.rs"]);
}

#[test]
fn a_new_file_needs_no_read_and_its_directories_are_made() {
    let f = fixture();
    let changed = f.write("a", "new/deep/file.txt", "hello").unwrap();
    assert_eq!(
        changed,
        [Changed {
            path: "new/deep/file.txt".into(),
            created: true,
            bytes: 5,
        }]
    );
    assert_eq!(f.text("new/deep/file.txt"), "hello");
    assert_eq!(
        mode(&f.ws.join("new/deep/file.txt")),
        0o644 & !confined::umask()
    );
    // And it counts as read.
    f.write("a", "new/deep/file.txt", "again").unwrap();
}

#[test]
fn a_read_not_remembered_does_not_count() {
    let f = fixture();
    f.put("a.txt", "one");
    let peeked = f
        .service
        .read("a", &f.ws, "a.txt", u64::MAX, false, &CallReads::default())
        .unwrap();
    assert_eq!(peeked.contents, b"one");
    let (code, _) = fails(f.write("a", "a.txt", "two"));
    assert_eq!(code, ErrorCode::StaleFile, "a peek made the write allowed");
    // A remembered read, then a change behind it, then a peek: still stale.
    f.read("a", "a.txt").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    std::fs::write(f.ws.join("a.txt"), "ONE").unwrap();
    f.service
        .read("a", &f.ws, "a.txt", u64::MAX, false, &CallReads::default())
        .unwrap();
    let (code, _) = fails(f.write("a", "a.txt", "two"));
    assert_eq!(code, ErrorCode::StaleFile, "a peek refreshed the stamp");
    assert_eq!(f.text("a.txt"), "ONE");
}

/// Two calls of one owner that read a file and then change it, as two `edit`s sent at
/// once do: the second commit was computed from text the first replaced.
#[test]
fn a_change_computed_from_text_another_call_replaced_is_stale() {
    let f = fixture();
    f.put("conc.txt", "alpha\nmiddle\nbeta\n");
    f.read("a", "conc.txt").unwrap();
    let (first, second) = (CallReads::default(), CallReads::default());
    let peek = |call: &CallReads| {
        f.service
            .read("a", &f.ws, "conc.txt", u64::MAX, false, call)
            .unwrap()
    };
    let commit = |call: &CallReads, text: &str| {
        f.service
            .commit("a", &f.ws, vec![write("conc.txt", text)], call)
    };
    assert_eq!(peek(&first).contents, peek(&second).contents);
    assert_eq!((first.len(), second.len()), (1, 1));
    commit(&first, "ALPHA\nmiddle\nbeta\n").unwrap();
    // The owner's stamp is the first commit's: only the call's record knows.
    let (code, message) = fails(commit(&second, "alpha\nmiddle\nBETA\n"));
    assert_eq!(code, ErrorCode::StaleFile);
    assert!(
        message.contains("conc.txt changed since this call read it"),
        "{message}"
    );
    assert_eq!(f.text("conc.txt"), "ALPHA\nmiddle\nbeta\n");
    // Read again, computed again: it applies, and both changes are kept.
    let now = String::from_utf8(peek(&second).contents).unwrap();
    commit(&second, &now.replace("beta", "BETA")).unwrap();
    assert_eq!(f.text("conc.txt"), "ALPHA\nmiddle\nBETA\n");
    // A call's second commit of a file it wrote is computed from what it wrote.
    commit(&second, "ALPHA\nBETA\n").unwrap();
    // The file removed behind a call that read it: recreating it from the old text is
    // stale too.
    let third = CallReads::default();
    peek(&third);
    f.read("a", "conc.txt").unwrap();
    f.commit("a", vec![Change::Remove("conc.txt".into())])
        .unwrap();
    let (code, message) = fails(commit(&third, "ALPHA\n"));
    assert_eq!(code, ErrorCode::StaleFile);
    assert!(
        message.contains("conc.txt was removed since this call read it"),
        "{message}"
    );
    assert!(!f.ws.join("conc.txt").exists());
}

#[test]
fn a_call_keeps_the_bytes_it_read_up_to_its_budget_then_their_digest() {
    let call = CallReads::default();
    let big = vec![7u8; CALL_BYTES_KEPT - 2];
    call.record("/ws/a".into(), (1, 1), big.as_slice().into());
    // Past the budget: the digest only.
    call.record("/ws/b".into(), (1, 2), b"abc".as_slice().into());
    assert_eq!(call.kept(), CALL_BYTES_KEPT - 2);
    let a = call.get(Path::new("/ws/a"), None).unwrap();
    assert!(matches!(a, Seen::Bytes(_)));
    assert!(a.holds(&big));
    // Compared a piece at a time: shorter, longer, or other bytes past the first pieces.
    assert!(!a.holds(&big[..big.len() - 1]));
    assert!(!a.holds(&[big.as_slice(), &[7]].concat()));
    let mut late = big.clone();
    late[(1 << 20) + 3] = 8;
    assert!(!a.holds(&late));
    let b = call.get(Path::new("/ws/b"), None).unwrap();
    assert!(matches!(b, Seen::Digest(_)));
    assert!(b.holds(b"abc") && !b.holds(b"abd"));
    assert!(!b.holds(b"ab") && !b.holds(b"abcd"));
    // The same file under another name, by its identity.
    assert!(call.get(Path::new("/ws/link"), Some((1, 2))).is_some());
    assert!(call.get(Path::new("/ws/link"), Some((9, 9))).is_none());
    call.forget(Path::new("/ws/a"));
    assert_eq!(call.kept(), 0);
    // Read again: kept again, counted once.
    call.record("/ws/b".into(), (1, 2), b"abc".as_slice().into());
    call.record("/ws/b".into(), (1, 2), b"abcd".as_slice().into());
    assert_eq!(call.kept(), 4);
}

/// The bytes decide, not the stat: a rewrite in place that keeps the size, and whose
/// times are put back, still makes a change computed from the old text stale.
#[test]
fn a_rewrite_that_keeps_size_and_times_is_caught_by_the_bytes() {
    let f = fixture();
    f.put("same.txt", "one\n");
    let call = CallReads::default();
    f.service
        .read("a", &f.ws, "same.txt", u64::MAX, true, &call)
        .unwrap();
    let path = f.ws.join("same.txt");
    let before = std::fs::metadata(&path).unwrap();
    std::fs::write(&path, "two\n").unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
    // The owner's stamp would now differ by its change time alone; make the owner's
    // record the file as it is, as a read by another call would.
    f.read("a", "same.txt").unwrap();
    let (code, _) = fails(
        f.service
            .commit("a", &f.ws, vec![write("same.txt", "one!\n")], &call),
    );
    assert_eq!(code, ErrorCode::StaleFile);
    assert_eq!(f.text("same.txt"), "two\n");
}

#[test]
fn a_file_changed_since_the_read_is_stale() {
    let f = fixture();
    f.put("a.txt", "one");
    f.read("a", "a.txt").unwrap();
    // A rewrite of the same size by someone else.
    std::thread::sleep(std::time::Duration::from_millis(5));
    std::fs::write(f.ws.join("a.txt"), "two").unwrap();
    let (code, message) = fails(f.write("a", "a.txt", "three"));
    assert_eq!(code, ErrorCode::StaleFile);
    assert!(
        message.contains("a.txt changed since you last read it"),
        "{message}"
    );
    assert!(message.contains("read it again"), "{message}");
    assert_eq!(f.text("a.txt"), "two");
    // Read again, it goes.
    f.read("a", "a.txt").unwrap();
    f.write("a", "a.txt", "three").unwrap();

    // Only the modification time changed (touch).
    f.read("a", "a.txt").unwrap();
    let file = std::fs::File::options()
        .write(true)
        .open(f.ws.join("a.txt"))
        .unwrap();
    file.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(7))
        .unwrap();
    let (code, _) = fails(f.write("a", "a.txt", "four"));
    assert_eq!(code, ErrorCode::StaleFile);
    // A remove is checked the same way.
    let (code, _) = fails(f.commit("a", vec![Change::Remove("a.txt".into())]));
    assert_eq!(code, ErrorCode::StaleFile);
    assert_eq!(f.text("a.txt"), "three");
}

#[test]
fn a_file_never_read_and_another_owners_read_do_not_count() {
    let f = fixture();
    f.put("a.txt", "one");
    let (code, message) = fails(f.write("b", "a.txt", "two"));
    assert_eq!(code, ErrorCode::StaleFile);
    assert!(message.contains("you have not read it yet"), "{message}");
    f.read("a", "a.txt").unwrap();
    let (code, _) = fails(f.write("b", "a.txt", "two"));
    assert_eq!(code, ErrorCode::StaleFile);
    f.write("a", "a.txt", "two").unwrap();
    assert_eq!(f.text("a.txt"), "two");
    // a's commit made b's view no fresher.
    let (code, _) = fails(f.write("b", "a.txt", "three"));
    assert_eq!(code, ErrorCode::StaleFile);
}

#[test]
fn a_commit_is_all_or_none() {
    let f = fixture();
    f.put("keep.txt", "old");
    f.put("plain", "a file");
    f.read("a", "keep.txt").unwrap();
    // The second write's parent is a file: refused before anything is written.
    let (code, message) = fails(f.commit(
        "a",
        vec![
            write("keep.txt", "new"),
            write("made/one.txt", "x"),
            write("plain/child.txt", "x"),
        ],
    ));
    assert_eq!(code, ErrorCode::InvalidArguments, "{message}");
    assert!(message.contains("plain/child.txt"), "{message}");
    assert_eq!(f.text("keep.txt"), "old");
    assert_eq!(f.names(), ["keep.txt", "plain"]);

    // The disk fills up while the third is written: every temporary file and every
    // directory the commit made are taken back.
    f.read("a", "plain").unwrap();
    *f.service.stage_fault.lock().unwrap() = Some((2, dsh_launch::os::ENOSPC));
    let (code, message) = fails(f.commit(
        "a",
        vec![
            write("keep.txt", "new"),
            write("made/deep/one.txt", "x"),
            write("made/two.txt", "y"),
            Change::Remove("plain".into()),
        ],
    ));
    assert_eq!(code, ErrorCode::IoError);
    assert!(message.contains("the disk is full"), "{message}");
    assert!(message.contains("nothing was changed"), "{message}");
    assert_eq!(f.text("keep.txt"), "old");
    assert_eq!(f.names(), ["keep.txt", "plain"]);
    // A read-only filesystem and a permission denied say so.
    for (errno, says) in [
        (dsh_launch::os::EROFS, "read-only filesystem"),
        (dsh_launch::os::EACCES, "permission denied"),
    ] {
        *f.service.stage_fault.lock().unwrap() = Some((0, errno));
        let (code, message) = fails(f.write("a", "keep.txt", "new"));
        assert_eq!(code, ErrorCode::IoError);
        assert!(message.contains(says), "{message}");
    }
    *f.service.stage_fault.lock().unwrap() = None;
    assert_eq!(f.names(), ["keep.txt", "plain"]);

    // One path twice, and a path both a file and a directory on another's way.
    let (code, message) = fails(f.commit("a", vec![write("n.txt", "1"), write("./n.txt", "2")]));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("twice"), "{message}");
    let (code, message) = fails(f.commit("a", vec![write("d", "1"), write("d/e", "2")]));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("a file and a directory"), "{message}");
    assert_eq!(f.names(), ["keep.txt", "plain"]);
}

#[test]
fn permission_bits_are_kept_and_taken_from_mode_from() {
    let f = fixture();
    f.put("run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(f.ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(f.read("a", "run.sh").unwrap().mode, 0o755);
    f.write("a", "run.sh", "#!/bin/sh\necho hi\n").unwrap();
    assert_eq!(mode(&f.ws.join("run.sh")), 0o755);
    // A move: the new file takes the old one's bits, the old one goes.
    f.read("a", "run.sh").unwrap();
    let changed = f
        .commit(
            "a",
            vec![
                Change::Write {
                    path: "bin/run.sh".into(),
                    contents: b"#!/bin/sh\n".to_vec(),
                    mode_from: Some("run.sh".into()),
                },
                Change::Remove("run.sh".into()),
            ],
        )
        .unwrap();
    assert_eq!(
        changed[1],
        Changed {
            path: "run.sh".into(),
            created: false,
            bytes: 0
        }
    );
    assert_eq!(mode(&f.ws.join("bin/run.sh")), 0o755);
    assert!(!f.ws.join("run.sh").exists());
    let (code, message) = fails(f.commit(
        "a",
        vec![Change::Write {
            path: "x".into(),
            contents: vec![],
            mode_from: Some("missing".into()),
        }],
    ));
    assert_eq!(code, ErrorCode::NotFound);
    assert!(message.starts_with("mode-from:"), "{message}");
}

#[test]
fn paths_leading_out_of_the_workspace_are_refused() {
    let f = fixture();
    let outside = f.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), "s").unwrap();
    symlink(&outside, f.ws.join("abs")).unwrap();
    symlink("../outside", f.ws.join("rel")).unwrap();
    symlink("../outside/secret", f.ws.join("file-link")).unwrap();
    for path in [
        "../outside/secret".to_string(),
        outside.join("secret").display().to_string(),
        "abs/secret".into(),
        "rel/secret".into(),
        "file-link".into(),
    ] {
        let (code, message) = fails(f.read("a", &path));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path}: {message}");
        assert!(
            message.contains("outside the workspace"),
            "{path}: {message}"
        );
        let (code, message) = fails(f.write("a", &path, "x"));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path}: {message}");
    }
    for path in ["abs/new.txt", "rel/new/deep.txt"] {
        let (code, message) = fails(f.write("a", path, "x"));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path}: {message}");
        assert!(
            message.contains("outside the workspace"),
            "{path}: {message}"
        );
    }
    let names: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    // A link inside the workspace is followed by a read.
    f.put("real/a.txt", "inside");
    symlink("real", f.ws.join("alias")).unwrap();
    assert_eq!(f.read("a", "alias/a.txt").unwrap().contents, b"inside");
}

#[test]
fn a_symbolic_link_is_not_written_through_and_a_remove_takes_the_link() {
    let f = fixture();
    f.put("target.txt", "content");
    symlink("target.txt", f.ws.join("link.txt")).unwrap();
    // Reading through the link counts as reading the file itself.
    assert_eq!(f.read("a", "link.txt").unwrap().contents, b"content");
    let (code, message) = fails(f.write("a", "link.txt", "new"));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(
        message.contains("symbolic link (to target.txt)"),
        "{message}"
    );
    f.write("a", "target.txt", "new").unwrap();
    f.commit("a", vec![Change::Remove("link.txt".into())])
        .unwrap();
    assert!(std::fs::symlink_metadata(f.ws.join("link.txt")).is_err());
    assert_eq!(f.text("target.txt"), "new");
}

#[test]
fn fifos_devices_and_directories_are_refused_without_blocking() {
    let f = fixture();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.ws.join("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let (code, message) = fails(f.read("a", "fifo"));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("FIFO"), "{message}");
    let (code, message) = fails(f.write("a", "fifo", "x"));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("FIFO"), "{message}");
    let (code, message) = fails(f.commit("a", vec![Change::Remove("fifo".into())]));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(
        message.starts_with("fifo is a FIFO (named pipe): a commit removes"),
        "{message}"
    );
    assert!(f.ws.join("fifo").exists());
    std::fs::create_dir(f.ws.join("dir")).unwrap();
    let (_, message) = fails(f.read("a", "dir"));
    assert!(message.contains("a directory"), "{message}");
    let (_, message) = fails(f.write("a", "dir", "x"));
    assert!(message.contains("a directory"), "{message}");
    let (_, message) = fails(f.commit("a", vec![Change::Remove("dir".into())]));
    assert!(message.contains("a directory"), "{message}");
    let (code, _) = fails(f.read("a", "missing.txt"));
    assert_eq!(code, ErrorCode::NotFound);
    let (code, _) = fails(f.commit("a", vec![Change::Remove("missing.txt".into())]));
    assert_eq!(code, ErrorCode::NotFound);
    let (code, _) = fails(f.read("a", "."));
    assert_eq!(code, ErrorCode::InvalidArguments);
}

#[test]
fn nul_bytes_and_overlong_paths_are_refused() {
    let f = fixture();
    let (code, message) = fails(f.read("a", "a\0b"));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("NUL"), "{message}");
    let long = "d/".repeat(2100);
    let (code, message) = fails(f.read("a", &long));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("4096"), "{message}");
    let (code, _) = fails(f.write("a", &long, "x"));
    assert_eq!(code, ErrorCode::InvalidArguments);
    // 4096 bytes is taken, and fails as the filesystem says.
    let name = "n".repeat(300);
    let (code, message) = fails(f.write("a", &name, "x"));
    assert_eq!(code, ErrorCode::InvalidArguments, "{message}");
    assert!(message.contains("too long"), "{message}");
}

#[test]
fn a_file_larger_than_max_bytes_is_not_read() {
    let f = fixture_with(
        FilesConfig {
            max_read_bytes: 10,
            ..FilesConfig::default()
        },
        false,
    );
    f.put("big.txt", "0123456789abc");
    let (code, message) =
        fails(
            f.service
                .read("a", &f.ws, "big.txt", 5, true, &CallReads::default()),
        );
    assert_eq!(code, ErrorCode::LimitExceeded);
    assert!(message.contains("13 bytes"), "{message}");
    let (code, message) = fails(f.read("a", "big.txt"));
    assert_eq!(code, ErrorCode::LimitExceeded);
    assert!(message.contains("max_read_bytes 10"), "{message}");
    assert_eq!(f.service.tracked("a"), 0);
    f.put("small.txt", "0123456789");
    assert_eq!(f.read("a", "small.txt").unwrap().contents.len(), 10);
}

#[test]
fn reads_are_bounded_per_owner_and_go_with_it() {
    let f = fixture_with(
        FilesConfig {
            max_tracked_files_per_owner: 2,
            ..FilesConfig::default()
        },
        false,
    );
    for name in ["1", "2", "3"] {
        f.put(name, name);
        f.read("a", name).unwrap();
    }
    assert_eq!(f.service.tracked("a"), 2);
    // The oldest was forgotten.
    let (code, _) = fails(f.write("a", "1", "x"));
    assert_eq!(code, ErrorCode::StaleFile);
    f.write("a", "3", "x").unwrap();
    f.read("b", "2").unwrap();
    assert_eq!(f.service.forget_owner("a"), 2);
    assert_eq!(f.service.tracked("a"), 0);
    assert_eq!(f.service.tracked("b"), 1);
    let (code, _) = fails(f.write("a", "2", "x"));
    assert_eq!(code, ErrorCode::StaleFile);
    // A removed file's stamp is dropped.
    f.commit("b", vec![Change::Remove("2".into())]).unwrap();
    assert_eq!(f.service.tracked("b"), 0);
}

#[test]
fn the_state_directory_is_neither_read_nor_written() {
    let f = fixture_with(FilesConfig::default(), true);
    symlink(".state/cache/key", f.ws.join("key-link")).unwrap();
    symlink(".state", f.ws.join("state-link")).unwrap();
    for path in [".state/cache/key", "key-link", "state-link/cache/key"] {
        let (code, message) = fails(f.read("a", path));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path}");
        assert!(message.contains("one of dsh's own files"), "{message}");
    }
    for path in [
        ".state/cache/key",
        ".state/new.txt",
        ".state/newdir/x.txt",
        "state-link/cache/new",
    ] {
        let (code, message) = fails(f.write("a", path, "x"));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path}");
        assert!(message.contains("one of dsh's own files"), "{message}");
    }
    let (code, _) = fails(f.commit("a", vec![Change::Remove(".state/cache/key".into())]));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(!f.ws.join(".state/newdir").exists());
    assert!(!f.ws.join(".state/new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.ws.join(".state/cache/key")).unwrap(),
        "secret"
    );
}

#[test]
fn the_configuration_and_the_plugins_are_read_never_written() {
    let f = fixture();
    assert_eq!(f.read("a", "dsh.toml").unwrap().contents, b"[limits]\n");
    f.read("a", "plugins/x.wasm").unwrap();
    for change in [
        write("dsh.toml", "[plugins.bash]\ninterfaces = []\n"),
        Change::Remove("dsh.toml".into()),
        write("plugins/x.wasm", "evil"),
        write("plugins/new.wasm", "evil"),
        Change::Remove("plugins/x.wasm".into()),
    ] {
        let (code, message) = fails(f.commit("a", vec![change.clone()]));
        assert_eq!(code, ErrorCode::InvalidArguments, "{change:?}");
        assert!(message.contains("one of dsh's own files"), "{message}");
    }
    assert_eq!(f.text("dsh.toml"), "[limits]\n");
    assert!(!f.ws.join("plugins/new.wasm").exists());
    // The configuration named through a link in the workspace: the link stays too.
    let own = OwnFiles::new(
        &f.root.join("state"),
        Some(&f.ws.join("conf-link.toml")),
        None,
    );
    symlink("dsh.toml", f.ws.join("conf-link.toml")).unwrap();
    let own = OwnFiles {
        named: vec![f.ws.join("conf-link.toml")],
        ..own
    };
    let service = FileService::new(FilesConfig::default(), Some(f.ws.clone()), own);
    let (code, message) = fails(service.commit(
        "a",
        &f.ws,
        vec![Change::Remove("conf-link.toml".into())],
        &CallReads::default(),
    ));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("a link on the way"), "{message}");
}

#[test]
fn a_directory_swapped_for_a_link_out_never_lets_a_byte_out() {
    let f = fixture();
    let outside = f.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(f.ws.join("d")).unwrap();
    symlink(&outside, f.ws.join("abs-link")).unwrap();
    symlink("../outside", f.ws.join("rel-link")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws) = (stop.clone(), f.ws.clone());
        std::thread::spawn(move || {
            let dir = std::fs::File::open(&ws).unwrap();
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for link in ["abs-link", "rel-link"] {
                    // `d` is a directory or a link out, atomically, at every instant.
                    for _ in 0..2 {
                        rustix::fs::renameat_with(
                            &dir,
                            "d",
                            &dir,
                            link,
                            rustix::fs::RenameFlags::EXCHANGE,
                        )
                        .unwrap();
                        swaps += 1;
                        std::thread::yield_now();
                    }
                }
            }
            swaps
        })
    };
    let mut written = 0;
    for i in 0..1000 {
        let changes = vec![
            write(&format!("d/f{i}.txt"), "payload"),
            write(&format!("d/sub{i}/g.txt"), "payload"),
        ];
        match f.commit("a", changes) {
            Ok(_) => written += 1,
            Err(error) => assert!(
                matches!(
                    error.code,
                    ErrorCode::InvalidArguments | ErrorCode::NotFound | ErrorCode::StaleFile
                ),
                "{error}"
            ),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    let leaked: Vec<_> = std::fs::read_dir(&outside).unwrap().flatten().collect();
    assert!(
        leaked.is_empty(),
        "written outside the workspace: {leaked:?}"
    );
    assert!(swaps > 0);
    assert!(written > 0, "no commit got through in 1000");
}

#[test]
fn read_lines_sends_the_page_and_counts_the_whole_file() {
    let f = fixture();
    let text: String = (1..=5000).map(|i| format!("line {i}\r\n")).collect();
    f.put("big.txt", &format!("{text}last"));
    let call = CallReads::default();
    let lines = |first, count| {
        f.service
            .read_lines("a", &f.ws, "big.txt", u64::MAX, true, (first, count), &call)
            .unwrap()
    };
    let page = lines(4999, 10);
    assert_eq!(page.lines, b"line 4999\r\nline 5000\r\nlast");
    assert_eq!((page.total_lines, page.crlf_lines), (5001, 5000));
    assert!(!page.final_newline && page.invalid_utf8_at.is_none());
    assert_eq!(page.size, text.len() as u64 + 4);
    assert_eq!(page.head, text.as_bytes()[..HEAD_BYTES]);
    assert_eq!(lines(1, 2).lines, b"line 1\r\nline 2\r\n");
    assert_eq!(lines(2, 1).lines, b"line 2\r\n");
    assert!(lines(5002, 10).lines.is_empty());
    assert!(lines(3, 0).lines.is_empty());
    // The read counts as the owner's, and the call keeps the whole file it saw: the
    // change computed from it commits, and once the file changes behind the call it is
    // stale.
    f.service
        .commit("a", &f.ws, vec![write("big.txt", "one\n")], &call)
        .unwrap();
    let call = CallReads::default();
    f.service
        .read_lines("a", &f.ws, "big.txt", u64::MAX, false, (1, 1), &call)
        .unwrap();
    f.put("big.txt", "two\n");
    let (code, _) = fails(
        f.service
            .commit("a", &f.ws, vec![write("big.txt", "three\n")], &call),
    );
    assert_eq!(code, ErrorCode::StaleFile);

    std::fs::write(f.ws.join("latin1.txt"), b"caf\xe9\nok\n").unwrap();
    let page = f
        .service
        .read_lines("a", &f.ws, "latin1.txt", u64::MAX, true, (1, 10), &call)
        .unwrap();
    assert_eq!((page.invalid_utf8_at, page.total_lines), (Some(3), 2));
    std::fs::write(f.ws.join("empty.txt"), b"").unwrap();
    let page = f
        .service
        .read_lines("a", &f.ws, "empty.txt", u64::MAX, true, (1, 10), &call)
        .unwrap();
    assert_eq!(
        (page.size, page.total_lines, page.final_newline),
        (0, 0, false)
    );
    assert!(page.lines.is_empty());
    // The same refusals as a read.
    let (code, _) = fails(
        f.service
            .read_lines("a", &f.ws, "big.txt", 2, true, (1, 1), &call),
    );
    assert_eq!(code, ErrorCode::LimitExceeded);
}
