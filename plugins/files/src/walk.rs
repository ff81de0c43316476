//! The directory walk `glob` and `grep` share, over [`fsys`](crate::fsys): depth first in
//! name order (so results are stable), never following a symlink, leaving out `.git/`
//! unless asked, and honouring `.gitignore`, `.ignore` and `.git/info/exclude` as ripgrep
//! does unless asked not to: the rules of the directories above the search root (up to
//! the workspace root, or up to the extra root it lies in) apply too, a `.gitignore`
//! counts without a `.git` directory (the workspace may be part of a repository), the
//! deepest rule that matches decides, and an ignored directory is not entered. A glob override (`grep`'s `glob`) and a file-type
//! filter (`grep`'s `type`) narrow the files further, as ripgrep's `--glob` and `--type`.
//! Ignore files are read only in directories whose listing shows them. An ignore file
//! that is a FIFO, a socket or a device ends the walk with a [`Special`] error naming
//! it: it is never opened, and the walk would not know what it leaves out.

use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::Override;
use ignore::types::Types;
use ignore::Match;

#[cfg(doc)]
use crate::fsys::Special;
use crate::fsys::{Dir, Entry, Kind};

/// Which entries a walk leaves out.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Walk ignored paths too (`.gitignore` and the like do not apply).
    pub include_ignored: bool,
    /// Walk into `.git` directories.
    pub include_git_dir: bool,
    /// Walk only this directory (relative to the root) and the directories leading to
    /// it, so the ignore files on the way still apply.
    pub scope: Option<PathBuf>,
    /// Globs that select (or, with `!`, leave out) files, relative to the root.
    pub overrides: Option<Override>,
    /// File types that select files.
    pub types: Option<Types>,
}

/// A file (or symlink, or other non-directory entry) the walk reached.
pub struct Visit<'a> {
    /// The directory it is in.
    pub dir: &'a Dir,
    /// Its full path.
    pub path: &'a Path,
    pub name: &'a str,
    pub kind: Kind,
}

/// Go on walking, or stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// The ignore rules of one directory, in the order they take precedence.
struct Rules(Vec<Gitignore>);

impl Rules {
    /// The rules of the directory `dir` at `path` (`entries`: its listing, when known;
    /// an ignore file the listing shows as a FIFO, a socket or a device counts too, and
    /// is refused).
    fn load(dir: &Dir, path: &Path, entries: Option<&[Entry]>) -> std::io::Result<Rules> {
        let has = |name: &str, kind: Kind| {
            entries.is_none_or(|e| {
                e.iter()
                    .any(|e| e.name == name && (e.kind == kind || e.kind == Kind::Other))
            })
        };
        let mut rules = Vec::new();
        for (name, kind) in [
            (".ignore", Kind::File),
            (".gitignore", Kind::File),
            (".git", Kind::Dir),
        ] {
            if !has(name, kind) {
                continue;
            }
            let file = if kind == Kind::Dir {
                ".git/info/exclude"
            } else {
                name
            };
            if let Some(bytes) = dir.read_small(file, &path.join(file))? {
                let mut builder = GitignoreBuilder::new(path);
                let from = path.join(file);
                for line in String::from_utf8_lossy(&bytes).lines() {
                    let _ = builder.add_line(Some(from.clone()), line);
                }
                if let Ok(gitignore) = builder.build() {
                    if !gitignore.is_empty() {
                        rules.push(gitignore);
                    }
                }
            }
        }
        Ok(Rules(rules))
    }
}

/// One directory being walked.
struct Frame {
    dir: Dir,
    path: PathBuf,
    entries: std::vec::IntoIter<Entry>,
}

/// What a walk could not read.
#[derive(Debug, Default)]
pub struct Stats {
    /// Directories that could not be listed or opened.
    pub unreadable: usize,
}

