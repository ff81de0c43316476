//! The registry: the declaration layer. Owns the catalog of tools (every tool's manual,
//! its compiled argument validator and the plugin that serves it), the guards and
//! result filters by name, and of every plugin the version serving and the version last
//! refused beside it.
//!
//! Rules kept here: tool names are 1–128 characters of `[A-Za-z0-9_-]` and unique
//! across plugins; every input schema is a valid JSON Schema describing an object;
//! every call's arguments are validated against it before any plugin runs. A tool that
//! declares an output schema (a valid JSON Schema describing an object, compiled once
//! when the plugin registers) has its structured output checked against it
//! ([`RegisteredTool::check_output`]). The catalog is an immutable snapshot swapped
//! whole, so a call sees one consistent version.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::SystemTime;

use crate::call::{CallResult, ContentItem};
use crate::engine::grants::GrantsView;
use crate::engine::plugin::{Plugin, PluginKind, PluginSource, ToolSpec};
use crate::error::{ErrorCode, ToolError};
use crate::glob::glob_match;

/// Why a plugin's tools could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("tool name {0:?} is not 1-128 characters of [A-Za-z0-9_-]")]
    BadName(String),
    #[error("tool {tool}: input schema is not valid JSON Schema: {reason}")]
    BadSchema { tool: String, reason: String },
    #[error("tool {tool}: output schema is not valid JSON Schema: {reason}")]
    BadOutputSchema { tool: String, reason: String },
    #[error("tool {tool} is already provided by plugin {other}")]
    Collision { tool: String, other: String },
    #[error("the plugin declares no tools")]
    NoTools,
}

/// A registered tool: its manual, its validators and the plugin version serving it.
pub struct RegisteredTool {
    pub spec: ToolSpec,
    pub plugin: Arc<Plugin>,
    validator: Arc<jsonschema::Validator>,
    /// Its output schema, when it declares one.
    output: Option<Arc<OutputSchema>>,
}

/// A tool's declared output schema: the JSON (for `tools/list`) and its validator.
pub struct OutputSchema {
    pub schema: serde_json::Value,
    validator: jsonschema::Validator,
}

/// Up to five schema violations of `value`, each naming where it is. Public only for the
/// fuzz targets (fuzz/).
#[doc(hidden)]
pub fn violations(validator: &jsonschema::Validator, value: &serde_json::Value) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(5)
        .map(|error| {
            let at = error.instance_path().to_string();
            if at.is_empty() {
                error.to_string()
            } else {
                format!("at {at}: {error}")
            }
        })
        .collect()
}

impl RegisteredTool {
    /// Checks `args` against the tool's schema; the error names the offending field.
    pub fn validate(&self, args: &serde_json::Value) -> Result<(), ToolError> {
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let problems = violations(&self.validator, args);
        if problems.is_empty() {
            return Ok(());
        }
        Err(ToolError::new(
            ErrorCode::InvalidArguments,
            format!(
                "invalid arguments for {}: {}",
                self.spec.name,
                problems.join("; ")
            ),
        ))
    }
}

impl RegisteredTool {
    /// The tool's output schema, when it declares one.
    pub fn output_schema(&self) -> Option<&serde_json::Value> {
        self.output.as_ref().map(|output| &output.schema)
    }

    /// Checks a finished call's structured output against the tool's output schema. A
    /// failed result passes unchanged. A tool that declares a schema must return
    /// structured output that matches it, else the result becomes `INVALID_OUTPUT`
    /// naming the violations (the tool ran; its output is withheld). Structured output
    /// with no text item gets its JSON text as one, as MCP advises for older clients.
    pub fn check_output(&self, result: CallResult) -> CallResult {
        checked_output(&self.spec.name, self.output.as_deref(), result)
    }
}

