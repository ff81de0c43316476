//! Stage 1, the pre-execute gate: allow/deny rules from `dsh.toml` (`[gate]`), by tool
//! name, scope and argument value. Rules are checked in order; the first that matches
//! decides; a call that matches none gets the configured default.

use regex::Regex;
use serde_json::Value;

use crate::call::CallContext;
use crate::config::{GateAction, GateConfig};
use crate::error::{ErrorCode, ToolError};
use crate::glob::glob_match;

struct Rule {
    action: GateAction,
    tool: Option<String>,
    scope: Option<String>,
    arg: Option<(String, Regex)>,
    reason: Option<String>,
}

/// The compiled gate.
pub struct Gate {
    default: GateAction,
    rules: Vec<Rule>,
}

impl Gate {
    /// Compiles the rules; their patterns were checked when the config was parsed.
    pub fn new(config: &GateConfig) -> Self {
        let rules = config
            .rules
            .iter()
            .map(|rule| Rule {
                action: rule.action,
                tool: rule.tool.clone(),
                scope: rule.scope.clone(),
                arg: rule
                    .arg
                    .clone()
                    .zip(rule.pattern.as_deref().and_then(|p| Regex::new(p).ok())),
                reason: rule.reason.clone(),
            })
            .collect();
        Gate {
            default: config.default,
            rules,
        }
    }

    /// Allows the call or denies it with the rule's reason.
    pub fn check(&self, tool: &str, context: &CallContext, args: &Value) -> Result<(), ToolError> {
        for (index, rule) in self.rules.iter().enumerate() {
            let matches = rule.tool.as_deref().is_none_or(|p| glob_match(p, tool))
                && rule
                    .scope
                    .as_deref()
                    .is_none_or(|p| glob_match(p, &context.scope))
                && rule.arg.as_ref().is_none_or(|(name, pattern)| {
                    args.get(name)
                        .and_then(Value::as_str)
                        .is_some_and(|v| pattern.is_match(v))
                });
            if matches {
                return match rule.action {
                    GateAction::Allow => Ok(()),
                    GateAction::Deny => Err(ToolError::new(
                        ErrorCode::Denied,
                        format!(
                            "denied by the gate (rule {index} in dsh.toml): {}",
                            rule.reason.as_deref().unwrap_or("no reason given")
                        ),
                    )),
                };
            }
        }
        match self.default {
            GateAction::Allow => Ok(()),
            GateAction::Deny => Err(ToolError::new(
                ErrorCode::Denied,
                format!("denied by the gate: no rule in dsh.toml allows {tool}"),
            )),
        }
    }
}
