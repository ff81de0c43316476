//! The `dsh:plugin/progress` binding: a plugin's progress reports, attributed to the
//! plugin and the call.

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::progress::{self as interface, Host};
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = super::ProgressCapability;

/// Adds `dsh:plugin/progress` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.progress)
    })
}

impl Host for CallCtx<'_, Own> {
    async fn report(&mut self, fraction: Option<f64>, message: Option<String>) {
        let plugin = self.plugin;
        let call = self.call.call_id.as_str();
        tracing::debug!(target: "dsh::plugin", plugin, call, ?fraction, ?message, "progress");
        self.call.notices.progress(fraction, message);
    }
}