/// [`RegisteredTool::check_output`] of tool `tool` with its output schema.
fn checked_output(tool: &str, output: Option<&OutputSchema>, mut result: CallResult) -> CallResult {
    if result.is_error() {
        return result;
    }
    let invalid = |why: String| {
        CallResult::failed(ToolError::new(
            ErrorCode::InvalidOutput,
            format!("the structured output of {tool} does not match its output schema: {why}"),
        ))
    };
    if let Some(output) = output {
        let Some(structured) = &result.structured else {
            return invalid("it returned none".into());
        };
        let problems = violations(&output.validator, structured);
        if !problems.is_empty() {
            return invalid(problems.join("; "));
        }
    }
    if let Some(structured) = &result.structured {
        if !result
            .content
            .iter()
            .any(|item| matches!(item, ContentItem::Text(_)))
        {
            result
                .content
                .insert(0, ContentItem::Text(structured.to_string()));
        }
    }
    result
}

/// Whether a version of a plugin serves or was refused. Serialized (and printed) as
/// `serving` and `refused`: `dsh plugins --json` and the control socket carry these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginState {
    /// It serves: its tools are in the catalog (or it runs as a guard or filter).
    Serving,
    /// It failed its checks; whatever served before under its name keeps serving.
    Refused,
}

impl PluginState {
    pub fn as_str(self) -> &'static str {
        match self {
            PluginState::Serving => "serving",
            PluginState::Refused => "refused",
        }
    }
}

impl std::fmt::Display for PluginState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that widths and alignment in format strings apply.
        f.pad(self.as_str())
    }
}

/// A version of a plugin that was refused, and why. Kept beside the version serving
/// under the same name (if any) until the plugin is removed or a different version
/// serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Where the refused version came from (`embedded` or its path).
    pub source: String,
    /// SHA-256 of the refused bytes, hex (empty when they could not be read).
    pub digest: String,
    /// Seconds since the Unix epoch at which it was refused.
    pub refused_at: u64,
    pub reason: String,
    /// The contract version it is built against, when it could be read (it compiled).
    pub contract: Option<String>,
    /// What it imports, when that could be read (it compiled).
    pub imports: Vec<String>,
}

impl Refusal {
    /// A refusal made now, with the contract version and imports of the component
    /// when it was compiled (read back by its digest).
    pub fn new(source: &PluginSource, digest: &str, reason: String) -> Self {
        let facts = crate::engine::plugin::ComponentFacts::of(digest).unwrap_or_default();
        Refusal {
            source: source.to_string(),
            digest: digest.into(),
            refused_at: unix_seconds(SystemTime::now()),
            reason,
            contract: facts.contract,
            imports: facts.imports,
        }
    }
}

/// What `dsh plugins` shows of one plugin version: a row of its listing. A plugin with
/// a version serving and a newer version refused has two rows, the serving one first.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PluginStatus {
    pub name: String,
    /// `tool`, `guard` or `result-filter` (unknown for a refused version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<PluginKind>,
    /// The contract version it is built against (`0.1.0`, `0.2.0`; for a refused
    /// version, the one it names, unknown when it did not compile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    pub source: String,
    pub digest: String,
    /// Seconds since the Unix epoch at which this version was loaded (or refused).
    pub loaded_at: u64,
    pub status: PluginState,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub tools: Vec<String>,
    /// What the serving version may reach (none for a refused one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants: Option<GrantsView>,
    /// What the version imports (a refused one: empty when it did not compile).
    #[serde(default)]
    pub imports: Vec<String>,
    /// Calls running on the serving version now.
    pub calls_in_flight: usize,
    /// Calls still running on versions this one replaced (they finish there).
    pub calls_in_flight_on_old_versions: usize,
}

