//! Which root a path argument lies in, and whether a change may land where it does.
//!
//! The file tools reach the session workspace and the operator's extra roots
//! (`[files] extra_roots`). A relative path is the workspace's. An absolute one is the
//! workspace's when it starts with it (as the call names it, or canonical) and stays in
//! it; else it is taken by its words ([`confined::normalize`]: a `..` out of the
//! workspace may lead into a root beside it) and belongs to the workspace if it starts
//! with it now, else to the deepest extra root it starts with (as configured, else
//! canonical). Starting with is component-wise, never a string prefix: `/srv/docs2` is
//! not in `/srv/docs`. The path is then resolved by the kernel beneath that root's opened
//! directory, as [`confined`] does for every path.
//!
//! **Writing.** Whether a change may land is decided by where the kernel says it lands
//! (the canonical path of the opened directory it goes into): the deepest root holding
//! that place decides, the workspace counting as a writable root, and at equal depth
//! (one directory named twice, e.g. through a link) a read-only root wins. So a
//! read-only root inside the workspace keeps that part of it read-only, a workspace
//! inside a read-only root stays writable, and a link from a writable root into a
//! read-only one does not make it writable. A place in none of them (the root was moved
//! while the call ran) goes by the root the path named. A change refused is `DENIED`,
//! before anything is written.
//!
//! Each call opens the workspace, and an extra root only when a path lies in it; the
//! extra roots' canonical paths are taken when first needed, in each call (a link on
//! the way may have been re-pointed since).

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use crate::error::{ErrorCode, ToolError};

use super::config::{tidy, ExtraRoot};
use super::confined::{self, RelPath, Root};

/// Which root a path lies in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Workspace,
    /// `[files] extra_roots[i]`.
    Extra(usize),
}

/// A path argument, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub place: Place,
    /// Beneath the root.
    pub rel: RelPath,
    /// How messages and results name it: relative in the workspace (`src/main.rs`),
    /// absolute in an extra root (`/srv/docs/a.md`, the root as the path named it).
    pub shown: String,
}

/// The roots one call reaches.
pub struct Places<'a> {
    /// The workspace as the call names it.
    workdir: &'a Path,
    workspace: Root,
    extra: &'a [ExtraRoot],
    /// The extra roots' canonical paths (`None`: it does not resolve now).
    canonical: OnceCell<Vec<Option<PathBuf>>>,
    opened: Vec<OnceCell<Result<Root, ToolError>>>,
}

