//! The files service with extra roots, against real directories: a read-only root read
//! and never written, a commit across roots all or none, `..` and links out of a root,
//! a sibling whose name starts the same (`docs2` is not in `docs`), a read-only root
//! inside the workspace, and dsh's own files inside a writable root.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    /// `root/srv/docs`, read-only.
    docs: PathBuf,
    /// `root/srv/scratch`, writable.
    scratch: PathBuf,
    service: FileService,
}

/// A workspace `root/ws`, the extra roots `root/srv/docs` (read-only) and
/// `root/srv/scratch` (writable), the state directory `root/state`, and beside them
/// `root/srv/docs2` and `root/outside`, each holding a file `secret`.
fn fixture() -> Fixture {
    fixture_with(
        |_| Vec::new(),
        |root| OwnFiles::new(&root.join("state"), None, None),
    )
}

fn fixture_with(
    more_roots: impl FnOnce(&Path) -> Vec<ExtraRoot>,
    own: impl FnOnce(&Path) -> OwnFiles,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (ws, docs, scratch) = (
        root.join("ws"),
        root.join("srv/docs"),
        root.join("srv/scratch"),
    );
    for sub in [&ws, &docs, &scratch, &root.join("state")] {
        std::fs::create_dir_all(sub).unwrap();
    }
    for outside in ["srv/docs2", "outside"] {
        std::fs::create_dir_all(root.join(outside)).unwrap();
        std::fs::write(root.join(outside).join("secret"), "secret").unwrap();
    }
    let mut extra_roots = vec![
        ExtraRoot {
            path: docs.clone(),
            write: false,
        },
        ExtraRoot {
            path: scratch.clone(),
            write: true,
        },
    ];
    extra_roots.extend(more_roots(&root));
    let config = FilesConfig {
        extra_roots,
        ..FilesConfig::default()
    };
    let service = FileService::new(config, Some(ws.clone()), own(&root));
    Fixture {
        _dir: dir,
        root,
        ws,
        docs,
        scratch,
        service,
    }
}

impl Fixture {
    fn read(&self, path: &Path) -> Result<FileRead, ToolError> {
        self.service.read(
            "a",
            &self.ws,
            &path.display().to_string(),
            u64::MAX,
            true,
            &CallReads::default(),
        )
    }

    fn commit(&self, changes: Vec<Change>) -> Result<Vec<Changed>, ToolError> {
        self.service
            .commit("a", &self.ws, changes, &CallReads::default())
    }

    /// Every name under `root/` (recursively), sorted.
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
        walk(&self.root, &self.root, &mut names);
        names.sort();
        names
    }
}

fn write(path: &Path, contents: &str) -> Change {
    Change::Write {
        path: path.display().to_string(),
        contents: contents.as_bytes().to_vec(),
        mode_from: None,
    }
}

fn remove(path: &Path) -> Change {
    Change::Remove(path.display().to_string())
}

fn fails(result: Result<impl std::fmt::Debug, ToolError>) -> (ErrorCode, String) {
    let error = result.unwrap_err();
    (error.code, error.message)
}

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_read_only_root_is_read_and_never_written() {
    let f = fixture();
    let doc = f.docs.join("guide/intro.md");
    std::fs::create_dir_all(doc.parent().unwrap()).unwrap();
    std::fs::write(&doc, "# Intro\n").unwrap();
    let read = f.read(&doc).unwrap();
    assert_eq!(read.contents, b"# Intro\n");
    // Outside the workspace, a path is shown absolute.
    assert_eq!(read.path, doc.display().to_string());
    let before = f.names();
    for change in [
        write(&doc, "changed\n"),
        remove(&doc),
        write(&f.docs.join("new.md"), "x"),
        write(&f.docs.join("new/deep/dir.md"), "x"),
    ] {
        let (code, message) = fails(f.commit(vec![change.clone()]));
        assert_eq!(code, ErrorCode::Denied, "{change:?}: {message}");
        assert!(
            message.contains(&format!(
                "the extra root {}, which is read-only",
                f.docs.display()
            )) && message.contains("`write = true`")
                && message.contains("nothing was changed"),
            "{message}"
        );
    }
    assert_eq!(text(&doc), "# Intro\n");
    assert_eq!(f.names(), before, "a refused commit left something behind");
    // The root itself is a directory, not a file.
    let (code, message) = fails(f.read(&f.docs));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("is the extra root"), "{message}");
}

