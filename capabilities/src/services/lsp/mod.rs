//! The language-server service: the four semantic queries (definition, references,
//! hover, document symbols) answered by real language servers the host owns.
//!
//! A file is routed by its extension to the one server that claims it (`[lsp]`,
//! [`config`]). Servers start lazily on their first query, one per server and
//! workspace root (the nearest directory with one of the server's root markers, within
//! the workspace), through the process capability's launcher: contained like every
//! other process. They are shared by every caller (a warm index is worth keeping), so an
//! owner going away releases nothing; a server idle for `idle_ms` is shut down, and all
//! are at host exit. Every query reads the file from disk and sends it as `didOpen` the
//! first time, `didChange` when it changed since, so edits made by bash are seen. A
//! server found dead is restarted once; dead again, its root and kind answer
//! `LSP_UNAVAILABLE` from then on.
//!
//! A server that has not indexed the project answers `definition` and `references` from
//! what it has parsed (clangd: the header's declaration, the references of the open
//! file). dsh declares work-done progress and tracks what the server reports: when
//! indexing was in progress before or while one of these two was asked, it waits for the
//! indexing to end (at most `[lsp] index_wait_ms`) and asks again; indexing still going
//! at the bound, the answer says so ([`Reply::indexing`]).
//!
//! Positions are 1-based lines and columns in characters for the caller, converted to
//! and from the protocol's 0-based UTF-16 positions here.
//!
//! At an upgrade the running servers are handed to the next binary ([`handover`]).
//!
//! Native only: nothing here knows wasmtime. The WIT binding is in [`wit`].

pub mod capability;
pub mod config;
pub mod handover;
mod server;

pub use server::client_capabilities;
pub mod wit;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::error::{ErrorCode, ToolError};
pub use config::{LspConfig, ServerConfig};
use dsh_launch::{find_program, ExecutorKind, Launch};
use server::{Server, ServerError};

/// The four queries. Every `match` on it is exhaustive: a fifth op does not compile
/// until the binding, this service and the `lsp` plugin handle it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Definition,
    References,
    Hover,
    Symbols,
}

/// Where a query points: a 1-based line and either a 1-based column or an identifier
/// on that line.
#[derive(Debug, Clone)]
pub enum Column {
    At(u32),
    Symbol(String),
}

/// One query, as the binding gives it.
#[derive(Debug, Clone)]
pub struct Query {
    pub op: Op,
    /// Relative to `workdir`, or absolute.
    pub path: String,
    pub line: u32,
    pub column: Column,
}

/// A place in a file: workspace-relative path, 1-based line and column, the line's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: String,
    pub line: u32,
    pub column: u32,
    pub text: String,
}

/// One symbol of an outline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub kind: String,
    pub depth: u32,
    pub line: u32,
    pub column: u32,
}

/// What a query found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Locations(Vec<Location>),
    Hover(String),
    Symbols(Vec<Symbol>),
}

/// An answer, and whether the server was still indexing when it gave it: a sentence
/// saying so (the answer may be partial) and what the server reported in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub answer: Answer,
    pub indexing: Option<String>,
}

/// What answers the four queries: the seam between the binding and the service.
pub trait LspProvider {
    /// Answers `query` for a caller whose workspace is `workspace` and whose relative
    /// paths resolve against `workdir`.
    /// Servers a call starts run under `executor` (the call's, by `[process.executor]`).
    fn query(
        &self,
        workspace: &Path,
        workdir: &Path,
        executor: ExecutorKind,
        query: Query,
    ) -> impl std::future::Future<Output = Result<Reply, ToolError>> + Send;
}

/// One server kind at one root: the running server, and whether its one restart is
/// spent.
#[derive(Default)]
struct Slot {
    server: Option<Arc<Server>>,
    started_once: bool,
    restarted: bool,
}

/// A slot's key: the server's name, its root and the executor it runs under (a
/// sandboxed scope's queries never reach a server that runs `local`).
type SlotKey = (String, PathBuf, ExecutorKind);

