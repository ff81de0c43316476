//! The `dsh:plugin/log` binding: a plugin's log lines go into the host's `tracing`,
//! attributed to the plugin and the call.

use crate::engine::bindings::dsh::plugin::log::{Host, Level};
use crate::engine::store::CallState;

impl Host for CallState {
    async fn write(&mut self, level: Level, message: String) {
        let plugin = &*self.plugin;
        let call = self.call.call_id.as_str();
        match level {
            Level::Trace => tracing::trace!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Debug => tracing::debug!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Info => tracing::info!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Warn => tracing::warn!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Error => tracing::error!(target: "dsh::plugin", plugin, call, "{message}"),
        }
    }
}