impl PluginStatus {
    /// The row of the version of `plugin` serving, without its calls in flight. One whose
    /// `files` directories were withheld (`Grants::withheld`) is shown refused, with why:
    /// its tools stay listed only to answer each call with that reason.
    fn serving(plugin: &Plugin) -> Self {
        PluginStatus {
            name: plugin.name.to_string(),
            kind: Some(plugin.kind()),
            contract: Some(plugin.version.to_string()),
            source: plugin.source.to_string(),
            digest: plugin.digest.clone(),
            loaded_at: unix_seconds(plugin.loaded_at),
            status: match plugin.grants.withheld {
                Some(_) => PluginState::Refused,
                None => PluginState::Serving,
            },
            reason: plugin.grants.withheld.clone(),
            tools: plugin.specs.iter().map(|spec| spec.name.clone()).collect(),
            grants: Some(plugin.grants.view.clone()),
            imports: plugin.imports.clone(),
            calls_in_flight: 0,
            calls_in_flight_on_old_versions: 0,
        }
    }

    /// The row of a refused version of plugin `name`.
    fn refused(name: &str, refusal: &Refusal) -> Self {
        PluginStatus {
            name: name.into(),
            kind: None,
            contract: refusal.contract.clone(),
            source: refusal.source.clone(),
            digest: refusal.digest.clone(),
            loaded_at: refusal.refused_at,
            status: PluginState::Refused,
            reason: Some(refusal.reason.clone()),
            tools: Vec::new(),
            grants: None,
            imports: refusal.imports.clone(),
            calls_in_flight: 0,
            calls_in_flight_on_old_versions: 0,
        }
    }
}

/// What the registry knows of one plugin name: the version serving, the version last
/// refused, or both (a refused new version leaves the old one serving).
#[derive(Clone, Default)]
struct PluginEntry {
    serving: Option<Arc<Plugin>>,
    refused: Option<Refusal>,
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One consistent version of everything registered.
#[derive(Default)]
pub struct Catalog {
    tools: BTreeMap<String, Arc<RegisteredTool>>,
    /// Guards and result filters by plugin name.
    stages: BTreeMap<String, Arc<Plugin>>,
    /// Every plugin name loaded or refused.
    plugins: BTreeMap<String, PluginEntry>,
}

impl Catalog {
    /// The version of plugin `name` serving in this catalog.
    fn serving(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins.get(name)?.serving.clone()
    }

    /// The guard or result filter `name`, if one of that kind serves.
    pub fn stage(&self, name: &str, kind: PluginKind) -> Option<&Arc<Plugin>> {
        self.stages.get(name).filter(|plugin| plugin.kind() == kind)
    }

    /// The tool `name` if the scope may see it.
    pub fn resolve(&self, name: &str, scope: &Scope) -> Result<Arc<RegisteredTool>, ToolError> {
        match self.tools.get(name) {
            Some(tool) if scope.sees(name) => Ok(tool.clone()),
            _ => Err(ToolError::new(
                ErrorCode::UnknownTool,
                self.unknown_tool_message(name, scope),
            )),
        }
    }