/// A flat symbol: its range's start and end (line, character), and itself.
type Ranged = ((u64, u64), (u64, u64), Symbol);

/// The host's language servers.
#[derive(Debug)]
pub struct LspService {
    config: LspConfig,
    /// The servers in force (configured and defaults found on PATH), by name.
    servers: BTreeMap<String, ServerConfig>,
    launch: Arc<Launch>,
    /// (server name, root, executor) → its slot; a slot's lock is held while it starts.
    slots: Mutex<HashMap<SlotKey, Arc<tokio::sync::Mutex<Slot>>>>,
    reaper_started: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("server", &self.server)
            .field("restarted", &self.restarted)
            .finish()
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::InvalidArguments, message)
}

fn unavailable(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorCode::LspUnavailable, message)
}

/// The LSP language id of an extension.
fn language_id(extension: &str) -> &str {
    match extension {
        "py" | "pyi" => "python",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "rs" => "rust",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" => "cpp",
        "go" => "go",
        other => other,
    }
}

/// The 0-based UTF-16 offset of 0-based character `column` in `line`.
fn utf16_of(line: &str, column: usize) -> u32 {
    line.chars()
        .take(column)
        .map(|c| c.len_utf16() as u32)
        .sum()
}

/// The 0-based character column of 0-based UTF-16 offset `offset` in `line`.
fn chars_of(line: &str, offset: u32) -> u32 {
    let mut units = 0;
    let mut chars = 0;
    for c in line.chars() {
        if units >= offset {
            break;
        }
        units += c.len_utf16() as u32;
        chars += 1;
    }
    chars
}

/// The 0-based character column of the first whole-word occurrence of `symbol` in
/// `line`.
fn find_symbol(line: &str, symbol: &str) -> Option<usize> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    if symbol.is_empty() {
        return None;
    }
    let mut from = 0;
    while let Some(found) = line[from..].find(symbol) {
        let start = from + found;
        let end = start + symbol.len();
        let before = line[..start].chars().next_back();
        let after = line[end..].chars().next();
        let bounded = |c: Option<char>| c.is_none_or(|c| !is_word(c));
        if bounded(before) && bounded(after) {
            return Some(line[..start].chars().count());
        }
        from = start + symbol.chars().next().map_or(1, char::len_utf8);
    }
    None
}

/// A `file://` URI as a path.
fn uri_path(uri: &str) -> Option<PathBuf> {
    lsp_types::Url::parse(uri).ok()?.to_file_path().ok()
}

/// The lower-case name of an LSP symbol kind.
fn kind_name(kind: u64) -> String {
    let name = match kind {
        1 => "file",
        2 => "module",
        3 => "namespace",
        4 => "package",
        5 => "class",
        6 => "method",
        7 => "property",
        8 => "field",
        9 => "constructor",
        10 => "enum",
        11 => "interface",
        12 => "function",
        13 => "variable",
        14 => "constant",
        15 => "string",
        16 => "number",
        17 => "boolean",
        18 => "array",
        19 => "object",
        20 => "key",
        21 => "null",
        22 => "enum-member",
        23 => "struct",
        24 => "event",
        25 => "operator",
        26 => "type-parameter",
        _ => "symbol",
    };
    name.to_string()
}