/// Walks the directory `root` (whose ancestors' ignore rules count up to and including
/// `top`, the workspace, or when `root` is outside it, the preopen holding it: an extra
/// root), calling `visit` for every non-directory entry that `filter` keeps, until it
/// says stop. An ignore file that is a FIFO, a socket or a device (on the way or in the
/// tree) is a [`Special`] error.
pub fn walk(
    root: &Path,
    top: &Path,
    filter: &Filter,
    mut visit: impl FnMut(&Visit) -> Flow,
) -> std::io::Result<Stats> {
    let top = match root.starts_with(top) {
        true => top.to_path_buf(),
        false => crate::fsys::top_of(root).unwrap_or_else(|| root.to_path_buf()),
    };
    let top = top.as_path();
    let honour = !filter.include_ignored;
    let mut stats = Stats::default();
    // The rules above the root, outermost first.
    let mut rules: Vec<Rules> = Vec::new();
    if honour {
        if let Ok(below) = root.strip_prefix(top) {
            let mut ancestors = vec![top.to_path_buf()];
            let mut at = top.to_path_buf();
            for component in below.parent().into_iter().flat_map(|p| p.components()) {
                at.push(component);
                ancestors.push(at.clone());
            }
            if below.as_os_str().is_empty() {
                ancestors.clear();
            }
            for ancestor in ancestors {
                if let Ok(dir) = Dir::open(&ancestor) {
                    rules.push(Rules::load(&dir, &ancestor, None)?);
                }
            }
        }
    }
    let above = rules.len();
    let root_dir = Dir::open(root)?;
    let entries = root_dir.sorted_entries()?;
    if honour {
        rules.push(Rules::load(&root_dir, root, Some(&entries))?);
    }
    let mut stack = vec![Frame {
        dir: root_dir,
        path: root.to_path_buf(),
        entries: entries.into_iter(),
    }];
    let scope = filter.scope.as_ref().filter(|s| !s.as_os_str().is_empty());
    while let Some(frame) = stack.last_mut() {
        let Some(entry) = frame.entries.next() else {
            stack.pop();
            if honour {
                rules.truncate(above + stack.len());
            }
            continue;
        };
        let path = frame.path.join(&entry.name);
        let is_dir = entry.kind == Kind::Dir;
        if is_dir && entry.name == ".git" && !filter.include_git_dir {
            continue;
        }
        if let Some(scope) = scope {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            if !(relative.starts_with(scope) || (is_dir && scope.starts_with(relative))) {
                continue;
            }
        }
        if !keep(&path, is_dir, filter, honour.then_some(rules.as_slice())) {
            continue;
        }
        if is_dir {
            let opened = frame.dir.open_dir(&entry.name).and_then(|dir| {
                let entries = dir.sorted_entries()?;
                Ok((dir, entries))
            });
            match opened {
                Ok((dir, entries)) => {
                    if honour {
                        rules.push(Rules::load(&dir, &path, Some(&entries))?);
                    }
                    stack.push(Frame {
                        dir,
                        path,
                        entries: entries.into_iter(),
                    });
                }
                Err(_) => stats.unreadable += 1,
            }
            continue;
        }
        let visit_entry = Visit {
            dir: &frame.dir,
            path: &path,
            name: &entry.name,
            kind: entry.kind,
        };
        if visit(&visit_entry) == Flow::Stop {
            break;
        }
    }
    Ok(stats)
}

/// True when the entry at `path` passes the overrides, the ignore `rules` (none when
/// they do not apply) and the types.
fn keep(path: &Path, is_dir: bool, filter: &Filter, rules: Option<&[Rules]>) -> bool {
    if let Some(overrides) = &filter.overrides {
        match overrides.matched(path, is_dir) {
            Match::Ignore(_) => return false,
            Match::Whitelist(_) => return true,
            Match::None => {}
        }
    }
    if let Some(rules) = rules {
        'levels: for level in rules.iter().rev() {
            for gitignore in &level.0 {
                match gitignore.matched(path, is_dir) {
                    Match::Ignore(_) => return false,
                    Match::Whitelist(_) => break 'levels,
                    Match::None => {}
                }
            }
        }
    }
    if let Some(types) = &filter.types {
        if let Match::Ignore(_) = types.matched(path, is_dir) {
            return false;
        }
    }
    true
}

/// `path` relative to `root` with `/` separators (the path itself when not under it).
pub fn relative(root: &Path, path: &Path) -> String {
    let rest = path.strip_prefix(root).unwrap_or(path);
    let text = rest.to_string_lossy();
    if std::path::MAIN_SEPARATOR == '/' {
        text.into_owned()
    } else {
        text.replace(std::path::MAIN_SEPARATOR, "/")
    }
}

#[cfg(test)]
pub mod testdir {
    //! Scratch directories for the walking tests, removed when dropped.

    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub struct TestDir(pub PathBuf);

    impl TestDir {
        pub fn new(name: &str) -> TestDir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let dir = std::env::temp_dir().join(format!(
                "dsh-files-{name}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TestDir(dir)
        }

        /// Writes `contents` at `relative`, making its directories.
        pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, contents).unwrap();
            path
        }