    /// Why there is no tool `name`: none by that name, and, when a plugin whose name is
    /// the tool's or its prefix (`terminal` for `terminal_open`) was refused, that
    /// plugin and why (a refused version's tools are not known: it never described them).
    fn unknown_tool_message(&self, name: &str, scope: &Scope) -> String {
        let unknown = format!("no tool named {name:?}");
        if !scope.sees(name) {
            return unknown;
        }
        let names_it = |plugin: &str| {
            name == plugin
                || name
                    .strip_prefix(plugin)
                    .is_some_and(|rest| rest.starts_with('_'))
        };
        let refused = self
            .plugins
            .get(name)
            .map(|entry| (name, entry))
            .filter(|(_, entry)| entry.refused.is_some())
            .or_else(|| {
                self.plugins
                    .iter()
                    .filter(|(plugin, entry)| entry.refused.is_some() && names_it(plugin))
                    // The longest name that prefixes it.
                    .max_by_key(|(plugin, _)| plugin.len())
                    .map(|(plugin, entry)| (plugin.as_str(), entry))
            });
        let Some((plugin, entry)) = refused else {
            return unknown;
        };
        let Some(refusal) = &entry.refused else {
            return unknown;
        };
        if entry.serving.is_some() {
            format!(
                "{unknown}; a new version of plugin {plugin} ({}) was refused, and the \
                 version serving has no such tool: {}",
                refusal.source, refusal.reason
            )
        } else {
            format!(
                "{unknown}; plugin {plugin} ({}) was refused, so its tools are not \
                 served: {}",
                refusal.source, refusal.reason
            )
        }
    }
}

/// Which tools a scope sees.
#[derive(Debug, Clone)]
pub struct Scope {
    pub name: String,
    /// Tool name globs; `None` sees every tool.
    patterns: Option<Vec<String>>,
}

impl Scope {
    fn sees(&self, tool: &str) -> bool {
        match &self.patterns {
            None => true,
            Some(patterns) => patterns.iter().any(|p| glob_match(p, tool)),
        }
    }
}

/// The registry: a catalog snapshot that changes only by whole swaps.
pub struct Registry {
    catalog: RwLock<Arc<Catalog>>,
    /// `[scopes]` of the configuration in force (replaced when `dsh.toml` changes).
    scopes: RwLock<BTreeMap<String, Vec<String>>>,
    changes: tokio::sync::broadcast::Sender<()>,
    /// Versions swapped out or removed; alive while calls that started on them run.
    retired: Mutex<Vec<Weak<Plugin>>>,
}

/// The scope every caller gets unless told otherwise; it sees every tool unless
/// `dsh.toml` narrows it.
pub const DEFAULT_SCOPE: &str = "default";

impl Registry {
    pub fn new(scopes: BTreeMap<String, Vec<String>>) -> Self {
        Registry {
            catalog: RwLock::default(),
            scopes: RwLock::new(scopes),
            changes: tokio::sync::broadcast::channel(16).0,
            retired: Mutex::default(),
        }
    }

    /// Fires after every change of the tools (a tool plugin added, swapped or removed;
    /// not for guards and result filters, which no client lists).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<()> {
        self.changes.subscribe()
    }

    /// The current catalog; a call holds it for its whole life.
    pub fn snapshot(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap().clone()
    }

    /// The named scope, or an error naming the scopes there are.
    pub fn scope(&self, name: &str) -> Result<Scope, ToolError> {
        let scopes = self.scopes.read().unwrap();
        match scopes.get(name) {
            Some(patterns) => Ok(Scope {
                name: name.into(),
                patterns: Some(patterns.clone()),
            }),
            None if name == DEFAULT_SCOPE => Ok(Scope {
                name: name.into(),
                patterns: None,
            }),
            None => {
                let mut known: Vec<&str> = scopes.keys().map(String::as_str).collect();
                if !known.contains(&DEFAULT_SCOPE) {
                    known.insert(0, DEFAULT_SCOPE);
                }
                Err(ToolError::new(
                    ErrorCode::InvalidArguments,
                    format!("unknown scope {name:?} (known: {})", known.join(", ")),
                ))
            }
        }
    }

    /// Replaces the scopes (`dsh.toml` changed); clients hear of it as a change of the
    /// tools, since what a scope sees may have changed.
    pub fn set_scopes(&self, scopes: BTreeMap<String, Vec<String>>) {
        let mut current = self.scopes.write().unwrap();
        if *current == scopes {
            return;
        }
        *current = scopes;
        drop(current);
        let _ = self.changes.send(());
    }