/// Hover contents (`MarkupContent`, `MarkedString` or a list of them) as plain text:
/// markdown code fences dropped, the code kept.
fn hover_text(hover: &Value) -> String {
    let Ok(hover) = serde_json::from_value::<lsp_types::Hover>(hover.clone()) else {
        return String::new();
    };
    let marked = |m: lsp_types::MarkedString| match m {
        lsp_types::MarkedString::String(text) => text,
        lsp_types::MarkedString::LanguageString(code) => code.value,
    };
    let text = match hover.contents {
        lsp_types::HoverContents::Scalar(m) => marked(m),
        lsp_types::HoverContents::Array(items) => items
            .into_iter()
            .map(marked)
            .collect::<Vec<_>>()
            .join("\n\n"),
        lsp_types::HoverContents::Markup(markup) => markup.value,
    };
    text.lines()
        .filter(|line| !line.trim_start().starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

impl LspService {
    pub fn new(config: LspConfig, launch: Arc<Launch>) -> Self {
        let servers = config.resolved(|program| find_program(program).is_some());
        tracing::debug!(servers = ?servers.keys().collect::<Vec<_>>(), "language servers");
        LspService {
            config,
            servers,
            launch,
            slots: Mutex::new(HashMap::new()),
            reaper_started: Default::default(),
        }
    }

    /// The configured servers and their extensions, for messages.
    fn configured(&self) -> String {
        if self.servers.is_empty() {
            return "no language server is configured or found on PATH".into();
        }
        let list: Vec<String> = self
            .servers
            .iter()
            .map(|(name, server)| {
                let extensions: Vec<String> =
                    server.extensions.iter().map(|e| format!(".{e}")).collect();
                format!("{name} ({})", extensions.join(" "))
            })
            .collect();
        format!("configured: {}", list.join(", "))
    }

    /// For an extension a built-in server would serve but whose program is not on
    /// `PATH`: which one, and how to get it.
    fn default_missing(&self, extension: &str) -> String {
        if !self.config.defaults || extension.is_empty() {
            return String::new();
        }
        config::DEFAULT_SERVERS
            .iter()
            .find(|(_, _, extensions, _)| extensions.contains(&extension))
            .map(|(name, argv, _, _)| {
                format!(
                    "; the built-in {name} serves .{extension} files but `{}` is not on PATH: \
                     install it, or name a server in [lsp.servers]",
                    argv[0]
                )
            })
            .unwrap_or_default()
    }

    /// Kills every server (host shutdown).
    pub fn shutdown_all(&self) {
        let slots: Vec<_> = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        for slot in slots {
            if let Ok(mut slot) = slot.try_lock() {
                if let Some(server) = slot.server.take() {
                    server.kill();
                }
            }
        }
    }

    /// The pids of the running servers (for tests and diagnostics).
    pub fn server_pids(&self) -> Vec<i32> {
        let slots: Vec<_> = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        slots
            .iter()
            .filter_map(|slot| slot.try_lock().ok()?.server.as_ref().map(|s| s.pid()))
            .collect()
    }

    /// Starts the task that shuts idle servers down (once, from the first query).
    fn start_reaper(self: &Arc<Self>) {
        if self
            .reaper_started
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let idle = Duration::from_millis(self.config.idle_ms.max(1));
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let tick = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
            loop {
                tokio::time::sleep(tick).await;
                let Some(service) = weak.upgrade() else {
                    return;
                };
                let slots: Vec<_> = service
                    .slots
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .cloned()
                    .collect();
                for slot in slots {
                    let Ok(mut slot) = slot.try_lock() else {
                        continue;
                    };
                    let idle_server = slot.server.as_ref().is_some_and(|s| s.idle_for(idle));
                    if idle_server {
                        if let Some(server) = slot.server.take() {
                            tracing::info!(pid = server.pid(), "idle language server shut down");
                            // An idle shutdown is not a crash: the next query starts
                            // it again with its restart unspent.
                            slot.started_once = false;
                            slot.restarted = false;
                            tokio::spawn(async move {
                                server.shutdown(Duration::from_millis(500)).await;
                            });
                        }
                    }
                }
            }
        });
    }

    /// The running server of `name` at `root` under `executor`, started (or restarted
    /// once) if needed.
    async fn server(
        self: &Arc<Self>,
        name: &str,
        config: &ServerConfig,
        root: &Path,
        executor: ExecutorKind,
    ) -> Result<Arc<Server>, ToolError> {
        self.start_reaper();
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((name.to_string(), root.to_path_buf(), executor))
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(server) = &slot.server {
            if server.alive() {
                return Ok(server.clone());
            }
            tracing::warn!(pid = server.pid(), name, "language server died");
            slot.server = None;
            if slot.restarted {
                return Err(self.dead(name));
            }
            slot.restarted = true;
        } else if slot.started_once && slot.restarted {
            return Err(self.dead(name));
        }
        let json = |value: &Option<toml::Value>| {
            value
                .as_ref()
                .and_then(|v| serde_json::to_value(v).ok())
                .unwrap_or(Value::Null)
        };
        let started = Server::start(
            &self.launch,
            &config.command,
            root,
            executor,
            json(&config.settings),
            json(&config.initialization_options),
        )
        .await;
        slot.started_once = true;
        match started {
            Ok(server) => {
                slot.server = Some(server.clone());
                Ok(server)
            }
            Err(ServerError::Missing(program)) => Err(unavailable(format!(
                "language server {name} is configured for this file but its program \
                 `{program}` is not found on PATH; {}",
                self.configured()
            ))),
            Err(error) => {
                slot.restarted = true;
                Err(unavailable(format!(
                    "language server {name} did not start: {error}; {}",
                    self.configured()
                )))
            }
        }
    }

    fn dead(&self, name: &str) -> ToolError {
        unavailable(format!(
            "language server {name} died again after its restart; it is not started again \
             until dsh restarts; {}",
            self.configured()
        ))
    }

    /// The root of a server for `file`: the nearest directory from the file's up to
    /// `workspace` that holds one of `markers`; `workspace` when none does.
    fn root_for(file: &Path, workspace: &Path, markers: &[String]) -> PathBuf {
        let mut dir = file.parent();
        while let Some(current) = dir {
            if !current.starts_with(workspace) {
                break;
            }
            if markers.iter().any(|m| current.join(m).exists()) {
                return current.to_path_buf();
            }
            if current == workspace {
                break;
            }
            dir = current.parent();
        }
        workspace.to_path_buf()
    }

    async fn run_query(
        self: &Arc<Self>,
        workspace: &Path,
        workdir: &Path,
        executor: ExecutorKind,
        query: Query,
    ) -> Result<Reply, ToolError> {
        let workspace = workspace
            .canonicalize()
            .unwrap_or_else(|_| workspace.to_path_buf());
        let joined = workdir.join(&query.path);
        let file = joined
            .canonicalize()
            .map_err(|e| invalid(format!("cannot open {}: {e}", query.path)))?;
        if !file.starts_with(&workspace) {
            return Err(invalid(format!(
                "{} is outside the workspace {}",
                query.path,
                workspace.display()
            )));
        }
        let text = read_regular(&file)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .map_err(|e| invalid(format!("cannot read {}: {e}", query.path)))?;
        let extension = file
            .extension()
            .map(|e| config::normalize_extension(&e.to_string_lossy()))
            .unwrap_or_default();
        let Some((name, server_config)) = self
            .servers
            .iter()
            .find(|(_, s)| s.extensions.contains(&extension))
        else {
            let what = match extension.is_empty() {
                true => "files without an extension".to_string(),
                false => format!(".{extension} files"),
            };
            return Err(unavailable(format!(
                "no language server for {what}; {}{}",
                self.configured(),
                self.default_missing(&extension)
            )));
        };
        // The position (0-based, UTF-16) the query points at.
        let position = match query.op {
            Op::Symbols => None,
            Op::Definition | Op::References | Op::Hover => {
                let count = text.lines().count().max(1) as u32;
                if query.line == 0 || query.line > count {
                    return Err(invalid(format!(
                        "line {} is past the end of {} ({count} lines)",
                        query.line, query.path
                    )));
                }
                let line = text.lines().nth(query.line as usize - 1).unwrap_or("");
                let column = match &query.column {
                    Column::At(column) => {
                        let length = line.chars().count() as u32;
                        if *column == 0 || *column > length + 1 {
                            return Err(invalid(format!(
                                "column {column} is past the end of line {} ({length} \
                                 characters)",
                                query.line
                            )));
                        }
                        *column as usize - 1
                    }
                    Column::Symbol(symbol) => find_symbol(line, symbol).ok_or_else(|| {
                        invalid(format!(
                            "symbol `{symbol}` is not on line {} of {}: {}",
                            query.line,
                            query.path,
                            line.trim()
                        ))
                    })?,
                };
                Some((query.line - 1, utf16_of(line, column)))
            }
        };
        let root = Self::root_for(&file, &workspace, &server_config.root_markers);
        let uri = lsp_types::Url::from_file_path(&file)
            .map_err(|_| invalid(format!("{} cannot be a URI", file.display())))?
            .to_string();
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let attempt = async {
            // A server that dies during the query is restarted (once) and asked again.
            let mut tries = 0;
            loop {
                tries += 1;
                let server = self.server(name, server_config, &root, executor).await?;
                let answer = self
                    .ask(&server, query.op, &file, &uri, &extension, &text, position)
                    .await;
                server.touch();
                match answer {
                    Err(ServerError::Exited) if tries < 2 => continue,
                    Err(ServerError::Exited) => return Err(self.dead(name)),
                    Err(error) => {
                        return Err(ToolError::new(
                            ErrorCode::Internal,
                            format!("language server {name}: {error}"),
                        ))
                    }
                    Ok(result) => return Ok(result),
                }
            }
        };
        let (result, indexing) = tokio::time::timeout(timeout, attempt).await.map_err(|_| {
            ToolError::new(
                ErrorCode::Timeout,
                format!(
                    "language server {name} did not answer within {} ms",
                    timeout.as_millis()
                ),
            )
        })??;
        tracing::debug!(server = %name, op = ?query.op, %result, ?indexing, "language server answered");
        Ok(Reply {
            answer: self.answer(query.op, &result, &workspace),
            indexing: indexing.map(|indexing| {
                format!(
                    "the index is still building: {name} was still indexing the project \
                     after {} ms ({indexing}), so this answer may be partial; ask again later",
                    self.config.index_wait_ms
                )
            }),
        })
    }

    /// Syncs the document and sends the op's request; for `definition` and
    /// `references`, asks again once the server's indexing ended if it was indexing
    /// before or during the request, for at most `index_wait_ms`. The second value is
    /// the indexing still in progress at that bound.
    #[allow(clippy::too_many_arguments)]
    async fn ask(
        &self,
        server: &Server,
        op: Op,
        file: &Path,
        uri: &str,
        extension: &str,
        text: &str,
        position: Option<(u32, u32)>,
    ) -> Result<(Value, Option<String>), ServerError> {
        let (begun, before) = server.indexing();
        let result = self
            .ask_once(server, op, file, uri, extension, text, position)
            .await?;
        let waits = match op {
            Op::Definition | Op::References => self.config.index_wait_ms > 0,
            Op::Hover | Op::Symbols => false,
        };
        let (begun_since, now) = server.indexing();
        if !waits || (before.is_none() && now.is_none() && begun_since == begun) {
            return Ok((result, None));
        }
        let still = server
            .wait_indexed(Duration::from_millis(self.config.index_wait_ms))
            .await;
        let result = self
            .ask_once(server, op, file, uri, extension, text, position)
            .await?;
        Ok((result, still))
    }

    /// Syncs the document and sends the op's request.
    #[allow(clippy::too_many_arguments)]
    async fn ask_once(
        &self,
        server: &Server,
        op: Op,
        file: &Path,
        uri: &str,
        extension: &str,
        text: &str,
        position: Option<(u32, u32)>,
    ) -> Result<Value, ServerError> {
        server
            .sync_document(file, uri, language_id(extension), text)
            .await?;
        let (line, character) = position.unwrap_or((0, 0));
        let at = json!({
            "textDocument": { "uri": uri },
            "position": { "line": line, "character": character },
        });
        let (method, params) = match op {
            Op::Definition => ("textDocument/definition", at),
            Op::References => {
                let mut params = at;
                params["context"] = json!({ "includeDeclaration": true });
                ("textDocument/references", params)
            }
            Op::Hover => ("textDocument/hover", at),
            Op::Symbols => (
                "textDocument/documentSymbol",
                json!({ "textDocument": { "uri": uri } }),
            ),
        };
        server.request(method, params).await
    }

    /// The server's response as an [`Answer`].
    fn answer(&self, op: Op, result: &Value, workspace: &Path) -> Answer {
        match op {
            Op::Definition | Op::References => Answer::Locations(locations(result, workspace)),
            Op::Hover => Answer::Hover(hover_text(result)),
            Op::Symbols => Answer::Symbols(symbols(result)),
        }
    }
}