#[test]
fn a_commit_across_roots_is_all_or_none_and_a_read_only_one_stops_it_before_anything() {
    let f = fixture();
    let (mine, note, doc) = (
        f.ws.join("main.rs"),
        f.scratch.join("note.txt"),
        f.docs.join("ref.md"),
    );
    for (path, contents) in [(&mine, "fn main() {}\n"), (&note, "n0\n"), (&doc, "d0\n")] {
        std::fs::write(path, contents).unwrap();
        f.read(path).unwrap();
    }
    let before = f.names();
    // A writable file, a new one, and one in the read-only root: nothing changes.
    let (code, message) = fails(f.commit(vec![
        write(&mine, "changed\n"),
        write(&note, "n1\n"),
        write(&f.scratch.join("sub/new.txt"), "new\n"),
        write(&doc, "d1\n"),
    ]));
    assert_eq!(code, ErrorCode::Denied, "{message}");
    assert_eq!(text(&mine), "fn main() {}\n");
    assert_eq!(text(&note), "n0\n");
    assert_eq!(f.names(), before);
    // Without it, every root's change lands, shown relative in the workspace and
    // absolute elsewhere.
    let changed = f
        .commit(vec![
            write(&mine, "changed\n"),
            write(&note, "n1\n"),
            write(&f.scratch.join("sub/new.txt"), "new\n"),
        ])
        .unwrap();
    let paths: Vec<&str> = changed.iter().map(|c| c.path.as_str()).collect();
    let new = f.scratch.join("sub/new.txt").display().to_string();
    assert_eq!(
        paths,
        ["main.rs", note.display().to_string().as_str(), new.as_str()]
    );
    assert_eq!(text(&note), "n1\n");
    // Stamps hold in a root as in the workspace: a change behind the read is stale.
    std::fs::write(&note, "behind\n").unwrap();
    let (code, _) = fails(f.commit(vec![write(&note, "n2\n")]));
    assert_eq!(code, ErrorCode::StaleFile);
    // A failure while writing takes back every root's temporaries and directories.
    *f.service.stage_fault.lock().unwrap() = Some((1, dsh_launch::os::ENOSPC));
    f.read(&note).unwrap();
    let before = f.names();
    let (code, _) = fails(f.commit(vec![
        write(&mine, "again\n"),
        write(&f.scratch.join("made/x.txt"), "x"),
        write(&note, "n3\n"),
    ]));
    assert_eq!(code, ErrorCode::IoError);
    assert_eq!(f.names(), before);
    assert_eq!(text(&mine), "changed\n");
}

#[test]
fn paths_leading_out_of_a_root_are_refused() {
    let f = fixture();
    let outside = f.root.join("outside");
    symlink(&outside, f.scratch.join("abs")).unwrap();
    symlink("../../outside", f.scratch.join("rel")).unwrap();
    symlink("../../outside/secret", f.scratch.join("file-link")).unwrap();
    symlink("../docs", f.scratch.join("to-docs")).unwrap();
    let reads = [
        // `..` out of the root, by the words.
        f.scratch.join("../../outside/secret"),
        f.docs.join("../docs2/secret"),
        // A sibling whose name starts the same is no root.
        f.root.join("srv/docs2/secret"),
        f.root.join("srv/scratch2/secret"),
        // Links in a root leading out (one to another root counts too: beneath this
        // root, it leads out).
        f.scratch.join("abs/secret"),
        f.scratch.join("rel/secret"),
        f.scratch.join("file-link"),
    ];
    for path in &reads {
        let (code, message) = fails(f.read(path));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path:?}: {message}");
        assert!(message.contains("outside"), "{path:?}: {message}");
        let (code, _) = fails(f.commit(vec![write(path, "pwned")]));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path:?}");
    }
    let (_, message) = fails(f.read(&f.scratch.join("abs/secret")));
    assert!(
        message.contains(&format!(
            "leads outside the extra root {}",
            f.scratch.display()
        )),
        "{message}"
    );
    let (_, message) = fails(f.read(&f.root.join("srv/docs2/secret")));
    assert!(
        message.contains("outside the workspace") && message.contains("the extra roots ("),
        "{message}"
    );
    for path in [
        f.scratch.join("abs/new.txt"),
        f.scratch.join("to-docs/new.md"),
    ] {
        let (code, message) = fails(f.commit(vec![write(&path, "x")]));
        assert_eq!(code, ErrorCode::InvalidArguments, "{path:?}: {message}");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    assert_eq!(text(&f.root.join("srv/docs2/secret")), "secret");
    assert!(!f.docs.join("new.md").exists());
    // A link that stays in its root is followed.
    std::fs::create_dir(f.scratch.join("real")).unwrap();
    std::fs::write(f.scratch.join("real/a.txt"), "inside").unwrap();
    symlink("real", f.scratch.join("alias")).unwrap();
    assert_eq!(
        f.read(&f.scratch.join("alias/a.txt")).unwrap().contents,
        b"inside"
    );
}

