//! What the host sees of the tally capability: its name, that it needs no grant (a
//! plugin reaches only its own keys), and the keys held as a gauge.

use std::sync::Arc;

use super::{TallyConfig, TallyService};
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

impl Capability for Arc<TallyService> {
    type Config = TallyConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "tally",
        summary: "count over sliding windows of time, kept by the host across the plugin's calls (its own keys only)",
        needs_grant: false,
        asks_client: false,
        errors: &[],
    };

    fn start(config: &TallyConfig, _foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(Arc::new(TallyService::new(config)))
    }

    fn check_config(config: &TallyConfig) -> Result<(), String> {
        if config.max_keys == 0 {
            return Err("tally.max_keys must be at least 1".into());
        }
        Ok(())
    }

    fn release_owner(&self, _owner: &str) -> usize {
        0
    }

    fn shutdown(&self) {}

    fn gauges(&self) -> Vec<Gauge> {
        let tally = self.clone();
        vec![Gauge::new(
            "dsh_tally_keys",
            "Keys the plugins' tallies hold now (each plugin at most [tally] max_keys)",
            move || tally.keys() as i64,
        )]
    }
}