/// Locations (`Location`, `Location[]` or `LocationLink[]`), sorted and deduplicated,
/// with workspace-relative paths and their source lines.
fn locations(result: &Value, workspace: &Path) -> Vec<Location> {
    let items: Vec<&Value> = match result {
        Value::Array(items) => items.iter().collect(),
        Value::Object(_) => vec![result],
        _ => Vec::new(),
    };
    let mut files: HashMap<PathBuf, Vec<String>> = HashMap::new();
    let mut found = Vec::new();
    for item in items {
        let uri = item
            .get("uri")
            .or_else(|| item.get("targetUri"))
            .and_then(Value::as_str);
        let start = item
            .pointer("/range/start")
            .or_else(|| item.pointer("/targetSelectionRange/start"));
        let (Some(uri), Some(start)) = (uri, start) else {
            continue;
        };
        let Some(path) = uri_path(uri) else { continue };
        let line = start.get("line").and_then(Value::as_u64).unwrap_or(0) as usize;
        let character = start.get("character").and_then(Value::as_u64).unwrap_or(0) as u32;
        let lines = files.entry(path.clone()).or_insert_with(|| {
            read_regular(&path)
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .lines()
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        });
        let text = lines.get(line).cloned().unwrap_or_default();
        let shown = path
            .strip_prefix(workspace)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.display().to_string());
        found.push(Location {
            path: shown,
            line: line as u32 + 1,
            column: chars_of(&text, character) + 1,
            text: text.trim_end().to_string(),
        });
    }
    found.sort_by(|a, b| (&a.path, a.line, a.column).cmp(&(&b.path, b.line, b.column)));
    found.dedup();
    found
}