    /// Registers every tool of `plugin`, replacing any earlier version of the same
    /// plugin. All or nothing: on error the catalog is unchanged.
    pub fn register(&self, plugin: Arc<Plugin>) -> Result<(), RegisterError> {
        let kind = plugin.kind();
        if kind == PluginKind::Tool && plugin.specs.is_empty() {
            return Err(RegisterError::NoTools);
        }
        let mut compiled = Vec::with_capacity(plugin.specs.len());
        for spec in &plugin.specs {
            let output = check_output_schema(spec)?.map(Arc::new);
            compiled.push((spec.clone(), (Arc::new(check_spec(spec)?), output)));
        }
        let mut guard = self.catalog.write().unwrap();
        let mut tools = guard.tools.clone();
        let replaced = guard.serving(&plugin.name);
        let before = tools.len();
        tools.retain(|_, tool| tool.plugin.name != plugin.name);
        // A guard or filter changes no tool: clients hear only of tool changes.
        let tools_changed = kind == PluginKind::Tool || tools.len() != before;
        let mut stages = guard.stages.clone();
        stages.remove(&*plugin.name);
        if kind != PluginKind::Tool {
            stages.insert(plugin.name.to_string(), plugin.clone());
        }
        for (spec, _) in &compiled {
            if let Some(other) = tools.get(&spec.name) {
                return Err(RegisterError::Collision {
                    tool: spec.name.clone(),
                    other: other.plugin.name.to_string(),
                });
            }
        }
        for (spec, (validator, output)) in compiled {
            tools.insert(
                spec.name.clone(),
                Arc::new(RegisteredTool {
                    spec,
                    validator,
                    output,
                    plugin: plugin.clone(),
                }),
            );
        }
        let mut plugins = guard.plugins.clone();
        let entry = plugins.entry(plugin.name.to_string()).or_default();
        // A new version answers the refusal of the one before it; the same version
        // linked again (its grants changed) leaves the refusal of a newer file standing.
        if entry
            .serving
            .as_ref()
            .is_none_or(|serving| serving.digest != plugin.digest)
        {
            entry.refused = None;
        }
        entry.serving = Some(plugin.clone());
        *guard = Arc::new(Catalog {
            tools,
            stages,
            plugins,
        });
        drop(guard);
        self.retire(replaced);
        if tools_changed {
            // No receiver (no MCP client yet) is not an error.
            let _ = self.changes.send(());
        }
        Ok(())
    }

    /// Records a refused version of plugin `name`: its version serving, if any, keeps
    /// serving and is listed as before, with this refusal beside it (replacing an earlier
    /// refusal).
    pub fn record_refusal(&self, name: &str, refusal: Refusal) {
        let mut guard = self.catalog.write().unwrap();
        let mut plugins = guard.plugins.clone();
        plugins.entry(name.to_string()).or_default().refused = Some(refusal);
        *guard = Arc::new(Catalog {
            tools: guard.tools.clone(),
            stages: guard.stages.clone(),
            plugins,
        });
    }

    /// Removes every tool of plugin `name` (its file was deleted). False when it had none.
    pub fn remove(&self, name: &str) -> bool {
        let mut guard = self.catalog.write().unwrap();
        let removed_version = guard.serving(name);
        let mut tools = guard.tools.clone();
        let before = tools.len();
        tools.retain(|_, tool| &*tool.plugin.name != name);
        let mut stages = guard.stages.clone();
        let removed_stage = stages.remove(name).is_some();
        let mut plugins = guard.plugins.clone();
        let had_status = plugins.remove(name).is_some();
        let removed = tools.len() != before;
        *guard = Arc::new(Catalog {
            tools,
            stages,
            plugins,
        });
        drop(guard);
        self.retire(removed_version);
        if removed {
            let _ = self.changes.send(());
        }
        removed || removed_stage || had_status
    }

    /// True when the version of plugin `name` with this SHA-256 is the one serving, or
    /// the one last refused: loading it again would change nothing.
    pub fn has_version(&self, name: &str, digest: &str) -> bool {
        let catalog = self.snapshot();
        catalog.plugins.get(name).is_some_and(|entry| {
            entry
                .serving
                .as_ref()
                .is_some_and(|plugin| plugin.digest == digest)
                || entry
                    .refused
                    .as_ref()
                    .is_some_and(|refusal| refusal.digest == digest)
        })
    }

    /// The manuals a scope may see, sorted by name.
    pub fn schemas(&self, scope: &Scope) -> Vec<ToolSpec> {
        self.snapshot()
            .tools
            .values()
            .filter(|tool| scope.sees(&tool.spec.name))
            .map(|tool| tool.spec.clone())
            .collect()
    }

