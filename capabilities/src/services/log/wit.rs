//! The `dsh:plugin/log` binding: a plugin's log lines go into the host's `tracing`,
//! attributed to the plugin and the call, and to the call's caller when it asked for
//! that level (MCP `logging/setLevel`: the call's notices).

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::log::{self as interface, Host, Level};
use crate::call::LogLevel;
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = super::LogCapability;

/// Adds `dsh:plugin/log` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.log)
    })
}

/// A 0.1.0 plugin's `log` is served by this binding.
impl<T: CallView + 'static> crate::bindings::v0_1_0::LatestLog for T {
    type Host<'a>
        = CallCtx<'a, Own>
    where
        T: 'a;

    fn latest(&mut self) -> CallCtx<'_, Own> {
        self.call_ctx().narrow(|services| &services.log)
    }
}

impl Host for CallCtx<'_, Own> {
    async fn write(&mut self, level: Level, message: String) {
        let plugin = self.plugin;
        let call = self.call.call_id.as_str();
        match level {
            Level::Trace => tracing::trace!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Debug => tracing::debug!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Info => tracing::info!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Warn => tracing::warn!(target: "dsh::plugin", plugin, call, "{message}"),
            Level::Error => tracing::error!(target: "dsh::plugin", plugin, call, "{message}"),
        }
        let level = match level {
            Level::Trace | Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warning,
            Level::Error => LogLevel::Error,
        };
        self.call.notices.log(level, plugin, &message);
    }
}