/// An outline from `DocumentSymbol[]` (nested) or `SymbolInformation[]` (flat: nesting
/// found from which ranges contain which).
fn symbols(result: &Value) -> Vec<Symbol> {
    let Some(items) = result.as_array() else {
        return Vec::new();
    };
    let mut outline = Vec::new();
    if items.iter().any(|item| item.get("location").is_some()) {
        // (start, end, symbol) by start.
        let mut flat: Vec<Ranged> = items
            .iter()
            .filter_map(|item| {
                let range = item.pointer("/location/range")?;
                let point = |p: &str| {
                    (
                        range
                            .pointer(&format!("/{p}/line"))
                            .and_then(Value::as_u64)
                            .unwrap_or(0),
                        range
                            .pointer(&format!("/{p}/character"))
                            .and_then(Value::as_u64)
                            .unwrap_or(0),
                    )
                };
                let (start, end) = (point("start"), point("end"));
                Some((
                    start,
                    end,
                    Symbol {
                        name: item.get("name")?.as_str()?.to_string(),
                        kind: kind_name(item.get("kind").and_then(Value::as_u64).unwrap_or(0)),
                        depth: 0,
                        line: start.0 as u32 + 1,
                        column: start.1 as u32 + 1,
                    },
                ))
            })
            .collect();
        flat.sort_by_key(|(start, end, _)| (*start, std::cmp::Reverse(*end)));
        let mut open: Vec<(u64, u64)> = Vec::new();
        for (_, end, mut symbol) in flat {
            while open.last().is_some_and(|last| *last < end) {
                open.pop();
            }
            symbol.depth = open.len() as u32;
            open.push(end);
            outline.push(symbol);
        }
        return outline;
    }
    fn walk(items: &[Value], depth: u32, outline: &mut Vec<Symbol>) {
        for item in items {
            let at = item
                .pointer("/selectionRange/start")
                .or_else(|| item.pointer("/range/start"));
            let line = at
                .and_then(|a| a.get("line"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let character = at
                .and_then(|a| a.get("character"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            outline.push(Symbol {
                name: item
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                kind: kind_name(item.get("kind").and_then(Value::as_u64).unwrap_or(0)),
                depth,
                line: line as u32 + 1,
                column: character as u32 + 1,
            });
            if let Some(children) = item.get("children").and_then(Value::as_array) {
                walk(children, depth + 1, outline);
            }
        }
    }
    walk(items, 0, &mut outline);
    outline
}

impl LspProvider for Arc<LspService> {
    async fn query(
        &self,
        workspace: &Path,
        workdir: &Path,
        executor: ExecutorKind,
        query: Query,
    ) -> Result<Reply, ToolError> {
        self.run_query(workspace, workdir, executor, query).await
    }
}

/// The bytes of the regular file at `path`, opened without blocking (a FIFO, a socket or a
/// device swapped in for a file is refused by what was opened, never waited on).
fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let mut file = std::fs::File::from(rustix::fs::open(path, flags, Mode::empty())?);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a directory, a FIFO, a socket or a device)",
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_or_a_directory_named_as_a_file_is_refused_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("swapped.py");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .unwrap();
        // No writer ever comes: a blocking open would never return.
        let error = read_regular(&fifo).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
        assert!(read_regular(dir.path()).is_err());
        std::fs::write(dir.path().join("ok.py"), "x = 1\n").unwrap();
        assert_eq!(read_regular(&dir.path().join("ok.py")).unwrap(), b"x = 1\n");
    }

    #[test]
    fn a_symbol_is_found_as_a_whole_word_by_its_character_column() {
        assert_eq!(
            find_symbol("let total = sub_total + total", "total"),
            Some(4)
        );
        assert_eq!(find_symbol("é = total", "total"), Some(4));
        assert_eq!(find_symbol("subtotal", "total"), None);
        assert_eq!(find_symbol("x", ""), None);
    }

    #[test]
    fn columns_convert_between_characters_and_utf16() {
        let line = "a😀b";
        assert_eq!(utf16_of(line, 2), 3);
        assert_eq!(chars_of(line, 3), 2);
    }

    #[test]
    fn flat_symbols_nest_by_their_ranges() {
        let range = |a: u64, b: u64| json!({ "start": { "line": a, "character": 0 }, "end": { "line": b, "character": 0 } });
        let result = json!([
            { "name": "A", "kind": 5, "location": { "uri": "file:///x.py", "range": range(0, 5) } },
            { "name": "m", "kind": 6, "location": { "uri": "file:///x.py", "range": range(1, 3) } },
            { "name": "f", "kind": 12, "location": { "uri": "file:///x.py", "range": range(6, 8) } },
        ]);
        let outline = symbols(&result);
        let depths: Vec<(String, u32)> =
            outline.iter().map(|s| (s.name.clone(), s.depth)).collect();
        assert_eq!(
            depths,
            vec![("A".into(), 0), ("m".into(), 1), ("f".into(), 0)]
        );
        assert_eq!(outline[1].kind, "method");
    }

    #[test]
    fn markdown_hover_is_plain_text_without_fences() {
        let hover = json!({ "contents": { "kind": "markdown", "value": "```python\ndef f(x: int)\n```\nDoc." } });
        assert_eq!(hover_text(&hover), "def f(x: int)\nDoc.");
    }
}
