//! `[lsp]` in `dsh.toml`: the language servers (`[lsp.servers.NAME]`: `command`,
//! `extensions`, `root_markers`, `settings`, `initialization_options`), how long an idle
//! server lives, how long a query may take and how long it waits for a server's indexing. The built-in defaults (rust-analyzer, pylsp,
//! typescript-language-server, clangd, gopls) are used when their binary is on `PATH`
//! and no configured server claims their extensions; two configured servers claiming
//! one extension is a configuration error.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Language servers and their lifetimes.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "RawLspConfig")]
// The configuration reference reads its own fields (the same as `RawLspConfig`'s,
// with the docs) through schemars' serialize contract, and their defaults from
// `Default`.
#[schemars(default)]
pub struct LspConfig {
    /// A server unused this long is shut down (the next query starts it again).
    pub idle_ms: u64,
    /// The longest one query may take (the server's start and handshake included).
    pub request_timeout_ms: u64,
    /// How long a `definition` or `references` waits for the server's indexing to end
    /// (the work-done progress it reports, such as clangd's background index) before it
    /// answers with what the server knows so far, saying the index is still building.
    /// 0 never waits. Bounded by `request_timeout_ms` like the rest of the query.
    pub index_wait_ms: u64,
    /// Configured servers by name (a name of a default replaces that default).
    pub servers: BTreeMap<String, ServerConfig>,
    /// Whether the built-in servers found on `PATH` are used for extensions no
    /// configured server claims.
    pub defaults: bool,
}

/// One language server.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The server's argv; the program is looked up on `PATH`.
    pub command: Vec<String>,
    /// File extensions it answers for, without the dot (`py`, `ts`).
    pub extensions: Vec<String>,
    /// Files or directories that mark a project root (`Cargo.toml`, `package.json`): the
    /// server's root is the nearest directory above the file that has one, within the
    /// workspace; the workspace itself when none has.
    #[serde(default)]
    pub root_markers: Vec<String>,
    /// The server's settings (sent as `workspace/didChangeConfiguration` and answered to
    /// `workspace/configuration` by section).
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Value>")]
    pub settings: Option<toml::Value>,
    /// The `initializationOptions` of its `initialize` request (server-specific).
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Value>")]
    pub initialization_options: Option<toml::Value>,
}

/// `[lsp]` as written, before the extension check. Its schema is only there for
/// `try_from` (schemars names it); the reference reads [`LspConfig`]'s.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
struct RawLspConfig {
    idle_ms: u64,
    request_timeout_ms: u64,
    index_wait_ms: u64,
    servers: BTreeMap<String, ServerConfig>,
    defaults: bool,
}

impl Default for RawLspConfig {
    fn default() -> Self {
        let config = LspConfig::default();
        RawLspConfig {
            idle_ms: config.idle_ms,
            request_timeout_ms: config.request_timeout_ms,
            index_wait_ms: config.index_wait_ms,
            servers: config.servers,
            defaults: config.defaults,
        }
    }
}

impl TryFrom<RawLspConfig> for LspConfig {
    type Error = String;

    fn try_from(raw: RawLspConfig) -> Result<Self, String> {
        let mut claimed: BTreeMap<String, &str> = BTreeMap::new();
        for (name, server) in &raw.servers {
            if server.command.is_empty() {
                return Err(format!("[lsp.servers.{name}] has an empty command"));
            }
            for extension in &server.extensions {
                let extension = normalize_extension(extension);
                if let Some(other) = claimed.insert(extension.clone(), name) {
                    return Err(format!(
                        "[lsp.servers.{other}] and [lsp.servers.{name}] both claim the \
                         extension .{extension}; one extension goes to one server"
                    ));
                }
            }
        }
        Ok(LspConfig {
            idle_ms: raw.idle_ms,
            request_timeout_ms: raw.request_timeout_ms.max(1),
            index_wait_ms: raw.index_wait_ms,
            servers: raw.servers,
            defaults: raw.defaults,
        })
    }
}

impl Default for LspConfig {
    fn default() -> Self {
        LspConfig {
            idle_ms: 10 * 60 * 1000,
            request_timeout_ms: 30_000,
            index_wait_ms: 5_000,
            servers: BTreeMap::new(),
            defaults: true,
        }
    }
}

