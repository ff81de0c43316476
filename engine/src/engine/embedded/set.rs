//! The embedded plugin set, named once: which crates in `plugins/` are built into the
//! `dsh` binary, whether each is a tool or a pipeline stage, and the host interfaces it
//! is granted by default. `build.rs` reads this file (`#[path]`) to know what to build
//! and embed; [`super`] and the grants read it to load and grant them. Nothing else
//! lists them.
//!
//! The file stands alone (no `crate::` paths) so the build script can include it.

/// What an embedded plugin is to the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A tool, loaded with no configuration.
    Tool,
    /// A pipeline stage (guard, middleware, result filter, observer), loaded only when
    /// `[pipeline]` in dsh.toml names it.
    Stage,
}

/// One embedded plugin.
#[derive(Debug)]
pub struct EmbeddedPlugin {
    /// The crate's package name, its component's file stem and the plugin's name.
    pub name: &'static str,
    /// The crate's directory under `plugins/`.
    pub dir: &'static str,
    pub kind: Kind,
    /// The host interfaces it is granted when `dsh.toml` says nothing.
    pub interfaces: &'static [&'static str],
}

/// The embedded plugins, in load order.
pub const EMBEDDED: &[EmbeddedPlugin] = &[
    EmbeddedPlugin {
        name: "bash",
        dir: "bash",
        kind: Kind::Tool,
        interfaces: &["process"],
    },
    EmbeddedPlugin {
        name: "jobs",
        dir: "jobs",
        kind: Kind::Tool,
        interfaces: &["jobs"],
    },
    EmbeddedPlugin {
        name: "terminal",
        dir: "terminal",
        kind: Kind::Tool,
        interfaces: &["terminal"],
    },
    EmbeddedPlugin {
        name: "lsp",
        dir: "lsp",
        kind: Kind::Tool,
        interfaces: &["lsp"],
    },
    EmbeddedPlugin {
        name: "files",
        dir: "files",
        kind: Kind::Tool,
        interfaces: &["files", "undo"],
    },
    EmbeddedPlugin {
        name: "subagent",
        dir: "subagent",
        kind: Kind::Tool,
        interfaces: &["subagent"],
    },
    EmbeddedPlugin {
        name: "deny_destructive",
        dir: "guards/deny_destructive",
        kind: Kind::Stage,
        interfaces: &[],
    },
    EmbeddedPlugin {
        name: "workspace_only",
        dir: "guards/workspace_only",
        kind: Kind::Stage,
        interfaces: &[],
    },
    EmbeddedPlugin {
        name: "ask_git_push",
        dir: "guards/ask_git_push",
        kind: Kind::Stage,
        interfaces: &[],
    },
    EmbeddedPlugin {
        name: "ask_writes_outside",
        dir: "guards/ask_writes_outside",
        kind: Kind::Stage,
        interfaces: &[],
    },
    EmbeddedPlugin {
        name: "redact_secrets",
        dir: "guards/redact_secrets",
        kind: Kind::Stage,
        interfaces: &[],
    },
    EmbeddedPlugin {
        name: "rate_limit",
        dir: "middleware/rate_limit",
        kind: Kind::Stage,
        interfaces: &[],
    },
    EmbeddedPlugin {
        name: "audit",
        dir: "observers/audit",
        kind: Kind::Stage,
        // It says through the host's log when it cannot write its file.
        interfaces: &["log"],
    },
];

/// The embedded plugin `name`, if there is one.
pub fn find(name: &str) -> Option<&'static EmbeddedPlugin> {
    EMBEDDED.iter().find(|plugin| plugin.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn every_embedded_plugin_is_a_workspace_crate_of_that_name_in_plugins() {
        let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins");
        let workspace = std::fs::read_to_string(plugins.join("Cargo.toml")).unwrap();
        for plugin in EMBEDDED {
            assert!(
                workspace.contains(&format!("{:?}", plugin.dir)),
                "plugins/Cargo.toml does not list {:?} as a member",
                plugin.dir
            );
            let manifest = plugins.join(plugin.dir).join("Cargo.toml");
            let text = std::fs::read_to_string(&manifest)
                .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
            assert!(
                text.lines()
                    .any(|line| line.trim() == format!("name = {:?}", plugin.name)),
                "{} does not name the package {:?}",
                manifest.display(),
                plugin.name
            );
        }
    }

    #[test]
    fn embedded_names_are_unique() {
        for (i, plugin) in EMBEDDED.iter().enumerate() {
            assert!(
                EMBEDDED[i + 1..].iter().all(|p| p.name != plugin.name),
                "{} is listed twice",
                plugin.name
            );
        }
    }
}
