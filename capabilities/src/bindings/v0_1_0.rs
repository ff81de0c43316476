//! The frozen `dsh:plugin@0.1.0` contract (`wit/v0.1.0/`, never edited) and its adapter
//! into the latest: the host interfaces a 0.1.0 plugin imports (`process`, `jobs`,
//! `terminal`, `log`) are implemented for [`Latest`]`<H>`, any `H` that implements the
//! latest ones, by converting the arguments, calling the latest code and converting back
//! (a store's state reaches its latest host of each through [`LatestProcess`] and its
//! siblings, which each capability's binding implements); the exports a
//! 0.1.0 plugin provides (`describe`, `call`, `check`, `filter`) are called through
//! [`describe`], [`call`], [`check`] and [`filter`], which take and give the latest types
//! (a 0.1.0 result's `content` string becomes one text item). Error codes convert by name.

use std::marker::PhantomData;

use wasmtime::component::{HasData, Linker};
use wasmtime::Store;

use crate::error::ErrorCode as HostCode;

wasmtime::component::bindgen!({
    path: "../wit/v0.1.0",
    world: "tool",
    imports: { default: async },
    exports: { default: async },
});

/// The 0.1.0 `guard` world shares `types` and `log` with its `tool`.
pub mod guard {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "guard",
        imports: { default: async },
        exports: { default: async },
        with: {
            "dsh:plugin/types": super::dsh::plugin::types,
            "dsh:plugin/log": super::dsh::plugin::log,
        },
    });
}

/// The 0.1.0 `result-filter` world shares `types` and `log` with its `tool`.
pub mod result_filter {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "result-filter",
        imports: { default: async },
        exports: { default: async },
        with: {
            "dsh:plugin/types": super::dsh::plugin::types,
            "dsh:plugin/log": super::dsh::plugin::log,
        },
    });
}

use self::dsh::plugin as old;
use super::dsh::plugin as new;

/// For each host interface of 0.1.0 (`process`, `jobs`, `terminal`, `log`): the trait a
/// store state implements to give its latest host of that interface for one host call
/// (each capability's binding implements its own), and the [`HasData`] that serves the
/// 0.1.0 interface with it; then [`add_to_linker`] for a state that gives all four.
macro_rules! latest_hosts {
    ($($interface:ident: $latest:ident, $adapted:ident;)*) => {
        $(
            #[doc = concat!("A store state whose latest `", stringify!($interface),
                "` host serves the 0.1.0 one.")]
            pub trait $latest: Send + 'static {
                /// What implements the latest interface for one host call.
                type Host<'a>: new::$interface::Host + Send
                where
                    Self: 'a;

                fn latest(&mut self) -> Self::Host<'_>;

                /// The latest host, serving the 0.1.0 interface.
                fn adapted(&mut self) -> Latest<Self::Host<'_>>
                where
                    Self: Sized,
                {
                    Latest(self.latest())
                }
            }

            #[doc = concat!("[`HasData`] of the 0.1.0 `", stringify!($interface),
                "` for the state `T`: [`Latest`] of its latest host.")]
            pub struct $adapted<T>(PhantomData<fn() -> T>);

            impl<T: $latest> HasData for $adapted<T> {
                type Data<'a> = Latest<<T as $latest>::Host<'a>>;
            }
        )*

        /// Adds the 0.1.0 host interfaces to `linker`, served by the latest ones.
        pub fn add_to_linker<T: $($latest +)* Send + 'static>(
            linker: &mut Linker<T>,
        ) -> wasmtime::Result<()> {
            $(old::$interface::add_to_linker::<T, $adapted<T>>(linker, <T as $latest>::adapted)?;)*
            Ok(())
        }
    };
}

latest_hosts! {
    process: LatestProcess, AdaptedProcess;
    jobs: LatestJobs, AdaptedJobs;
    terminal: LatestTerminal, AdaptedTerminal;
    log: LatestLog, AdaptedLog;
}

/// The latest host `H`, serving the 0.1.0 interfaces.
pub struct Latest<H>(pub H);

// ---- Error codes, by name (0.1.0 is frozen: this list never changes) ----

