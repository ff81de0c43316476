//! The egress capability: contained runs reach the network through dsh's proxy, by
//! policy. It owns the policy (`[egress]`, [`config`]: hosts allowed and denied by name,
//! per scope and per tool; [`policy`]: how a name and then the address it resolves to are
//! decided), the proxy every run with a network is served by ([`proxy`]), and the TLS it
//! terminates for the hosts whose requests get a header added ([`tls`]: dsh's CA and the
//! certificates minted from it).
//!
//! It plugs into the launch platform as its [`dsh_launch::network::Egress`]: a run under
//! `sandbox` or `container` whose scope and tool have a policy starts in a network
//! namespace of its own whose only way out is a listener of this proxy
//! ([`dsh_launch::network`]), with the proxy's variables (and the CA bundle) in its
//! environment. Its WIT interface (`dsh:plugin/egress`) lets a tool ask whether its runs
//! may reach a host.

pub mod config;
pub mod policy;
pub mod proxy;
pub mod tls;

mod capability;
pub mod wit;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dsh_launch::network::{RunEgress, RunLabel, RunPolicy, PROXY_PORT};

pub use config::EgressConfig;
use policy::{EgressPolicy, Refusal};
use proxy::Shared;

/// The host's egress proxy and its policies.
#[derive(Debug)]
pub struct EgressService {
    top: Arc<EgressPolicy>,
    scopes: BTreeMap<String, Arc<EgressPolicy>>,
    tools: BTreeMap<String, Arc<EgressPolicy>>,
    shared: Arc<Shared>,
}

/// Why the egress proxy cannot start.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Tls(#[from] tls::TlsSetupError),
    #[error("[egress] inject and upstream_ca need a state directory to keep dsh's CA in")]
    NoStateDir,
}

impl EgressService {
    /// The proxy of `config`; its CA (when a rule terminates TLS) kept under `state_dir`.
    pub fn new(config: &EgressConfig, state_dir: Option<&Path>) -> Result<Self, EgressError> {
        config.check().map_err(EgressError::Config)?;
        let parse = |allow: &[String], deny: &[String]| {
            EgressPolicy::new(allow, deny, Vec::new())
                .map(Arc::new)
                .map_err(EgressError::Config)
        };
        let top = parse(&config.allow, &config.deny)?;
        let variants = |list: &BTreeMap<String, config::EgressVariant>| {
            list.iter()
                .map(|(name, variant)| Ok((name.clone(), parse(&variant.allow, &variant.deny)?)))
                .collect::<Result<BTreeMap<_, _>, EgressError>>()
        };
        let mut inject = Vec::new();
        for rule in &config.inject {
            let (host, port) = rule.host_and_port().map_err(EgressError::Config)?;
            let value = std::env::var(&rule.value_env)
                .ok()
                .and_then(|value| hyper::header::HeaderValue::from_str(value.trim()).ok())
                .map(|mut value| {
                    value.set_sensitive(true);
                    value
                });
            if value.is_none() {
                tracing::warn!(
                    host = %rule.host,
                    variable = %rule.value_env,
                    "an [[egress.inject]] value is not in dsh's environment (or is no header value): runs are refused that host"
                );
            }
            let name = hyper::header::HeaderName::from_bytes(rule.header.as_bytes())
                .map_err(|e| EgressError::Config(format!("[[egress.inject]] header: {e}")))?;
            inject.push(proxy::Injection {
                host,
                port,
                name,
                value,
                variable: rule.value_env.clone(),
            });
        }
        let authority = if inject.is_empty() && config.upstream_ca.is_empty() {
            None
        } else {
            let dir = state_dir.ok_or(EgressError::NoStateDir)?.join("egress");
            Some(Arc::new(tls::Authority::open(&dir, &config.upstream_ca)?))
        };
        let limits = proxy::Limits {
            connections_per_run: config.max_connections_per_run,
            bytes_per_run: config.max_bytes_per_run,
            idle: std::time::Duration::from_millis(config.idle_timeout_ms),
            total: (config.total_timeout_ms > 0)
                .then(|| std::time::Duration::from_millis(config.total_timeout_ms)),
            connect: std::time::Duration::from_millis(config.connect_timeout_ms),
        };
        let hosts = config
            .hosts
            .iter()
            .map(|(name, addresses)| {
                (
                    name.trim_end_matches('.').to_ascii_lowercase(),
                    addresses.clone(),
                )
            })
            .collect();
        Ok(EgressService {
            top,
            scopes: variants(&config.scopes)?,
            tools: variants(&config.tools)?,
            shared: Arc::new(Shared::new(limits, hosts, inject, authority)),
        })
    }

