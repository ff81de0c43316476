//! `[subagent]` in `dsh.toml`: which model subagents ask (the client's own, or a model
//! endpoint the operator configures, chosen per scope), how long and how far a subagent
//! may run, how much it may ask of a model, and how much of its transcript is kept.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::models::ModelConfig;

/// The model name that means the caller's client's own model (MCP sampling).
pub const CLIENT_MODEL: &str = "client";

/// `[subagent.scopes.NAME]`: the model a scope's subagents ask, and the others its
/// callers may name.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ScopeModels {
    /// Its subagents' model when a call names none (`client` or a configured model);
    /// none: `[subagent] model`.
    pub model: Option<String>,
    /// The models a call in this scope may name besides that one.
    pub allow: Vec<String>,
}

/// Subagents (the `subagent` tool).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentConfig {
    /// The model subagents ask when their scope names none: `client` (the caller's
    /// client's own, through MCP sampling) or a name of `models`.
    pub model: String,
    /// The operator's model endpoints, by name.
    pub models: BTreeMap<String, ModelConfig>,
    /// Per scope: its model and the others its callers may name.
    pub scopes: BTreeMap<String, ScopeModels>,
    /// The most tokens (in and out) one subagent may use on an operator's model; the run
    /// that passes it ends with `LIMIT_EXCEEDED`. 0: no limit.
    pub max_tokens_per_subagent: u64,
    /// The most tokens one owner's subagents may use on operator models in an hour
    /// (a sliding window); a request past it ends the run with `LIMIT_EXCEEDED`. 0: no
    /// limit.
    pub max_tokens_per_owner_per_hour: u64,
    /// Model turns (sampling requests) a subagent may take when its call names none.
    pub max_turns: u32,
    /// How many subagents deep a call may be: 1 lets a model's call start one, and a
    /// subagent cannot start another.
    pub max_depth: u32,
    /// `maxTokens` of every sampling request.
    pub max_tokens: u32,
    /// Subagents one owner may have running at once (foreground and background); the
    /// next gets `LIMIT_EXCEEDED`. They are jobs too, within `[jobs]
    /// max_running_per_owner`.
    pub max_running_per_owner: usize,
    /// A subagent's wall time when its call names none (and the most it may name).
    pub timeout_ms: u64,
    /// How long one sampling request may wait for the client's answer.
    pub sampling_timeout_ms: u64,
    /// The most bytes of a subagent's transcript (its job output); past it, entries are
    /// dropped and the transcript says so once.
    pub max_transcript_bytes: u64,
    /// Lines of a tool result the transcript shows (the model gets the whole result).
    pub result_lines: usize,
}

impl Default for SubagentConfig {
    fn default() -> Self {
        SubagentConfig {
            model: CLIENT_MODEL.into(),
            models: BTreeMap::new(),
            scopes: BTreeMap::new(),
            max_tokens_per_subagent: 500_000,
            max_tokens_per_owner_per_hour: 5_000_000,
            max_turns: 20,
            max_depth: 1,
            max_tokens: 4096,
            max_running_per_owner: 4,
            timeout_ms: 600_000,
            sampling_timeout_ms: 300_000,
            max_transcript_bytes: 1 << 20,
            result_lines: 10,
        }
    }
}

impl SubagentConfig {
    /// The model a subagent of `scope` asks when its call names none.
    pub fn model_of(&self, scope: &str) -> &str {
        self.scopes
            .get(scope)
            .and_then(|s| s.model.as_deref())
            .unwrap_or(&self.model)
    }

    /// The models a call in `scope` may name: its model first, then its `allow` list.
    pub fn models_allowed(&self, scope: &str) -> Vec<&str> {
        let mut allowed = vec![self.model_of(scope)];
        for name in self
            .scopes
            .get(scope)
            .map(|s| s.allow.as_slice())
            .unwrap_or_default()
        {
            if !allowed.contains(&name.as_str()) {
                allowed.push(name);
            }
        }
        allowed
    }

    /// What is wrong with the section, said as the error to show.
    pub fn check(&self) -> Result<(), String> {
        for (name, model) in &self.models {
            if name == CLIENT_MODEL {
                return Err(format!(
                    "[subagent.models.{CLIENT_MODEL}]: `{CLIENT_MODEL}` names the client's own model; give the endpoint another name"
                ));
            }
            model.check(name)?;
        }
        let known = |name: &str| name == CLIENT_MODEL || self.models.contains_key(name);
        let names = || {
            std::iter::once(CLIENT_MODEL)
                .chain(self.models.keys().map(String::as_str))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !known(&self.model) {
            return Err(format!(
                "[subagent] model = \"{}\" names no model (known: {})",
                self.model,
                names()
            ));
        }
        for (scope, models) in &self.scopes {
            for name in models.model.iter().chain(&models.allow) {
                if !known(name) {
                    return Err(format!(
                        "[subagent.scopes.{scope}] names the model \"{name}\", which is not configured (known: {})",
                        names()
                    ));
                }
            }
        }
        Ok(())
    }

    /// The variables of dsh's environment that hold the models' keys.
    pub fn key_variables(&self) -> Vec<String> {
        self.models
            .values()
            .filter_map(|model| model.api_key_env.clone())
            .collect()
    }
}