impl From<old::types::ErrorCode> for HostCode {
    fn from(code: old::types::ErrorCode) -> Self {
        use old::types::ErrorCode as O;
        match code {
            O::InvalidArguments => HostCode::InvalidArguments,
            O::UnknownTool => HostCode::UnknownTool,
            O::Denied => HostCode::Denied,
            O::Timeout => HostCode::Timeout,
            O::Cancelled => HostCode::Cancelled,
            O::PluginTrap => HostCode::PluginTrap,
            O::PluginOutOfMemory => HostCode::PluginOutOfMemory,
            O::PluginCpuLimit => HostCode::PluginCpuLimit,
            O::CapabilityDenied => HostCode::CapabilityDenied,
            O::NotFound => HostCode::NotFound,
            O::NotOwner => HostCode::NotOwner,
            O::SendActive => HostCode::SendActive,
            O::SessionClosing => HostCode::SessionClosing,
            O::LspUnavailable => HostCode::LspUnavailable,
            O::LimitExceeded => HostCode::LimitExceeded,
            O::Internal => HostCode::Internal,
        }
    }
}

impl From<HostCode> for old::types::ErrorCode {
    /// `BUSY` (host-only, given before any plugin runs) is a limit, as it always was.
    fn from(code: HostCode) -> Self {
        use old::types::ErrorCode as O;
        match code {
            HostCode::InvalidArguments => O::InvalidArguments,
            HostCode::UnknownTool => O::UnknownTool,
            HostCode::Denied => O::Denied,
            HostCode::Timeout => O::Timeout,
            HostCode::Cancelled => O::Cancelled,
            HostCode::PluginTrap => O::PluginTrap,
            HostCode::PluginOutOfMemory => O::PluginOutOfMemory,
            HostCode::PluginCpuLimit => O::PluginCpuLimit,
            HostCode::CapabilityDenied => O::CapabilityDenied,
            HostCode::NotFound => O::NotFound,
            HostCode::NotOwner => O::NotOwner,
            // A person at the terminal is, to a 0.1.0 plugin, another send under way.
            HostCode::SendActive | HostCode::TerminalHeld => O::SendActive,
            HostCode::SessionClosing => O::SessionClosing,
            HostCode::LspUnavailable => O::LspUnavailable,
            HostCode::LimitExceeded | HostCode::Busy => O::LimitExceeded,
            // The file codes came with 0.2.0; no 0.1.0 plugin can import `files`, so
            // only a 0.1.0 filter sees them, in a 0.2.0 tool's outcome: a stale file
            // is a call to do again differently, a refused write the host's trouble.
            HostCode::StaleFile => O::InvalidArguments,
            HostCode::IoError => O::Internal,
            // Came with 0.2.0's `subagent` interface, which no 0.1.0 plugin imports: a
            // 0.1.0 filter sees it in a subagent's outcome as a limit of the host's.
            HostCode::SamplingUnavailable => O::LimitExceeded,
            // Came with 0.2.0's `elicitation` interface: the same.
            HostCode::ElicitationUnavailable => O::LimitExceeded,
            // A subagent's operator model failing: to a 0.1.0 filter, the host's trouble.
            HostCode::ModelUnavailable => O::Internal,
            HostCode::UndoConflict => O::Internal,
            // Given after the filters: no plugin sees it.
            HostCode::InvalidOutput | HostCode::Internal => O::Internal,
        }
    }
}

impl From<old::types::ToolError> for new::types::ToolError {
    fn from(error: old::types::ToolError) -> Self {
        new::types::ToolError {
            code: HostCode::from(error.code).into(),
            message: error.message,
        }
    }
}

impl From<new::types::ToolError> for old::types::ToolError {
    fn from(error: new::types::ToolError) -> Self {
        old::types::ToolError {
            code: HostCode::from(error.code).into(),
            message: error.message,
        }
    }
}

impl From<old::types::ToolError> for crate::error::ToolError {
    fn from(error: old::types::ToolError) -> Self {
        crate::error::ToolError::new(error.code.into(), error.message)
    }
}

// ---- Records and enums of the host interfaces: the same shape in both versions ----

/// `From` both ways between a 0.1.0 record and the latest one of the same fields.
macro_rules! same_record {
    ($old:ident, $new:ident, $ty:ident { $($field:ident),* $(,)? }) => {
        impl From<$old::$ty> for $new::$ty {
            fn from(from: $old::$ty) -> Self {
                $new::$ty { $($field: from.$field.into(),)* }
            }
        }
        impl From<$new::$ty> for $old::$ty {
            fn from(from: $new::$ty) -> Self {
                $old::$ty { $($field: from.$field.into(),)* }
            }
        }
    };
}