    /// Every plugin's rows, sorted by name: the version serving (with the calls in
    /// flight on it and on the versions it replaced), then the version refused, if any.
    pub fn plugins(&self) -> Vec<PluginStatus> {
        let catalog = self.snapshot();
        let mut retired = self.retired.lock().unwrap();
        retired.retain(|version| version.strong_count() > 0);
        let old_versions: Vec<Arc<Plugin>> = retired.iter().filter_map(Weak::upgrade).collect();
        drop(retired);
        let mut rows = Vec::with_capacity(catalog.plugins.len());
        for (name, entry) in &catalog.plugins {
            if let Some(plugin) = &entry.serving {
                let mut row = PluginStatus::serving(plugin);
                row.calls_in_flight = plugin.calls_in_flight();
                row.calls_in_flight_on_old_versions = old_versions
                    .iter()
                    .filter(|old| old.name == plugin.name)
                    .map(|old| old.calls_in_flight())
                    .sum();
                rows.push(row);
            }
            if let Some(refusal) = &entry.refused {
                rows.push(PluginStatus::refused(name, refusal));
            }
        }
        rows
    }

    /// Keeps track of a version taken out of service while calls may still run on it.
    fn retire(&self, version: Option<Arc<Plugin>>) {
        if let Some(version) = version {
            self.retired.lock().unwrap().push(Arc::downgrade(&version));
        }
    }
}

/// A valid tool name: 1–128 characters of `[A-Za-z0-9_-]`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `spec`'s argument validator, or why its name or input schema is refused. Public only
/// for the fuzz targets (fuzz/).
#[doc(hidden)]
pub fn check_spec(spec: &ToolSpec) -> Result<jsonschema::Validator, RegisterError> {
    if !valid_tool_name(&spec.name) {
        return Err(RegisterError::BadName(spec.name.clone()));
    }
    let bad = |reason: String| RegisterError::BadSchema {
        tool: spec.name.clone(),
        reason,
    };
    if spec.input_schema.is_null() {
        return Err(bad(format!(
            "not JSON: {:?}",
            truncate(&spec.input_schema_text, 80)
        )));
    }
    if spec.input_schema.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(bad(
            "the arguments schema must have \"type\": \"object\"".into()
        ));
    }
    // Building the validator checks the schema against its meta-schema first.
    jsonschema::validator_for(&spec.input_schema).map_err(|e| bad(e.to_string()))
}