/// `.py` and `PY` as `py`.
pub fn normalize_extension(extension: &str) -> String {
    extension.trim_start_matches('.').to_ascii_lowercase()
}

/// A built-in server: name, argv, extensions, root markers.
pub type DefaultServer = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

/// The built-in servers.
pub const DEFAULT_SERVERS: &[DefaultServer] = &[
    (
        "rust-analyzer",
        &["rust-analyzer"],
        &["rs"],
        &["Cargo.toml"],
    ),
    (
        "pylsp",
        &["pylsp"],
        &["py", "pyi"],
        &["pyproject.toml", "setup.py", "setup.cfg"],
    ),
    (
        "typescript-language-server",
        &["typescript-language-server", "--stdio"],
        &["ts", "tsx", "js", "jsx", "mts", "cts", "mjs", "cjs"],
        &["tsconfig.json", "jsconfig.json", "package.json"],
    ),
    (
        "clangd",
        &["clangd"],
        &["c", "h", "cc", "cpp", "cxx", "hpp", "hh"],
        &["compile_commands.json", "compile_flags.txt"],
    ),
    ("gopls", &["gopls"], &["go"], &["go.mod"]),
];

/// What a built-in server is initialized with: typescript-language-server without its
/// syntax-only server, which answers while the project loads with unresolved imports.
fn default_initialization_options(name: &str) -> Option<toml::Value> {
    match name {
        "typescript-language-server" => {
            toml::from_str("[tsserver]\nuseSyntaxServer = \"never\"").ok()
        }
        _ => None,
    }
}

impl LspConfig {
    /// The servers in force: the configured ones, then each default whose program is
    /// found by `found` and whose extensions no configured server claims (an extension
    /// claimed by a configured server is dropped from the default).
    pub fn resolved(&self, found: impl Fn(&str) -> bool) -> BTreeMap<String, ServerConfig> {
        let mut servers: BTreeMap<String, ServerConfig> = self
            .servers
            .iter()
            .map(|(name, server)| {
                let mut server = server.clone();
                server.extensions = server
                    .extensions
                    .iter()
                    .map(|e| normalize_extension(e))
                    .collect();
                (name.clone(), server)
            })
            .collect();
        if !self.defaults {
            return servers;
        }
        let claimed: Vec<String> = servers
            .values()
            .flat_map(|s| s.extensions.iter().cloned())
            .collect();
        for (name, argv, extensions, markers) in DEFAULT_SERVERS {
            if servers.contains_key(*name) || !found(argv[0]) {
                continue;
            }
            let extensions: Vec<String> = extensions
                .iter()
                .filter(|e| !claimed.iter().any(|c| c == *e))
                .map(|e| e.to_string())
                .collect();
            if extensions.is_empty() {
                continue;
            }
            servers.insert(
                name.to_string(),
                ServerConfig {
                    command: argv.iter().map(|a| a.to_string()).collect(),
                    extensions,
                    root_markers: markers.iter().map(|m| m.to_string()).collect(),
                    settings: None,
                    initialization_options: default_initialization_options(name),
                },
            );
        }
        servers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<LspConfig, String> {
        toml::from_str::<LspConfig>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn two_servers_claiming_one_extension_is_a_configuration_error() {
        let error = parse(
            "[servers.a]\ncommand = [\"a\"]\nextensions = [\"py\"]\n\
             [servers.b]\ncommand = [\"b\"]\nextensions = [\".PY\"]\n",
        )
        .unwrap_err();
        assert!(error.contains("both claim the extension .py"), "{error}");
    }

    #[test]
    fn configured_servers_take_their_extensions_from_the_defaults() {
        let config =
            parse("[servers.mine]\ncommand = [\"my-py\"]\nextensions = [\"py\"]\n").unwrap();
        let servers = config.resolved(|_| true);
        assert_eq!(servers["mine"].extensions, vec!["py"]);
        assert_eq!(servers["pylsp"].extensions, vec!["pyi"]);
        assert!(servers.contains_key("gopls"));
        let none = config.resolved(|_| false);
        assert_eq!(none.len(), 1);
    }

    #[test]
    fn an_unknown_key_is_refused() {
        assert!(parse("idle = 3").is_err());
    }
}