/// `From` both ways between a 0.1.0 enum and the latest one of the same cases.
macro_rules! same_enum {
    ($old:ident, $new:ident, $ty:ident { $($case:ident),* $(,)? }) => {
        impl From<$old::$ty> for $new::$ty {
            fn from(from: $old::$ty) -> Self {
                match from { $($old::$ty::$case => $new::$ty::$case,)* }
            }
        }
        impl From<$new::$ty> for $old::$ty {
            fn from(from: $new::$ty) -> Self {
                match from { $($new::$ty::$case => $old::$ty::$case,)* }
            }
        }
    };
}

mod records {
    use super::{new, old};

    use new::jobs as new_jobs;
    use new::log as new_log;
    use new::process as new_process;
    use new::terminal as new_terminal;
    use old::jobs as old_jobs;
    use old::log as old_log;
    use old::process as old_process;
    use old::terminal as old_terminal;

    same_record!(
        old_process,
        new_process,
        RunRequest {
            command,
            workdir,
            timeout_ms,
            capture_bytes,
            env
        }
    );
    same_record!(
        old_process,
        new_process,
        RunOutcome {
            output,
            total_bytes,
            full_output_path,
            exit_code,
            signal,
            timed_out,
            duration_ms
        }
    );
    same_record!(
        old_process,
        new_process,
        BackgroundRequest {
            command,
            workdir,
            description,
            env
        }
    );

    same_enum!(
        old_jobs,
        new_jobs,
        JobState {
            Running,
            Exited,
            Killed,
            Failed
        }
    );
    same_record!(
        old_jobs,
        new_jobs,
        JobInfo {
            id,
            kind,
            state,
            description,
            command,
            started_at_ms,
            runtime_ms,
            exit_code,
            signal,
            reason
        }
    );
    same_record!(
        old_jobs,
        new_jobs,
        OutputRequest {
            id,
            since,
            max_bytes,
            wait_ms
        }
    );
    same_record!(
        old_jobs,
        new_jobs,
        JobOutput {
            info,
            output,
            omitted_bytes,
            next_cursor,
            full_output_path
        }
    );
    same_record!(
        old_jobs,
        new_jobs,
        KillReport {
            info,
            sent,
            signal,
            escalated,
            waited_ms
        }
    );

    same_record!(
        old_terminal,
        new_terminal,
        OpenRequest {
            cwd,
            env,
            shell,
            cols,
            rows
        }
    );
    same_record!(
        old_terminal,
        new_terminal,
        SessionInfo {
            id,
            shell,
            cwd,
            cols,
            rows,
            created_at_ms,
            alive,
            exit_code,
            foreground
        }
    );
    same_record!(
        old_terminal,
        new_terminal,
        SendRequest {
            id,
            input,
            enter,
            quiet_ms,
            pattern,
            timeout_ms,
            background
        }
    );
    same_record!(
        old_terminal,
        new_terminal,
        SendResult {
            output,
            settled,
            next_cursor,
            job,
            alive,
            exit_code
        }
    );
    same_enum!(old_terminal, new_terminal, View { Screen, Plain, Raw });
    same_record!(
        old_terminal,
        new_terminal,
        ReadRequest {
            id,
            view,
            since,
            max_bytes
        }
    );
    same_record!(
        old_terminal,
        new_terminal,
        ReadResult {
            text,
            next_cursor,
            omitted_bytes,
            exit_code
        }
    );

    same_enum!(
        old_log,
        new_log,
        Level {
            Trace,
            Debug,
            Info,
            Warn,
            Error
        }
    );
}

/// A latest result converted into 0.1.0's.
fn convert<A, B: From<A>, E, F: From<E>>(result: Result<A, E>) -> Result<B, F> {
    result.map(Into::into).map_err(Into::into)
}

// ---- The 0.1.0 host interfaces, served by the latest ----

impl<H: new::process::Host + Send> old::process::Host for Latest<H> {
    async fn run(
        &mut self,
        request: old::process::RunRequest,
    ) -> Result<old::process::RunOutcome, old::types::ToolError> {
        convert(new::process::Host::run(&mut self.0, request.into()).await)
    }

