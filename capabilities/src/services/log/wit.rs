//! The `dsh:plugin/log` binding: a plugin's log lines go into the host's `tracing`,
//! attributed to the plugin and the call, and to the call's caller when it asked for
//! that level (MCP `logging/setLevel`: the call's notices).

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::log::{self as interface, Host, Level};
use crate::call::LogLevel;
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// Adds `dsh:plugin/log` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall>(linker, T::call_ctx)
}

impl Host for CallCtx<'_> {
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
