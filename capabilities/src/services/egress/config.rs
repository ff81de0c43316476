//! `[egress]` in `dsh.toml`: which hosts contained runs reach through dsh's proxy, per
//! scope and per tool, the headers added on the way, and the proxy's limits.
//!
//! ```toml
//! [egress]
//! allow = ["pypi.org", "*.pythonhosted.org", "github.com"]
//! deny = ["gist.github.com"]
//! [[egress.inject]]
//! host = "api.github.com"
//! header = "Authorization"
//! value_env = "DSH_GITHUB_AUTH"
//! [egress.scopes.reviewer]
//! allow = ["github.com"]
//! [egress.tools.bash]
//! allow = ["pypi.org", "*.pythonhosted.org"]
//! ```
//!
//! A run's policy follows the executor choice's rule: where the call's tool or scope has
//! an entry (`[egress.tools.NAME]`, `[egress.scopes.NAME]`), those entries apply, each of
//! them (a connection must pass every one: the strictest wins); else the top level does.
//! With no `allow` a run has no network at all, as without `[egress]`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::policy::EgressPolicy;

/// `[egress]`: which hosts contained runs reach through dsh's proxy, the headers added
/// on the way, and the proxy's limits.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// Hosts runs may reach: names, `*.` wildcards, addresses, each with an optional
    /// `:port` (none: 80 and 443).
    pub allow: Vec<String>,
    /// Hosts runs may never reach, whatever `allow` says.
    pub deny: Vec<String>,
    /// Headers added to requests to a host (TLS is terminated for those hosts only).
    pub inject: Vec<InjectRule>,
    /// Names dsh resolves itself, to these addresses, before asking the system's
    /// resolver (a private mirror's name, say). The address checks still apply.
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    /// PEM files of further CAs dsh trusts upstream (besides the system's roots) where
    /// it terminates TLS; runs trust them too.
    pub upstream_ca: Vec<PathBuf>,
    /// Policies of their own for calls in a scope.
    pub scopes: BTreeMap<String, EgressVariant>,
    /// Policies of their own for calls of a tool.
    pub tools: BTreeMap<String, EgressVariant>,
    /// Most connections one run has open at once; more are answered 429.
    pub max_connections_per_run: usize,
    /// Most bytes (both ways) one run moves through the proxy in all; 0: no limit.
    pub max_bytes_per_run: u64,
    /// A connection with nothing moving either way for this long is closed.
    pub idle_timeout_ms: u64,
    /// A connection is closed after this long, whatever it does; 0: none.
    pub total_timeout_ms: u64,
    /// How long dsh waits for an upstream to accept a connection.
    pub connect_timeout_ms: u64,
}

/// `[egress.scopes.NAME]` or `[egress.tools.NAME]`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct EgressVariant {
    /// Hosts these runs may reach (as `[egress] allow`); none: no network.
    pub allow: Vec<String>,
    /// Hosts these runs may never reach, whatever `allow` says.
    pub deny: Vec<String>,
}

/// `[[egress.inject]]`: a header added to every request a run sends to `host` (its value
/// never enters the run).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InjectRule {
    /// The host, by name (no wildcard), with an optional `:port` (none: 443).
    pub host: String,
    /// The header's name (`Authorization`); a header of that name the run sends is
    /// replaced.
    pub header: String,
    /// The variable of dsh's own environment holding the header's whole value
    /// (`Bearer …`): withheld from every command and plugin. Unset when dsh starts: the
    /// host is refused (said at start and in each refusal), never reached without it.
    pub value_env: String,
}

impl Default for EgressConfig {
    fn default() -> Self {
        EgressConfig {
            allow: Vec::new(),
            deny: Vec::new(),
            inject: Vec::new(),
            hosts: BTreeMap::new(),
            upstream_ca: Vec::new(),
            scopes: BTreeMap::new(),
            tools: BTreeMap::new(),
            max_connections_per_run: 64,
            max_bytes_per_run: 0,
            idle_timeout_ms: 120_000,
            total_timeout_ms: 3_600_000,
            connect_timeout_ms: 10_000,
        }
    }
}

impl EgressConfig {
    /// Checks every list and rule (the address checks need the host's own addresses,
    /// which a check does not; the lists are parsed all the same).
    pub fn check(&self) -> Result<(), String> {
        EgressPolicy::new(&self.allow, &self.deny, Vec::new())
            .map_err(|why| format!("[egress] {why}"))?;
        for (kind, variants) in [("scopes", &self.scopes), ("tools", &self.tools)] {
            for (name, variant) in variants {
                EgressPolicy::new(&variant.allow, &variant.deny, Vec::new())
                    .map_err(|why| format!("[egress.{kind}.{name}] {why}"))?;
            }
        }
        for rule in &self.inject {
            let (host, _) = rule.host_and_port()?;
            if host.contains('*') {
                return Err(format!(
                    "[[egress.inject]] host `{}`: a header is added for one host by name, not a wildcard",
                    rule.host
                ));
            }
            if rule.header.is_empty()
                || !rule
                    .header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
            {
                return Err(format!(
                    "[[egress.inject]] header `{}` is not a header name",
                    rule.header
                ));
            }
            if rule.value_env.is_empty() {
                return Err(format!(
                    "[[egress.inject]] for `{}` needs value_env (the variable of dsh's environment holding the value)",
                    rule.host
                ));
            }
        }
        if self.max_connections_per_run == 0 {
            return Err("[egress] max_connections_per_run must be at least 1".into());
        }
        if self.idle_timeout_ms == 0 || self.connect_timeout_ms == 0 {
            return Err("[egress] idle_timeout_ms and connect_timeout_ms must not be 0".into());
        }
        Ok(())
    }
}

impl InjectRule {
    /// Its host (lower case) and port (443 when none is written).
    pub fn host_and_port(&self) -> Result<(String, u16), String> {
        let (host, port) = match self.host.rsplit_once(':') {
            Some((host, port)) => (
                host,
                port.parse::<u16>()
                    .map_err(|_| format!("[[egress.inject]] host `{}`: a bad port", self.host))?,
            ),
            None => (self.host.as_str(), 443),
        };
        Ok((host.trim_end_matches('.').to_ascii_lowercase(), port))
    }
}
