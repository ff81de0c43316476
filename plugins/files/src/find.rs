//! The `glob` tool's search: a glob pattern (`**/*.rs`, `src/*.{ts,tsx}`; `*` and `?`
//! never cross a `/`, `**` does) matched against every file's path relative to the
//! search root, the walk going only into the pattern's literal directory prefix, and the
//! matches kept newest first in bounded memory.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use globset::{GlobBuilder, GlobMatcher};

use crate::fsys::Kind;
use crate::recent::Newest;
use crate::walk::{self, Filter, Flow};

/// A compiled pattern and the directory (relative to the root) its matches lie under.
#[derive(Debug)]
pub struct Pattern {
    matcher: GlobMatcher,
    /// The components before the first one with a wildcard.
    prefix: PathBuf,
    /// The pattern names a `.git` directory itself.
    wants_git_dir: bool,
}

/// Characters that make a path component a pattern.
fn is_wild(component: &str) -> bool {
    component.contains(['*', '?', '[', '{', '\\'])
}

impl Pattern {
    /// Compiles `pattern`, relative to `root` (a pattern starting with `root/` has it
    /// dropped; another absolute one is an error).
    pub fn new(pattern: &str, root: &Path) -> Result<Pattern, String> {
        let mut text = pattern.trim();
        let root_text = root.to_string_lossy();
        let root_prefix = format!("{}/", root_text.trim_end_matches('/'));
        if let Some(rest) = text.strip_prefix(&root_prefix) {
            text = rest;
        } else if text.starts_with('/') {
            return Err(format!(
                "the pattern `{pattern}` is absolute: give it relative to `path` ({root_text}), e.g. `**/*.rs`"
            ));
        }
        while let Some(rest) = text.strip_prefix("./") {
            text = rest;
        }
        if text.is_empty() {
            return Err("the pattern is empty: e.g. `**/*.rs` for every Rust file".into());
        }
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("`{pattern}` is not a valid glob: {}", e.kind()))?;
        let components: Vec<&str> = text.split('/').collect();
        let literal = components
            .iter()
            .take(components.len() - 1)
            .take_while(|c| !is_wild(c) && !c.is_empty() && **c != "..")
            .fold(PathBuf::new(), |path, c| path.join(c));
        Ok(Pattern {
            matcher: glob.compile_matcher(),
            prefix: literal,
            wants_git_dir: components.contains(&".git"),
        })
    }

    /// True when `relative` (`/`-separated, relative to the root) matches.
    pub fn is_match(&self, relative: &str) -> bool {
        self.matcher.is_match(relative)
    }
}

/// What a glob search found.
#[derive(Debug)]
pub struct Found {
    /// Matching paths relative to the root, newest first.
    pub paths: Vec<String>,
    /// How many files matched in all.
    pub total: usize,
    /// Entries the walk could not read.
    pub unreadable: usize,
}