    async fn start(
        &mut self,
        request: old::process::BackgroundRequest,
    ) -> Result<String, old::types::ToolError> {
        convert(new::process::Host::start(&mut self.0, request.into()).await)
    }
}

impl<H: new::jobs::Host + Send> old::jobs::Host for Latest<H> {
    async fn list(&mut self) -> Vec<old::jobs::JobInfo> {
        new::jobs::Host::list(&mut self.0)
            .await
            .into_iter()
            .map(Into::into)
            .collect()
    }

    async fn output(
        &mut self,
        request: old::jobs::OutputRequest,
    ) -> Result<old::jobs::JobOutput, old::types::ToolError> {
        convert(new::jobs::Host::output(&mut self.0, request.into()).await)
    }

    async fn kill(
        &mut self,
        id: String,
        signal: Option<String>,
    ) -> Result<old::jobs::KillReport, old::types::ToolError> {
        convert(new::jobs::Host::kill(&mut self.0, id, signal).await)
    }
}

impl<H: new::terminal::Host + Send> old::terminal::Host for Latest<H> {
    async fn open(
        &mut self,
        request: old::terminal::OpenRequest,
    ) -> Result<old::terminal::SessionInfo, old::types::ToolError> {
        convert(new::terminal::Host::open(&mut self.0, request.into()).await)
    }

    async fn send(
        &mut self,
        request: old::terminal::SendRequest,
    ) -> Result<old::terminal::SendResult, old::types::ToolError> {
        convert(new::terminal::Host::send(&mut self.0, request.into()).await)
    }

    async fn read(
        &mut self,
        request: old::terminal::ReadRequest,
    ) -> Result<old::terminal::ReadResult, old::types::ToolError> {
        convert(new::terminal::Host::read(&mut self.0, request.into()).await)
    }

    async fn signal(
        &mut self,
        id: String,
        signal: String,
    ) -> Result<String, old::types::ToolError> {
        convert(new::terminal::Host::signal(&mut self.0, id, signal).await)
    }

    async fn close(&mut self, id: String) -> Result<String, old::types::ToolError> {
        convert(new::terminal::Host::close(&mut self.0, id).await)
    }

    async fn list(&mut self) -> Vec<old::terminal::SessionInfo> {
        new::terminal::Host::list(&mut self.0)
            .await
            .into_iter()
            .map(Into::into)
            .collect()
    }
}

impl<H: new::log::Host + Send> old::log::Host for Latest<H> {
    async fn write(&mut self, level: old::log::Level, message: String) {
        new::log::Host::write(&mut self.0, level.into(), message).await
    }
}

// ---- The 0.1.0 exports, in the latest types ----

impl From<old::types::ToolSpec> for new::types::ToolSpec {
    fn from(spec: old::types::ToolSpec) -> Self {
        new::types::ToolSpec {
            name: spec.name,
            description: spec.description,
            input_schema: spec.input_schema,
            idempotent: spec.idempotent,
            output_budget: spec.output_budget,
            output_schema: None,
        }
    }
}

impl From<old::types::ToolResult> for new::types::ToolResult {
    /// The content string becomes one text item.
    fn from(result: old::types::ToolResult) -> Self {
        new::types::ToolResult {
            content: vec![new::types::ContentItem::Text(result.content)],
            structured_json: None,
            error: result.error.map(Into::into),
            full_output_path: result.full_output_path,
        }
    }
}

impl From<new::types::ToolResult> for old::types::ToolResult {
    /// The text items joined by newlines; an item 0.1.0 has no room for is named by a
    /// bracketed line (`[image image/png, 1234 bytes]`), so a 0.1.0 filter sees that it
    /// is there.
    fn from(result: new::types::ToolResult) -> Self {
        old::types::ToolResult {
            content: super::text_of(result.content),
            error: result.error.map(Into::into),
            full_output_path: result.full_output_path,
        }
    }
}

impl From<new::types::CallContext> for old::types::CallContext {
    fn from(context: new::types::CallContext) -> Self {
        old::types::CallContext {
            owner: context.owner,
            session: context.session,
            call_id: context.call_id,
            workdir: context.workdir,
            scope: context.scope,
            settings_json: context.settings_json,
            output_budget: context.output_budget,
        }
    }
}