        /// Sets `relative`'s modification time to `seconds` after the epoch.
        pub fn touch(&self, relative: &str, seconds: u64) {
            let file = std::fs::File::options()
                .write(true)
                .open(self.0.join(relative))
                .unwrap();
            file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds))
                .unwrap();
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::testdir::TestDir;
    use super::*;

    fn walked_from(root: &Path, top: &Path, filter: &Filter) -> Vec<String> {
        let mut seen = Vec::new();
        walk(root, top, filter, |visit| {
            seen.push(relative(top, visit.path));
            Flow::Continue
        })
        .unwrap();
        seen
    }

    fn walked(root: &Path, filter: &Filter) -> Vec<String> {
        walked_from(root, root, filter)
    }

    #[test]
    fn gitignore_applies_without_a_git_directory_and_dot_git_is_left_out() {
        let dir = TestDir::new("walk");
        dir.write(".gitignore", "target/\n*.log\n");
        dir.write("src/main.rs", "fn main() {}\n");
        dir.write("target/debug/out", "x");
        dir.write("run.log", "x");
        dir.write(".github/ci.yml", "x");
        dir.write(".git/config", "x");
        assert_eq!(
            walked(dir.path(), &Filter::default()),
            vec![".github/ci.yml", ".gitignore", "src/main.rs"]
        );
        let all = walked(
            dir.path(),
            &Filter {
                include_ignored: true,
                ..Filter::default()
            },
        );
        assert_eq!(
            all,
            vec![
                ".github/ci.yml",
                ".gitignore",
                "run.log",
                "src/main.rs",
                "target/debug/out"
            ]
        );
    }

    #[test]
    fn nested_rules_whitelists_dot_ignore_and_git_exclude() {
        let dir = TestDir::new("walk-rules");
        dir.write(".gitignore", "*.gen\n");
        dir.write(".git/info/exclude", "secret.txt\n");
        dir.write("a/.gitignore", "!keep.gen\n");
        dir.write("a/keep.gen", "x");
        dir.write("a/drop.gen", "x");
        dir.write("b/.ignore", "local/\n");
        dir.write("b/local/x.rs", "x");
        dir.write("b/y.rs", "x");
        dir.write("secret.txt", "x");
        assert_eq!(
            walked(dir.path(), &Filter::default()),
            vec![
                ".gitignore",
                "a/.gitignore",
                "a/keep.gen",
                "b/.ignore",
                "b/y.rs"
            ]
        );
    }

    #[test]
    fn the_rules_above_a_subdirectory_root_apply() {
        let dir = TestDir::new("walk-parents");
        dir.write(".gitignore", "*.tmp\nbuild/\n");
        dir.write("sub/a.rs", "x");
        dir.write("sub/b.tmp", "x");
        dir.write("sub/build/c.rs", "x");
        let sub = dir.path().join("sub");
        assert_eq!(
            walked_from(&sub, dir.path(), &Filter::default()),
            vec!["sub/a.rs"]
        );
    }

    #[test]
    fn scope_overrides_and_types_narrow_the_walk() {
        let dir = TestDir::new("walk-narrow");
        dir.write("src/a.rs", "x");
        dir.write("src/b.py", "x");
        dir.write("docs/c.rs", "x");
        let scoped = Filter {
            scope: Some(PathBuf::from("src")),
            ..Filter::default()
        };
        assert_eq!(walked(dir.path(), &scoped), vec!["src/a.rs", "src/b.py"]);
        let mut types = ignore::types::TypesBuilder::new();
        types.add_defaults().select("rust");
        let typed = Filter {
            types: Some(types.build().unwrap()),
            ..Filter::default()
        };
        assert_eq!(walked(dir.path(), &typed), vec!["docs/c.rs", "src/a.rs"]);
        let mut overrides = ignore::overrides::OverrideBuilder::new(dir.path());
        overrides.add("!docs/**").unwrap();
        let globbed = Filter {
            overrides: Some(overrides.build().unwrap()),
            ..Filter::default()
        };
        assert_eq!(walked(dir.path(), &globbed), vec!["src/a.rs", "src/b.py"]);
    }

    #[test]
    fn stopping_ends_the_walk() {
        let dir = TestDir::new("walk-stop");
        for i in 0..10 {
            dir.write(&format!("f{i}"), "x");
        }
        let mut seen = 0;
        walk(dir.path(), dir.path(), &Filter::default(), |_| {
            seen += 1;
            if seen == 3 {
                Flow::Stop
            } else {
                Flow::Continue
            }
        })
        .unwrap();
        assert_eq!(seen, 3);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_reported_and_never_followed() {
        let dir = TestDir::new("walk-links");
        dir.write("real/a.txt", "x");
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        let mut seen = Vec::new();
        walk(dir.path(), dir.path(), &Filter::default(), |visit| {
            seen.push((relative(dir.path(), visit.path), visit.kind));
            Flow::Continue
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                ("link".to_string(), Kind::Symlink),
                ("real/a.txt".to_string(), Kind::File)
            ]
        );
    }

    /// Makes a FIFO at `relative` in `dir` (its directories made).
    pub fn mkfifo(dir: &TestDir, relative: &str) {
        let path = dir.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
    }

    #[cfg(unix)]
    #[test]
    fn an_ignore_file_that_is_a_fifo_ends_the_walk_naming_it() {
        for (fifo, root) in [
            (".gitignore", ""),
            (".ignore", ""),
            (".git/info/exclude", ""),
            ("sub/.gitignore", ""),
            // Above the directory walked: the rules on the way are read too.
            (".gitignore", "sub"),
            (".git/info/exclude", "sub"),
        ] {
            let dir = TestDir::new("walk-fifo");
            dir.write("sub/a.txt", "x");
            dir.write(".git/config", "x");
            mkfifo(&dir, fifo);
            let root_path = dir.path().join(root);
            let error = walk(&root_path, dir.path(), &Filter::default(), |_| {
                Flow::Continue
            })
            .err()
            .unwrap_or_else(|| panic!("{fifo} walked from {root:?}"));
            let special = crate::fsys::Special::of(&error).expect("a special file");
            assert_eq!(special.path, dir.path().join(fifo));
            assert_eq!(special.kind, "a FIFO (named pipe)");
            // Not read when ignored files are asked for.
            let all = Filter {
                include_ignored: true,
                ..Filter::default()
            };
            assert!(walk(&root_path, dir.path(), &all, |_| Flow::Continue).is_ok());
        }
    }
}