/// The tool's output schema compiled, when it declares one: JSON, `"type": "object"`
/// (MCP's structured content is an object), valid against its meta-schema.
fn check_output_schema(spec: &ToolSpec) -> Result<Option<OutputSchema>, RegisterError> {
    let Some(schema) = &spec.output_schema else {
        return Ok(None);
    };
    let bad = |reason: String| RegisterError::BadOutputSchema {
        tool: spec.name.clone(),
        reason,
    };
    if schema.is_null() {
        let text = spec.output_schema_text.as_deref().unwrap_or_default();
        return Err(bad(format!("not JSON: {:?}", truncate(text, 80))));
    }
    if schema.get("type").and_then(|t| t.as_str()) != Some("object") {
        return Err(bad(
            "the output schema must have \"type\": \"object\"".into()
        ));
    }
    let validator = jsonschema::validator_for(schema).map_err(|e| bad(e.to_string()))?;
    Ok(Some(OutputSchema {
        schema: schema.clone(),
        validator,
    }))
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_rule() {
        assert!(valid_tool_name("bash"));
        assert!(valid_tool_name("job_list-2"));
        assert!(valid_tool_name(&"a".repeat(128)));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"a".repeat(129)));
        assert!(!valid_tool_name("has space"));
        assert!(!valid_tool_name("dot.ted"));
    }

    fn spec(schema: &str) -> ToolSpec {
        ToolSpec {
            name: "t".into(),
            description: String::new(),
            input_schema: serde_json::from_str(schema).unwrap_or(serde_json::Value::Null),
            input_schema_text: schema.into(),
            idempotent: false,
            output_budget: None,
            output_schema: None,
            output_schema_text: None,
        }
    }

    fn tool_with_output(schema: &str) -> Result<OutputSchema, RegisterError> {
        let mut spec = spec(r#"{"type":"object"}"#);
        spec.output_schema = Some(serde_json::from_str(schema).unwrap_or_default());
        spec.output_schema_text = Some(schema.into());
        Ok(check_output_schema(&spec)?.unwrap())
    }

    #[test]
    fn output_schemas_are_checked_when_registered() {
        for bad in [
            "{nope",
            r#"{"type":"array"}"#,
            r#"{"type":"object","properties":{"a":{"type":"nonsense"}}}"#,
        ] {
            assert!(
                matches!(
                    tool_with_output(bad),
                    Err(RegisterError::BadOutputSchema { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn structured_output_is_checked_against_the_output_schema() {
        let schema = tool_with_output(
            r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
        )
        .unwrap();
        let check = |result| checked_output("t", Some(&schema), result);
        let with = |structured: Option<serde_json::Value>| CallResult {
            content: Vec::new(),
            structured,
            error: None,
            full_output_path: None,
        };
        let good = check(with(Some(serde_json::json!({"n": 3}))));
        assert!(!good.is_error(), "{good:?}");
        assert_eq!(
            good.content,
            [ContentItem::Text(r#"{"n":3}"#.into())],
            "its JSON as text"
        );
        let wrong = check(with(Some(serde_json::json!({"n": "three"}))));
        let error = wrong.error.unwrap();
        assert_eq!(error.code, ErrorCode::InvalidOutput);
        assert!(error.message.contains("at /n"), "{}", error.message);
        let missing = check(with(None)).error.unwrap();
        assert!(
            missing.message.contains("returned none"),
            "{}",
            missing.message
        );
        let failed = CallResult::failed(ToolError::new(ErrorCode::Timeout, "t"));
        assert_eq!(check(failed.clone()), failed, "a failure passes as it is");
    }

    #[test]
    fn plugin_states_serialize_and_print_as_their_words() {
        assert_eq!(
            serde_json::to_value(PluginState::Serving).unwrap(),
            "serving"
        );
        assert_eq!(
            serde_json::from_value::<PluginState>("refused".into()).unwrap(),
            PluginState::Refused
        );
        assert_eq!(format!("[{:<8}]", PluginState::Serving), "[serving ]");
    }

    fn refusal(digest: &str, reason: &str) -> Refusal {
        Refusal::new(
            &PluginSource::Path("/plugins/p.wasm".into()),
            digest,
            reason.into(),
        )
    }

    #[test]
    fn a_refused_new_plugin_is_listed_once_with_its_latest_reason_until_removed() {
        let registry = Registry::new(BTreeMap::new());
        registry.record_refusal("p", refusal("aaa", "first"));
        registry.record_refusal("p", refusal("bbb", "second"));
        let rows = registry.plugins();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].name, "p");
        assert_eq!(rows[0].status, PluginState::Refused);
        assert_eq!(rows[0].reason.as_deref(), Some("second"));
        assert_eq!(rows[0].digest, "bbb");
        assert_eq!(rows[0].source, "/plugins/p.wasm");
        assert!(registry.has_version("p", "bbb"));
        assert!(!registry.has_version("p", "aaa"));
        assert!(!registry.has_version("q", "bbb"));
        assert!(registry.remove("p"));
        assert!(registry.plugins().is_empty());
        assert!(!registry.remove("p"));
    }

    /// The embedded `jobs` plugin, loaded (compiled, linked, described) for real.
    async fn jobs_plugin() -> Arc<Plugin> {
        let config = crate::config::Config::default();
        let spill = tempfile::tempdir().unwrap();
        let services =
            crate::services::Services::new(&config.services(), spill.path().into()).unwrap();
        let runtime = Arc::new(crate::engine::Runtime::new(services, None).unwrap());
        let jobs = crate::engine::embedded::component("jobs").unwrap();
        let plugin = Plugin::load(
            &runtime,
            "jobs",
            PluginSource::Embedded,
            jobs,
            Default::default(),
        )
        .await
        .unwrap();
        Arc::new(plugin)
    }

    #[tokio::test]
    async fn a_refused_version_is_listed_beside_the_version_serving_and_the_serving_one_stays() {
        let registry = Registry::new(BTreeMap::new());
        let jobs = jobs_plugin().await;
        registry.register(jobs.clone()).unwrap();
        registry.record_refusal("jobs", refusal("bad", "broken"));
        let rows = registry.plugins();
        let states: Vec<(&str, PluginState)> =
            rows.iter().map(|r| (r.name.as_str(), r.status)).collect();
        assert_eq!(
            states,
            [
                ("jobs", PluginState::Serving),
                ("jobs", PluginState::Refused)
            ]
        );
        assert_eq!(rows[0].digest, jobs.digest);
        assert_eq!(rows[0].tools, ["job_list", "job_output", "job_kill"]);
        assert_eq!(rows[1].reason.as_deref(), Some("broken"));
        // Both versions are known: neither is loaded again for nothing.
        assert!(registry.has_version("jobs", &jobs.digest));
        assert!(registry.has_version("jobs", "bad"));
        // The version serving still serves its tools.
        let scope = registry.scope(DEFAULT_SCOPE).unwrap();
        assert!(registry.snapshot().resolve("job_list", &scope).is_ok());
        // Linked again (its grants changed), it keeps the refusal beside it.
        registry.register(jobs.clone()).unwrap();
        assert_eq!(registry.plugins().len(), 2);
        // Removed (its file deleted), both go.
        assert!(registry.remove("jobs"));
        assert!(registry.plugins().is_empty());
        assert!(registry.snapshot().resolve("job_list", &scope).is_err());
    }

    /// `jobs` under another digest: a new version of it as far as the registry can tell.
    async fn another_version_of(plugin: &Plugin) -> Arc<Plugin> {
        let mut other = jobs_plugin().await;
        Arc::get_mut(&mut other).unwrap().digest = format!("not-{}", plugin.digest);
        other
    }

    #[tokio::test]
    async fn a_new_version_serving_after_a_refused_one_clears_the_refusal() {
        let registry = Registry::new(BTreeMap::new());
        let first = jobs_plugin().await;
        registry.register(first.clone()).unwrap();
        registry.record_refusal("jobs", refusal("bad", "broken"));
        let second = another_version_of(&first).await;
        registry.register(second.clone()).unwrap();
        let rows = registry.plugins();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].status, PluginState::Serving);
        assert_eq!(rows[0].digest, second.digest);
        // The refused bytes written again are loaded (and refused) again, not skipped.
        assert!(!registry.has_version("jobs", "bad"));
    }

    #[tokio::test]
    async fn a_plugin_that_serves_after_being_refused_is_listed_as_serving_only() {
        let registry = Registry::new(BTreeMap::new());
        registry.record_refusal("jobs", refusal("bad", "broken"));
        registry.register(jobs_plugin().await).unwrap();
        let rows = registry.plugins();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].status, PluginState::Serving);
        assert!(!registry.has_version("jobs", "bad"));
    }

    #[test]
    fn schemas_are_checked() {
        assert!(check_spec(&spec(r#"{"type":"object"}"#)).is_ok());
        assert!(matches!(
            check_spec(&spec("{nope")),
            Err(RegisterError::BadSchema { .. })
        ));
        assert!(matches!(
            check_spec(&spec(r#"{"type":"string"}"#)),
            Err(RegisterError::BadSchema { .. })
        ));
        assert!(matches!(
            check_spec(&spec(
                r#"{"type":"object","properties":{"a":{"type":"nonsense"}}}"#
            )),
            Err(RegisterError::BadSchema { .. })
        ));
    }
}