impl From<new::types::PendingCall> for old::types::PendingCall {
    fn from(call: new::types::PendingCall) -> Self {
        old::types::PendingCall {
            tool: call.tool,
            args_json: call.args_json,
            context: call.context.into(),
        }
    }
}

impl From<guard::Verdict> for super::guard::Verdict {
    fn from(verdict: guard::Verdict) -> Self {
        match verdict {
            guard::Verdict::Allow => super::guard::Verdict::Allow,
            guard::Verdict::Deny(reason) => super::guard::Verdict::Deny(reason),
            guard::Verdict::Ask(reason) => super::guard::Verdict::Ask(reason),
        }
    }
}

/// A 0.1.0 tool's manuals, in the latest types.
pub async fn describe<T: Send + 'static>(
    pre: &ToolPre<T>,
    store: &mut Store<T>,
) -> wasmtime::Result<Vec<new::types::ToolSpec>> {
    let tool = pre.instantiate_async(&mut *store).await?;
    let specs = tool.call_describe(&mut *store).await?;
    Ok(specs.into_iter().map(Into::into).collect())
}

/// Calls a 0.1.0 tool; its result in the latest types.
pub async fn call<T: Send + 'static>(
    pre: &ToolPre<T>,
    store: &mut Store<T>,
    context: new::types::CallContext,
    name: &str,
    args_json: &str,
) -> wasmtime::Result<new::types::ToolResult> {
    let tool = pre.instantiate_async(&mut *store).await?;
    let result = tool
        .call_call(&mut *store, &context.into(), name, args_json)
        .await?;
    Ok(result.into())
}

/// Asks a 0.1.0 guard; its verdict in the latest types.
pub async fn check<T: Send + 'static>(
    pre: &guard::GuardPre<T>,
    store: &mut Store<T>,
    call: new::types::PendingCall,
) -> wasmtime::Result<super::guard::Verdict> {
    let guard = pre.instantiate_async(&mut *store).await?;
    let verdict = guard.call_check(&mut *store, &call.into()).await?;
    Ok(verdict.into())
}

/// Runs a 0.1.0 result filter; its replacement (if any) in the latest types.
pub async fn filter<T: Send + 'static>(
    pre: &result_filter::ResultFilterPre<T>,
    store: &mut Store<T>,
    call: new::types::PendingCall,
    outcome: new::types::ToolResult,
) -> wasmtime::Result<Option<new::types::ToolResult>> {
    let filter = pre.instantiate_async(&mut *store).await?;
    let replaced = filter
        .call_filter(&mut *store, &call.into(), &outcome.into())
        .await?;
    Ok(replaced.map(Into::into))
}

#[cfg(test)]
mod tests {
    use super::*;
    use old::types::ErrorCode as O;

    const ALL: &[O] = &[
        O::InvalidArguments,
        O::UnknownTool,
        O::Denied,
        O::Timeout,
        O::Cancelled,
        O::PluginTrap,
        O::PluginOutOfMemory,
        O::PluginCpuLimit,
        O::CapabilityDenied,
        O::NotFound,
        O::NotOwner,
        O::SendActive,
        O::SessionClosing,
        O::LspUnavailable,
        O::LimitExceeded,
        O::Internal,
    ];

    #[test]
    fn every_0_1_0_code_is_the_host_code_of_its_name_and_comes_back_as_itself() {
        for code in ALL {
            let host = HostCode::from(*code);
            let name = format!("{code:?}");
            let name = name.rsplit("::").next().unwrap().to_lowercase();
            assert_eq!(name, host.as_str().replace('_', "").to_lowercase());
            assert_eq!(O::from(host), *code);
        }
    }

    #[test]
    fn a_0_1_0_result_is_one_text_item_and_a_latest_one_is_its_text() {
        let result = new::types::ToolResult::from(old::types::ToolResult {
            content: "out".into(),
            error: Some(old::types::ToolError {
                code: O::NotOwner,
                message: "m".into(),
            }),
            full_output_path: Some("/f".into()),
        });
        assert!(matches!(
            result.content.as_slice(),
            [new::types::ContentItem::Text(text)] if text == "out"
        ));
        let error = result.error.clone().unwrap();
        assert_eq!(error.code, new::types::ErrorCode::NotFound);
        let back = old::types::ToolResult::from(result);
        assert_eq!(back.content, "out");
        assert_eq!(back.full_output_path.as_deref(), Some("/f"));
    }
}