    /// Whether any run could get a network (else the launcher is given no proxy).
    pub fn allows_any(&self) -> bool {
        std::iter::once(&self.top)
            .chain(self.scopes.values())
            .chain(self.tools.values())
            .any(|policy| policy.allows_any())
    }

    /// The policies a run of `tool` in `scope` must pass, each of them: the tool's and the
    /// scope's entries where there are any, else the top level's.
    fn policies_for(&self, scope: &str, tool: &str) -> Vec<Arc<EgressPolicy>> {
        let named: Vec<Arc<EgressPolicy>> = [self.tools.get(tool), self.scopes.get(scope)]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        match named.is_empty() {
            true => vec![self.top.clone()],
            false => named,
        }
    }

    /// Whether runs of `tool` in `scope` may reach `host:port` by name (the address is
    /// checked when they connect).
    pub fn check(&self, scope: &str, tool: &str, host: &str, port: u16) -> Result<(), Refusal> {
        for policy in self.policies_for(scope, tool) {
            policy.check_name(host, port)?;
        }
        Ok(())
    }

    /// How many runs have a network now.
    pub fn live_runs(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }

    /// Serves again, in the next binary, the proxy of a run handed over at an upgrade
    /// (under this binary's policies for its scope and tool: none left, and the run's
    /// listener is closed, its network gone), until the run's leader ends.
    pub fn restore(&self, run: proxy::HandedRun) {
        let listener = match dsh_launch::network::adopt_listener(run.fd) {
            Ok(listener) => listener,
            Err(error) => {
                tracing::error!(%error, owner = %run.owner, "cannot take back a run's egress listener");
                return;
            }
        };
        let policies = self.policies_for(&run.scope, &run.tool);
        if !policies.iter().all(|policy| policy.allows_any()) {
            tracing::info!(owner = %run.owner, tool = %run.tool, "a run's network is gone: this configuration gives its scope and tool none");
            return;
        }
        let label = RunLabel {
            owner: run.owner.as_str().into(),
            call: run.call.as_str().into(),
            tool: run.tool.as_str().into(),
            scope: run.scope.as_str().into(),
        };
        match proxy::serve_run(self.shared.clone(), policies, listener, &label, run.refused) {
            Ok(served) => {
                served.started(run.leader);
                tokio::spawn(async move {
                    dsh_launch::network::exited(run.leader).await;
                    drop(served);
                });
            }
            Err(error) => {
                tracing::error!(%error, owner = %run.owner, "cannot serve a handed-over run's egress listener");
            }
        }
    }

    /// The proxy's counters, for `/metrics`.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl dsh_launch::network::Egress for EgressService {
    fn policy_for(&self, scope: &str, tool: &str) -> Option<Arc<dyn RunPolicy>> {
        let policies = self.policies_for(scope, tool);
        if !policies.iter().all(|policy| policy.allows_any()) {
            return None;
        }
        Some(Arc::new(Policies {
            policies,
            shared: self.shared.clone(),
        }))
    }
}

/// The policies one run passes, as the launcher serves it.
#[derive(Debug)]
struct Policies {
    policies: Vec<Arc<EgressPolicy>>,
    shared: Arc<Shared>,
}

/// The proxy's address as the run's tools read it.
const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The name of the CA bundle written into a run's `TMPDIR`.
const BUNDLE: &str = "dsh-egress-ca.pem";

impl RunPolicy for Policies {
    fn serve(
        &self,
        listener: std::net::TcpListener,
        label: &RunLabel,
    ) -> Result<Box<dyn RunEgress>, String> {
        proxy::serve_run(
            self.shared.clone(),
            self.policies.clone(),
            listener,
            label,
            Vec::new(),
        )
        .map(|run| Box::new(run) as Box<dyn RunEgress>)
    }

    fn environment(&self, tmp: &Path) -> Result<Vec<(String, String)>, String> {
        let address = format!("http://127.0.0.1:{PROXY_PORT}");
        let mut variables: Vec<(String, String)> = PROXY_VARIABLES
            .iter()
            .map(|name| (name.to_string(), address.clone()))
            .collect();
        for name in ["NO_PROXY", "no_proxy"] {
            variables.push((name.to_string(), "localhost,127.0.0.1,::1".to_string()));
        }
        if let Some(authority) = &self.shared.authority {
            let bundle = tmp.join(BUNDLE);
            std::fs::write(&bundle, authority.bundle())
                .map_err(|e| format!("cannot write the CA bundle {}: {e}", bundle.display()))?;
            for name in tls::CA_VARIABLES {
                variables.push((name.to_string(), bundle.display().to_string()));
            }
        }
        Ok(variables)
    }
}
