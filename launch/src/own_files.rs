//! dsh's own files, and the one rule every confined reach applies to them.
//!
//! The state directory (event logs, spill files, the compile cache and its key, the control
//! sockets, the sandbox's temporary slots) is neither readable nor writable from anything
//! dsh confines; the configuration file and the plugin directory are readable and never
//! writable. A confined run that could write the cache would have its native code loaded
//! by dsh unconfined; one that could write `dsh.toml` or a plugin would lift its own
//! confinement at the next reload or start. The rule holds wherever these lie, the
//! workspace included: the sandbox executor applies it with a mount namespace (see
//! [`crate::executor`]), and other confined reaches ask [`OwnFiles::reach`].

use std::path::{Path, PathBuf};

/// dsh's own files (canonical paths).
#[derive(Debug, Clone, Default)]
pub struct OwnFiles {
    /// Neither readable nor writable when confined.
    pub state_dir: Option<PathBuf>,
    /// Readable, never writable when confined: the configuration file and the plugin
    /// directory (those that exist).
    pub read_only: Vec<PathBuf>,
    /// The three as they were named (absolute, not resolved): a symbolic link on the way
    /// that a confined run could change would redirect the next start (see
    /// [`OwnFiles::links_in`]).
    pub named: Vec<PathBuf>,
}

/// What a confined reach may do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Whatever the confinement otherwise allows.
    Open,
    /// Read, never write (the configuration, the plugins).
    ReadOnly,
    /// Neither read nor write (the state directory).
    Hidden,
}

impl OwnFiles {
    /// dsh's files for a host with this state directory, configuration file and plugin
    /// directory; each is made absolute and canonical (one that does not exist yet is
    /// left out of the read-only set: there is nothing to protect, and nothing dsh reads).
    pub fn new(state_dir: &Path, config_file: Option<&Path>, plugins_dir: Option<&Path>) -> Self {
        let canonical = |path: &Path| std::fs::canonicalize(path).ok();
        let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.into());
        OwnFiles {
            named: [Some(state_dir), config_file, plugins_dir]
                .into_iter()
                .flatten()
                .map(absolute)
                .collect(),
            state_dir: Some(canonical(state_dir).unwrap_or_else(|| state_dir.to_path_buf())),
            read_only: [config_file, plugins_dir]
                .into_iter()
                .flatten()
                .filter_map(canonical)
                .collect(),
        }
    }

    /// The symbolic links on the way to dsh's files as they were named that lie in a
    /// directory inside one of `writable` (canonical): a confined run could point such a
    /// link elsewhere, and the next dsh started with the same names would read the
    /// run's configuration, plugins or compile cache. Each as (link, where it points).
    pub fn links_in(&self, writable: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
        links_among(&self.named, writable)
    }

    /// What a confined reach may do with `path` (absolute and canonical).
    pub fn reach(&self, path: &Path) -> Reach {
        if self
            .state_dir
            .as_deref()
            .is_some_and(|state| path.starts_with(state))
        {
            Reach::Hidden
        } else if self.read_only.iter().any(|own| path.starts_with(own)) {
            Reach::ReadOnly
        } else {
            Reach::Open
        }
    }
}

/// The symbolic links on the way to `paths` (absolute, as named) that lie in a directory
/// inside one of `writable` (canonical), each as (link, where it points): what a confined
/// run could re-point before the next start reads the same names.
pub fn links_among(paths: &[PathBuf], writable: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    let mut links = Vec::new();
    for named in paths {
        for prefix in named.ancestors() {
            let is_link =
                std::fs::symlink_metadata(prefix).is_ok_and(|meta| meta.file_type().is_symlink());
            let parent = prefix
                .parent()
                .and_then(|parent| std::fs::canonicalize(parent).ok());
            if is_link
                && parent.is_some_and(|parent| writable.iter().any(|w| parent.starts_with(w)))
            {
                let target = std::fs::read_link(prefix).unwrap_or_default();
                links.push((prefix.to_path_buf(), target));
            }
        }
    }
    links.sort();
    links.dedup();
    links
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_is_hidden_and_the_configuration_read_only_wherever_they_lie() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        std::fs::create_dir_all(root.join("ws/.state/cache")).unwrap();
        std::fs::create_dir_all(root.join("ws/plugins")).unwrap();
        std::fs::write(root.join("ws/dsh.toml"), "").unwrap();
        let own = OwnFiles::new(
            &root.join("ws/.state"),
            Some(&root.join("ws/dsh.toml")),
            Some(&root.join("ws/plugins")),
        );
        assert_eq!(own.reach(&root.join("ws/.state/cache/key")), Reach::Hidden);
        assert_eq!(own.reach(&root.join("ws/.state")), Reach::Hidden);
        assert_eq!(own.reach(&root.join("ws/dsh.toml")), Reach::ReadOnly);
        assert_eq!(own.reach(&root.join("ws/plugins/x.wasm")), Reach::ReadOnly);
        assert_eq!(own.reach(&root.join("ws/src/main.rs")), Reach::Open);
        assert_eq!(own.reach(&root.join("ws/.statefile")), Reach::Open);
        // A link in the workspace on the way to one of them is named.
        std::os::unix::fs::symlink(root.join("ws/dsh.toml"), root.join("ws/link.toml")).unwrap();
        std::os::unix::fs::symlink(root.join("ws/plugins"), root.join("ws/p")).unwrap();
        let linked = OwnFiles::new(
            &root.join("ws/.state"),
            Some(&root.join("ws/link.toml")),
            Some(&root.join("ws/p")),
        );
        let writable = [root.join("ws")];
        let links: Vec<PathBuf> = linked
            .links_in(&writable)
            .into_iter()
            .map(|(l, _)| l)
            .collect();
        assert_eq!(links, [root.join("ws/link.toml"), root.join("ws/p")]);
        assert!(own.links_in(&writable).is_empty());
        assert!(linked.links_in(&[root.join("elsewhere")]).is_empty());
        // A configuration that does not exist protects nothing.
        let own = OwnFiles::new(&root.join("ws/.state"), Some(&root.join("none.toml")), None);
        assert!(own.read_only.is_empty());
    }
}
