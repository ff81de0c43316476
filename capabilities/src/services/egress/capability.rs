//! What the host sees of the egress capability: its grant, how it starts (it installs
//! itself as the launch platform's proxy when any policy allows a host), its figures, and
//! what it hands the next binary at an upgrade: each live run's listener, served there
//! again until the run's leader ends.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::handover::{
    checked_entry, entry, to_entry, Adopted, Handed, HandoverError, HandoverFuture,
};
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge, ToolRunner};

use super::proxy::HandedRun;
use super::{EgressConfig, EgressService};

/// The snapshot's entry of the runs with a network.
const HANDED: &str = "egress_runs";

impl Capability for Arc<EgressService> {
    type Config = EgressConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "egress",
        summary: "ask whether the tool's contained runs may reach a host through dsh's \
                  egress proxy",
        needs_grant: true,
        asks_client: false,
        errors: &[ErrorCode::InvalidArguments, ErrorCode::Denied],
    };

    fn start(config: &EgressConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        let state_dir = foundation.launch.places().own.state_dir.clone();
        let service = Arc::new(
            EgressService::new(config, state_dir.as_deref())
                .map_err(|e| CapabilityError::Setup(e.to_string()))?,
        );
        if service.allows_any() {
            foundation.launch.install_egress(service.clone());
        }
        Ok(service)
    }

    fn check_config(config: &EgressConfig) -> Result<(), String> {
        config.check()
    }

    fn secret_variables(config: &EgressConfig) -> Vec<String> {
        config
            .inject
            .iter()
            .map(|rule| rule.value_env.clone())
            .collect()
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {}

    fn attach(&self, pipeline: &Arc<dyn ToolRunner>) {
        let _ = self.shared().events.set(pipeline.clone());
    }

    fn gauges(&self) -> Vec<Gauge> {
        let connections = self.shared().clone();
        let bytes = self.shared().clone();
        let live = self.clone();
        vec![
            Gauge::counters(
                "dsh_egress_connections",
                "Connections contained runs made through the egress proxy, by decision.",
                move || {
                    let counters = &connections.counters;
                    vec![
                        (
                            vec![("decision", "allowed".to_string())],
                            counters.allowed.load(Ordering::Relaxed) as f64,
                        ),
                        (
                            vec![("decision", "refused".to_string())],
                            counters.refused.load(Ordering::Relaxed) as f64,
                        ),
                    ]
                },
            ),
            Gauge::counters(
                "dsh_egress_bytes",
                "Bytes contained runs moved through the egress proxy, by direction.",
                move || {
                    let counters = &bytes.counters;
                    vec![
                        (
                            vec![("direction", "up".to_string())],
                            counters.bytes_up.load(Ordering::Relaxed) as f64,
                        ),
                        (
                            vec![("direction", "down".to_string())],
                            counters.bytes_down.load(Ordering::Relaxed) as f64,
                        ),
                    ]
                },
            ),
            Gauge::new(
                "dsh_egress_runs",
                "Runs with a network through the egress proxy now.",
                move || live.live_runs() as i64,
            ),
        ]
    }

    fn hand_over(
        &self,
    ) -> HandoverFuture<'_, Result<Vec<(&'static str, serde_json::Value)>, HandoverError>> {
        Box::pin(async { Ok(vec![to_entry(HANDED, &self.shared().live_runs())?]) })
    }

    fn check_handed(handed: &Handed) -> Result<(), String> {
        entry::<Vec<HandedRun>>(handed, HANDED).map(drop)
    }

    fn handed_descriptors(handed: &Handed) -> Vec<i32> {
        let runs: Vec<HandedRun> = checked_entry(handed, HANDED);
        runs.iter().map(|run| run.fd).collect()
    }

    fn restore(&self, handed: &Handed, _adopted: &mut Adopted, _foundation: &Foundation) {
        let runs: Vec<HandedRun> = checked_entry(handed, HANDED);
        for run in runs {
            EgressService::restore(self, run);
        }
    }
}