/// The files under `root` matching `pattern`, at most `limit` of them, newest first.
/// Only regular files and symlinks (never followed) are listed. The ignore rules of the
/// directories from `top` (the workspace) down to `root` apply too.
pub fn find(
    root: &Path,
    top: &Path,
    pattern: &Pattern,
    include_ignored: bool,
    limit: usize,
) -> std::io::Result<Found> {
    let mut newest = Newest::new(limit);
    if !root.join(&pattern.prefix).is_dir() {
        return Ok(Found {
            paths: Vec::new(),
            total: 0,
            unreadable: 0,
        });
    }
    // The walk goes only towards and into the pattern's directory.
    let filter = Filter {
        include_ignored,
        include_git_dir: pattern.wants_git_dir,
        scope: Some(pattern.prefix.clone()),
        ..Filter::default()
    };
    let stats = walk::walk(root, top, &filter, |visit| {
        if matches!(visit.kind, Kind::File | Kind::Symlink) {
            let relative = walk::relative(root, visit.path);
            if pattern.is_match(&relative) {
                let modified = visit
                    .dir
                    .modified(visit.name)
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                newest.offer(modified, relative);
            }
        }
        Flow::Continue
    })?;
    let total = newest.seen();
    Ok(Found {
        paths: newest.into_sorted(),
        total,
        unreadable: stats.unreadable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::testdir::TestDir;

    fn pattern(text: &str) -> Pattern {
        Pattern::new(text, Path::new("/ws")).unwrap()
    }

    #[test]
    fn star_stays_in_a_directory_and_double_star_crosses() {
        assert!(pattern("*.rs").is_match("main.rs"));
        assert!(!pattern("*.rs").is_match("src/main.rs"));
        assert!(pattern("**/*.rs").is_match("main.rs"));
        assert!(pattern("**/*.rs").is_match("src/a/b.rs"));
        assert!(pattern("src/*.{ts,tsx}").is_match("src/app.tsx"));
        assert!(!pattern("src/*.{ts,tsx}").is_match("src/ui/app.tsx"));
        assert!(pattern("./src/**").is_match("src/ui/app.tsx"));
        assert!(pattern("/ws/src/*.rs").is_match("src/lib.rs"));
    }

    #[test]
    fn the_literal_prefix_is_where_the_walk_starts() {
        assert_eq!(pattern("src/ui/*.ts").prefix, PathBuf::from("src/ui"));
        assert_eq!(pattern("src/**/x.rs").prefix, PathBuf::from("src"));
        assert_eq!(pattern("**/*.rs").prefix, PathBuf::new());
        assert_eq!(pattern("Cargo.toml").prefix, PathBuf::new());
        assert_eq!(pattern("a/../b/*.rs").prefix, PathBuf::from("a"));
    }

    #[test]
    fn bad_patterns_say_why() {
        let root = Path::new("/ws");
        assert!(Pattern::new("/etc/*", root)
            .unwrap_err()
            .contains("absolute"));
        assert!(Pattern::new("src/[a", root)
            .unwrap_err()
            .contains("not a valid glob"));
        assert!(Pattern::new("  ", root).unwrap_err().contains("empty"));
    }

    #[test]
    fn matches_come_newest_first_capped_with_the_total_and_ignored_files_left_out() {
        let dir = TestDir::new("glob");
        dir.write(".gitignore", "target/\n");
        for (i, name) in [
            "src/a.rs",
            "src/b.rs",
            "src/deep/c.rs",
            "README.md",
            "target/x.rs",
        ]
        .iter()
        .enumerate()
        {
            dir.write(name, "x");
            dir.touch(name, 1_000 + i as u64);
        }
        let root = dir.path();
        let all = find(
            root,
            root,
            &Pattern::new("**/*.rs", root).unwrap(),
            false,
            10,
        )
        .unwrap();
        assert_eq!(all.paths, vec!["src/deep/c.rs", "src/b.rs", "src/a.rs"]);
        assert_eq!(all.total, 3);

        let capped = find(
            root,
            root,
            &Pattern::new("**/*.rs", root).unwrap(),
            false,
            2,
        )
        .unwrap();
        assert_eq!((capped.paths.len(), capped.total), (2, 3));

        let with_ignored = find(
            root,
            root,
            &Pattern::new("**/*.rs", root).unwrap(),
            true,
            10,
        )
        .unwrap();
        assert_eq!(with_ignored.paths[0], "target/x.rs");

        let in_src = find(
            root,
            root,
            &Pattern::new("src/*.rs", root).unwrap(),
            false,
            10,
        )
        .unwrap();
        assert_eq!(in_src.paths, vec!["src/b.rs", "src/a.rs"]);

        // An ignore file above the walk's start still applies.
        let under_target = find(
            root,
            root,
            &Pattern::new("target/*.rs", root).unwrap(),
            false,
            10,
        )
        .unwrap();
        assert_eq!(under_target.total, 0);

        let none = find(
            root,
            root,
            &Pattern::new("nowhere/*.rs", root).unwrap(),
            false,
            10,
        )
        .unwrap();
        assert_eq!(none.total, 0);
    }
}