#[test]
fn a_read_only_root_inside_the_workspace_keeps_that_part_read_only() {
    let f = fixture_with(
        |root| {
            vec![ExtraRoot {
                path: root.join("ws/vendor"),
                write: false,
            }]
        },
        |root| OwnFiles::new(&root.join("state"), None, None),
    );
    let vendored = f.ws.join("vendor/lib.rs");
    std::fs::create_dir_all(vendored.parent().unwrap()).unwrap();
    std::fs::write(&vendored, "pub fn f() {}\n").unwrap();
    symlink("vendor", f.ws.join("v")).unwrap();
    // Read as a workspace path (shown relative), and through a link into it.
    assert_eq!(f.read(&vendored).unwrap().path, "vendor/lib.rs");
    f.read(Path::new("v/lib.rs")).unwrap();
    for path in [
        "vendor/lib.rs",
        "v/lib.rs",
        "vendor/new.rs",
        "v/new/deep.rs",
    ] {
        let (code, message) = fails(f.commit(vec![write(Path::new(path), "x")]));
        assert_eq!(code, ErrorCode::Denied, "{path}: {message}");
        assert!(
            message.contains(&format!(
                "{}, which is read-only",
                f.ws.join("vendor").display()
            )),
            "{message}"
        );
    }
    assert_eq!(text(&vendored), "pub fn f() {}\n");
    assert!(!f.ws.join("vendor/new.rs").exists() && !f.ws.join("vendor/new").exists());
    // The rest of the workspace is writable.
    f.commit(vec![write(Path::new("src/a.rs"), "x")]).unwrap();
    assert_eq!(text(&f.ws.join("src/a.rs")), "x");
}

#[test]
fn one_file_named_through_two_roots_is_named_twice() {
    let f = fixture_with(
        |root| {
            vec![ExtraRoot {
                path: root.join("scratch-alias"),
                write: true,
            }]
        },
        |root| OwnFiles::new(&root.join("state"), None, None),
    );
    symlink(&f.scratch, f.root.join("scratch-alias")).unwrap();
    std::fs::write(f.scratch.join("n.txt"), "n").unwrap();
    let read = f.read(&f.root.join("scratch-alias/n.txt")).unwrap();
    assert_eq!(
        read.path,
        f.root.join("scratch-alias/n.txt").display().to_string()
    );
    let (code, message) = fails(f.commit(vec![
        write(&f.scratch.join("n.txt"), "1"),
        write(&f.root.join("scratch-alias/n.txt"), "2"),
    ]));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("twice"), "{message}");
    assert_eq!(text(&f.scratch.join("n.txt")), "n");
    // The read through one name counts for the other.
    f.commit(vec![write(&f.scratch.join("n.txt"), "1")])
        .unwrap();
    assert_eq!(text(&f.scratch.join("n.txt")), "1");
}

#[test]
fn dsh_s_own_files_in_a_writable_root_are_never_written_and_the_state_dir_never_read() {
    let f = fixture_with(
        |_| Vec::new(),
        |root| {
            let scratch = root.join("srv/scratch");
            std::fs::create_dir_all(scratch.join("plugins")).unwrap();
            std::fs::create_dir_all(scratch.join(".state/cache")).unwrap();
            std::fs::write(scratch.join("dsh.toml"), "[limits]\n").unwrap();
            std::fs::write(scratch.join("plugins/x.wasm"), "wasm").unwrap();
            std::fs::write(scratch.join(".state/cache/key"), "secret").unwrap();
            OwnFiles::new(
                &scratch.join(".state"),
                Some(&scratch.join("dsh.toml")),
                Some(&scratch.join("plugins")),
            )
        },
    );
    let (config, plugin) = (f.scratch.join("dsh.toml"), f.scratch.join("plugins/x.wasm"));
    f.read(&config).unwrap();
    f.read(&plugin).unwrap();
    for change in [
        write(&config, "[plugins.bash]\ninterfaces = []\n"),
        remove(&config),
        write(&plugin, "evil"),
        write(&f.scratch.join("plugins/new.wasm"), "evil"),
        write(&f.scratch.join(".state/planted"), "x"),
    ] {
        let (code, message) = fails(f.commit(vec![change.clone()]));
        assert_eq!(code, ErrorCode::InvalidArguments, "{change:?}");
        assert!(message.contains("one of dsh's own files"), "{message}");
    }
    let (code, message) = fails(f.read(&f.scratch.join(".state/cache/key")));
    assert_eq!(code, ErrorCode::InvalidArguments);
    assert!(message.contains("one of dsh's own files"), "{message}");
    assert_eq!(text(&config), "[limits]\n");
    assert_eq!(text(&plugin), "wasm");
    assert!(!f.scratch.join("plugins/new.wasm").exists());
    assert!(!f.scratch.join(".state/planted").exists());
}

#[test]
fn a_plugin_granted_files_is_given_the_workspace_and_every_extra_root_to_map() {
    use crate::services::{Capability, MappedRoot};
    let f = fixture();
    let service = std::sync::Arc::new(f.service);
    // A writable root too: the engine maps every one read-only (changes go through the
    // host's calls).
    assert_eq!(
        service.mapped_roots(),
        [
            MappedRoot::Workspace(f.ws.clone()),
            MappedRoot::ExtraRoot {
                configured: f.docs.clone(),
                shown: f.docs.clone(),
            },
            MappedRoot::ExtraRoot {
                configured: f.scratch.clone(),
                shown: f.scratch.clone(),
            },
        ]
    );
}
