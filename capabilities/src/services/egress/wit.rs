//! The `dsh:plugin/egress` binding: a tool asks whether its own contained runs may reach
//! a host (by name, under the policies its scope and tool get).

use wasmtime::component::Linker;

use crate::bindings::dsh::plugin::egress::{self as interface, Host};
use crate::bindings::dsh::plugin::types::ToolError;
use crate::error::ErrorCode;
use crate::services::wit::HasCall;
use crate::services::{CallCtx, CallView};

/// What this binding is given of the services: its own, and nothing of another
/// capability's.
type Own = std::sync::Arc<super::EgressService>;

/// Adds `dsh:plugin/egress` to `linker`.
pub fn add_to_linker<T: CallView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    interface::add_to_linker::<T, HasCall<Own>>(linker, |state| {
        state.call_ctx().narrow(|services| &services.egress)
    })
}

impl Host for CallCtx<'_, Own> {
    async fn check(&mut self, host: String, port: u16) -> Result<(), ToolError> {
        let executor = self.executor();
        if executor == dsh_launch::ExecutorKind::Local {
            return Err(crate::error::ToolError::new(
                ErrorCode::Denied,
                "this tool's runs are `local`: they are not confined and use the host's \
                 network as it is; the egress policy applies to sandbox and container runs",
            )
            .into());
        }
        self.service
            .check(&self.call.scope, &self.call.tool, &host, port)
            .map_err(|refusal| {
                let code = match refusal {
                    super::policy::Refusal::BadName(_) => ErrorCode::InvalidArguments,
                    _ => ErrorCode::Denied,
                };
                crate::error::ToolError::new(code, refusal.to_string()).into()
            })
    }
}