impl<'a> Places<'a> {
    /// The roots of a call whose workspace is `workdir`: the workspace is opened now.
    pub fn open(workdir: &'a Path, extra: &'a [ExtraRoot]) -> Result<Places<'a>, ToolError> {
        let workspace = Root::open(workdir).map_err(|error| {
            ToolError::new(
                ErrorCode::IoError,
                format!(
                    "the workspace {} cannot be opened: {error}",
                    workdir.display()
                ),
            )
        })?;
        Ok(Places {
            workdir,
            workspace,
            extra,
            canonical: OnceCell::new(),
            opened: extra.iter().map(|_| OnceCell::new()).collect(),
        })
    }

    /// Where `arg` lies, by its words (see the module doc). NUL bytes, overlong paths,
    /// `..` past the workspace in a relative path and absolute paths in no root are
    /// `INVALID_ARGUMENTS`.
    pub fn locate(&self, arg: &str) -> Result<Located, ToolError> {
        confined::check_arg(arg)?;
        let path = Path::new(arg);
        if !path.is_absolute() {
            let rel = confined::relative(path, arg, "the workspace")?;
            return Ok(self.in_workspace(rel));
        }
        // The workspace as the call names it (its own `..` and links included), or
        // canonical; its `..` steps back within the workspace. One past it may lead
        // into an extra root, by the words of the whole path.
        let mut past = None;
        for base in [self.workdir, self.workspace.path.as_path()] {
            if let Ok(rest) = path.strip_prefix(base) {
                match confined::relative(rest, arg, "the workspace") {
                    Ok(rel) => return Ok(self.in_workspace(rel)),
                    Err(error) => past = Some(error),
                }
            }
        }
        let path = confined::normalize(path);
        for base in [
            confined::normalize(self.workdir),
            self.workspace.path.clone(),
        ] {
            if let Ok(rest) = path.strip_prefix(&base) {
                let rel = confined::relative(rest, arg, "the workspace")?;
                return Ok(self.in_workspace(rel));
            }
        }
        let configured = self.extra.iter().map(|root| Some(tidy(&root.path)));
        let found =
            deepest(&path, configured).or_else(|| deepest(&path, self.canonical().iter().cloned()));
        let Some((index, base)) = found else {
            return Err(past.unwrap_or_else(|| self.outside(arg)));
        };
        let rest = path
            .strip_prefix(&base)
            .expect("deepest() found it a prefix");
        let within = self.within(Place::Extra(index));
        let rel = confined::relative(rest, arg, &within)?;
        let shown = match rel.parts.is_empty() {
            true => base.display().to_string(),
            false => base.join(rel.path()).display().to_string(),
        };
        Ok(Located {
            place: Place::Extra(index),
            rel,
            shown,
        })
    }

    fn in_workspace(&self, rel: RelPath) -> Located {
        Located {
            place: Place::Workspace,
            shown: rel.shown(),
            rel,
        }
    }

    /// The refusal of an absolute path in no root.
    fn outside(&self, arg: &str) -> ToolError {
        let workdir = self.workdir.display();
        let message = match self.extra.is_empty() {
            true => format!(
                "{arg} is outside the workspace {workdir}: the file tools reach only the \
                 workspace (give a path inside it, or one relative to it)"
            ),
            false => format!(
                "{arg} is outside the workspace {workdir} and the extra roots ({}): the file \
                 tools reach only those (give a path inside one of them, or one relative to \
                 the workspace)",
                self.extra
                    .iter()
                    .map(describe)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        ToolError::new(ErrorCode::InvalidArguments, message)
    }

    /// How messages name the root `place`: `the workspace`, `the extra root /srv/docs`.
    pub fn within(&self, place: Place) -> String {
        match place {
            Place::Workspace => "the workspace".into(),
            Place::Extra(index) => format!("the extra root {}", self.extra[index].path.display()),
        }
    }

    /// The opened root `place` (an extra root is opened the first time).
    pub fn root(&self, place: Place) -> Result<&Root, ToolError> {
        let index = match place {
            Place::Workspace => return Ok(&self.workspace),
            Place::Extra(index) => index,
        };
        self.opened[index]
            .get_or_init(|| {
                let path = &self.extra[index].path;
                Root::open(path).map_err(|error| {
                    ToolError::new(
                        ErrorCode::IoError,
                        format!(
                            "the extra root {} ([files] extra_roots) cannot be opened: {error}",
                            path.display()
                        ),
                    )
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The extra roots' canonical paths, taken once per call.
    fn canonical(&self) -> &[Option<PathBuf>] {
        self.canonical.get_or_init(|| {
            self.extra
                .iter()
                .map(|root| std::fs::canonicalize(&root.path).ok())
                .collect()
        })
    }

    /// The writable roots' canonical paths: the workspace and each extra root with
    /// `write = true` that resolves.
    pub fn writable(&self) -> Vec<PathBuf> {
        let mut writable = vec![self.workspace.path.clone()];
        for (root, canonical) in self.extra.iter().zip(self.canonical()) {
            if let Some(canonical) = canonical.as_ref().filter(|_| root.write) {
                writable.push(canonical.clone());
            }
        }
        writable
    }

    /// Refuses a change `shown` (named in `named`) that lands at `target` (its kernel
    /// path) when the root deciding there is read-only (see the module doc).
    pub fn check_writable(
        &self,
        target: &Path,
        named: Place,
        shown: &str,
    ) -> Result<(), ToolError> {
        // (depth, place, writable) of the deepest root holding the target.
        let mut decides: Option<(usize, Place, bool)> = None;
        let roots = std::iter::once((Place::Workspace, Some(&self.workspace.path), true)).chain(
            self.extra.iter().zip(self.canonical()).enumerate().map(
                |(index, (root, canonical))| (Place::Extra(index), canonical.as_ref(), root.write),
            ),
        );
        for (place, canonical, write) in roots {
            let Some(canonical) = canonical.filter(|c| target.starts_with(c)) else {
                continue;
            };
            let depth = canonical.components().count();
            decides = match decides {
                Some((best, _, _)) if best > depth => decides,
                Some((best, _, true)) if best == depth && !write => Some((depth, place, write)),
                Some((best, _, _)) if best == depth => decides,
                _ => Some((depth, place, write)),
            };
        }
        let (place, write) = match decides {
            Some((_, place, write)) => (place, write),
            None => (
                named,
                match named {
                    Place::Workspace => true,
                    Place::Extra(index) => self.extra[index].write,
                },
            ),
        };
        match (write, place) {
            (true, _) | (false, Place::Workspace) => Ok(()),
            (false, Place::Extra(index)) => Err(ToolError::new(
                ErrorCode::Denied,
                format!(
                    "{shown} is in the extra root {}, which is read-only: the file tools may \
                     read it, not change it. To make it writable, the operator sets `write = \
                     true` on its entry of `[files] extra_roots` in dsh.toml (and restarts \
                     dsh); nothing was changed",
                    self.extra[index].path.display()
                ),
            )),
        }
    }
}

/// An extra root as a message lists it: `/srv/docs (read-only)`.
fn describe(root: &ExtraRoot) -> String {
    match root.write {
        true => root.path.display().to_string(),
        false => format!("{} (read-only)", root.path.display()),
    }
}

/// The deepest of `bases` (by index; `None`: none) that `path` starts with, by whole
/// components.
fn deepest(path: &Path, bases: impl Iterator<Item = Option<PathBuf>>) -> Option<(usize, PathBuf)> {
    bases
        .enumerate()
        .filter_map(|(index, base)| base.map(|base| (index, base)))
        .filter(|(_, base)| path.starts_with(base))
        .max_by_key(|(_, base)| base.components().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(path: &Path, write: bool) -> ExtraRoot {
        ExtraRoot {
            path: path.to_path_buf(),
            write,
        }
    }

    #[test]
    fn a_path_belongs_to_the_workspace_else_to_the_deepest_root_by_whole_components() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for sub in ["ws", "srv/docs/inner", "srv/docs2", "real"] {
            std::fs::create_dir_all(base.join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(base.join("real"), base.join("alias")).unwrap();
        let extra = [
            root(&base.join("srv/docs"), false),
            root(&base.join("srv/docs/inner"), true),
            root(&base.join("alias"), true),
        ];
        let ws = base.join("ws");
        let places = Places::open(&ws, &extra).unwrap();
        let at = |arg: &Path| places.locate(&arg.display().to_string());

        let located = at(&base.join("srv/docs/a/b.md")).unwrap();
        assert_eq!(located.place, Place::Extra(0));
        assert_eq!(located.rel.parts, ["a", "b.md"]);
        assert_eq!(
            located.shown,
            base.join("srv/docs/a/b.md").display().to_string()
        );
        assert_eq!(
            at(&base.join("srv/docs/inner/x")).unwrap().place,
            Place::Extra(1)
        );
        // `..` is taken by the words: out of a root into another, or out of all.
        assert_eq!(
            at(&base.join("srv/docs/inner/../y")).unwrap().place,
            Place::Extra(0)
        );
        assert_eq!(
            at(&base.join("ws/../srv/docs/y")).unwrap().place,
            Place::Extra(0)
        );
        for outside in [
            base.join("srv/docs2/secret"),
            base.join("srv/docs/../docs2/secret"),
            base.join("srv"),
            PathBuf::from("/etc/passwd"),
        ] {
            let error = at(&outside).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArguments, "{outside:?}");
            assert!(
                error.message.contains("outside the workspace")
                    && error.message.contains("(read-only)"),
                "{error}"
            );
        }
        // A root by its canonical path too, shown as the path named it.
        let located = at(&base.join("real/f")).unwrap();
        assert_eq!(located.place, Place::Extra(2));
        assert_eq!(located.shown, base.join("real/f").display().to_string());
        assert_eq!(
            at(&base.join("alias/f")).unwrap().shown,
            base.join("alias/f").display().to_string()
        );
        // Relative paths and the workspace's own absolute paths are the workspace's.
        let located = at(Path::new("src/../a.rs")).unwrap();
        assert_eq!(
            (located.place, located.shown.as_str()),
            (Place::Workspace, "a.rs")
        );
        assert_eq!(at(&ws.join("a.rs")).unwrap().shown, "a.rs");
        assert!(places
            .locate("../srv/docs/a")
            .unwrap_err()
            .message
            .contains("leads outside the workspace"));
        let error = at(&ws.join("../elsewhere/x")).unwrap_err();
        assert!(
            error.message.contains("leads outside the workspace"),
            "{error}"
        );

        // A workdir named with a `..` (and a link) in it: its paths as the call names
        // them, canonical, or by their words.
        std::os::unix::fs::symlink(&ws, base.join("ws-link")).unwrap();
        let workdir = base.join("srv/../ws-link");
        let places = Places::open(&workdir, &extra).unwrap();
        for arg in [
            workdir.join("src/a.rs"),
            ws.join("src/a.rs"),
            base.join("ws-link/src/a.rs"),
        ] {
            let located = places.locate(&arg.display().to_string()).unwrap();
            assert_eq!(
                (located.place, located.shown.as_str()),
                (Place::Workspace, "src/a.rs"),
                "{arg:?}"
            );
        }
        let located = places
            .locate(&workdir.join("../srv/docs/x").display().to_string())
            .unwrap();
        assert_eq!(located.place, Place::Extra(0));
    }

    #[test]
    fn the_deepest_root_where_a_change_lands_decides_and_read_only_wins_a_tie() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        for sub in ["home/ws/vendor", "home/notes", "scratch"] {
            std::fs::create_dir_all(base.join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(base.join("scratch"), base.join("scratch-link")).unwrap();
        let extra = [
            root(&base.join("home"), false),
            root(&base.join("home/ws/vendor"), false),
            root(&base.join("scratch"), true),
            root(&base.join("scratch-link"), false),
        ];
        let ws = base.join("home/ws");
        let places = Places::open(&ws, &extra).unwrap();
        let check =
            |target: &str| places.check_writable(&base.join(target), Place::Workspace, target);
        // The workspace inside a read-only root is writable; a read-only root in it not.
        check("home/ws/src/a.rs").unwrap();
        let error = check("home/ws/vendor/lib.rs").unwrap_err();
        assert_eq!(error.code, ErrorCode::Denied);
        assert!(
            error.message.contains("home/ws/vendor, which is read-only")
                && error.message.contains("write = true"),
            "{error}"
        );
        assert_eq!(
            check("home/notes/n.md").unwrap_err().code,
            ErrorCode::Denied
        );
        // One directory twice (a link): read-only wins.
        assert_eq!(check("scratch/x").unwrap_err().code, ErrorCode::Denied);
        // A place in no root goes by the root the path named.
        places
            .check_writable(Path::new("/nowhere/x"), Place::Workspace, "x")
            .unwrap();
        let error = places
            .check_writable(Path::new("/nowhere/x"), Place::Extra(1), "x")
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::Denied);
        assert_eq!(
            places.writable(),
            [base.join("home/ws"), base.join("scratch")]
        );
    }
}
