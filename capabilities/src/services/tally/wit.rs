//! The `dsh:plugin/tally` binding: a plugin's counts, under its own name.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::tally::{self as interface, Host, Window};
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = Arc<super::TallyService>;

/// Adds `dsh:plugin/tally` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.tally)
    })
}

impl Host for CallCtx<'_, Own> {
    async fn add(
        &mut self,
        key: String,
        amount: u64,
        window_ms: u32,
        limit: Option<u64>,
    ) -> Window {
        let window = self.service.add(
            self.plugin,
            &key,
            amount,
            Duration::from_millis(u64::from(window_ms)),
            limit,
        );
        Window {
            total: window.total,
            added: window.added,
            next_expiry_ms: window.next_expiry.as_millis() as u64,
        }
    }
}
