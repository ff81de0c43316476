//! The dispatch layer: every call goes through the same stages, in this order, one file
//! each:
//!
//! 1. [`s1_gate`]: the pre-execute gate (allow/deny rules from `dsh.toml`);
//! 2. [`s2_guards`]: guard components, in configured order, monotonic, failing closed;
//!    an `ask` goes to the call's approver;
//! 3. [`s3_execute`]: the dispatch to the plugin, wrapped by the host's middleware
//!    (timeout, retry of idempotent tools, metrics) and the middleware components;
//! 4. [`s4_post_execute`]: result filter components;
//! 5. [`s5_finalize`]: the content cut to its budget, the full text spilled;
//! 6. [`s6_observe`]: observers (the event log's `tool/result`, metrics), and the
//!    observer components, which get the event log's records off the call's path.
//!
//! `[pipeline.select.NAME]` narrows a guard, middleware or filter to the calls of some
//! tools and scopes ([`Selected`]).
//!
//! Before any of them, a `tool/call` event is written to the session log (when it
//! cannot be, the call is refused with `IO_ERROR` and nothing runs), the call is
//! admitted ([`admission`]: it may wait its turn, or get `BUSY`), the tool is resolved in
//! the caller's scope, the arguments are validated against its schema and its path
//! arguments normalized ([`paths`]: `src/../x` is `x` from the gate on). The call holds
//! its admission slot through stage 4 (a subagent's call runs under the slot of the
//! call it runs inside, see [`crate::call::JobStep`]). A guard's rewrite (stage 2) replaces the
//! arguments for the rest of the call, after the gate has checked them again. After the
//! filters, a tool's structured output is checked against its output schema
//! ([`crate::registry::RegisteredTool::check_output`]).
//!
//! Each stage's time goes to the metrics' stage histogram and, with traces on, is a span
//! under the call's ([`crate::traces`]).
//!
//! The configured parts (gate, guard chain, middleware, filter chain, limits) are one [`Configured`]
//! snapshot, swapped whole when `dsh.toml` changes ([`Pipeline::reconfigure`]); a call
//! reads it once, with the registry's catalog, and finishes under both.

pub mod admission;
pub mod approvals;
pub mod paths;
pub mod s1_gate;
pub mod s2_guards;
pub mod s3_execute;
pub mod s4_post_execute;
pub mod s5_finalize;
pub mod s6_observe;

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::call::{CallContext, CallRequest, CallResult};
use crate::config::Config;
use crate::engine::plugin::PluginKind;
use crate::engine::Runtime;
use crate::error::{ErrorCode, ToolError};
use crate::metrics::Stage;
use crate::registry::Registry;
use crate::session::Session;
use crate::traces;
use tracing::Instrument as _;

/// The `tool/call` event: written before anything else happens to a call.
#[derive(serde::Serialize)]
struct CallEvent<'a> {
    call_id: &'a str,
    session: &'a str,
    owner: &'a str,
    scope: &'a str,
    tool: &'a str,
    /// The arguments as the request had them, serialized once for this event and the
    /// stages.
    args: &'a serde_json::value::RawValue,
    /// The subagent that made the call (`subagent-N`), when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    subagent: Option<&'a str>,
    /// The call that started that subagent.
    #[serde(skip_serializing_if = "Option::is_none")]
    started_by: Option<&'a str>,
}

/// The configured parts of the pipeline, built from one version of `dsh.toml`. A call
/// reads this snapshot once and keeps it to its end, so a configuration swapped in
/// while it runs does not change it halfway.
pub struct Configured {
    pub config: Arc<Config>,
    gate: s1_gate::Gate,
    guards: s2_guards::GuardChain,
    middleware: Selected,
    filters: s4_post_execute::FilterChain,
}

impl Configured {
    fn new(config: Arc<Config>) -> Self {
        let pipeline = &config.pipeline;
        Configured {
            gate: s1_gate::Gate::new(&config.gate),
            guards: s2_guards::GuardChain::new(Selected::new(&pipeline.guards, pipeline)),
            middleware: Selected::new(&pipeline.middleware, pipeline),
            filters: s4_post_execute::FilterChain::new(Selected::new(&pipeline.filters, pipeline)),
            config,
        }
    }
}

/// Stages of one kind by name, in order, each with the calls it is for
/// (`[pipeline.select.NAME]`; none: every call).
#[derive(Debug, Default)]
pub struct Selected(Vec<(String, Option<crate::config::StageSelect>)>);

impl Selected {
    fn new(names: &[String], pipeline: &crate::config::PipelineConfig) -> Self {
        Selected(
            names
                .iter()
                .map(|name| (name.clone(), pipeline.select.get(name).cloned()))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The stages for a call of `tool` in `scope`, in order.
    pub fn for_call<'a>(&'a self, tool: &'a str, scope: &'a str) -> impl Iterator<Item = &'a str> {
        self.0
            .iter()
            .filter(move |(_, select)| select.as_ref().is_none_or(|s| s.selects(tool, scope)))
            .map(|(name, _)| name.as_str())
    }
}

/// The pipeline with its configured gate, guards, filters and observers.
pub struct Pipeline {
    pub runtime: Arc<Runtime>,
    pub registry: Arc<Registry>,
    pub session: Arc<Session>,
    /// Swapped whole when the configuration changes; read once per call.
    configured: RwLock<Arc<Configured>>,
    /// Serializes plugin loads after start (the plugin directory watcher and a changed
    /// configuration), so two loads of one plugin cannot land out of order.
    pub loads: tokio::sync::Mutex<()>,
    observers: s6_observe::Observers,
    /// Who runs now and who waits ([`admission`]).
    admission: admission::Admission,
    /// The observer components' tasks (see [`s6_observe::ObserverSet`]).
    observer_tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The guards' asks waiting for an answer, for the console ([`approvals`]).
    pub approvals: Arc<approvals::ApprovalBoard>,
}

/// A call's result and how many times its tool ran (0 when it never got that far, or
/// when the call was cancelled: the count is not known then).
struct Outcome {
    result: CallResult,
    attempts: u32,
    /// The middleware that answered without running the tool, if one did.
    answered_by: Option<Arc<str>>,
}

impl From<ToolError> for Outcome {
    fn from(error: ToolError) -> Self {
        Outcome {
            result: CallResult::failed(error),
            attempts: 0,
            answered_by: None,
        }
    }
}

impl Pipeline {
    pub fn new(
        runtime: Arc<Runtime>,
        registry: Arc<Registry>,
        session: Arc<Session>,
        config: Arc<Config>,
    ) -> Self {
        let admission = admission::Admission::new();
        let load = admission.clone();
        runtime.metrics.gauge_fn(
            "dsh_admission_queued_calls",
            "Calls waiting for an admission slot now ([limits] max_queued_calls bounds them)",
            move || load.load().1 as i64,
        );
        let load = admission.clone();
        runtime.metrics.gauge_fn(
            "dsh_admitted_calls",
            "Calls holding an admission slot now ([limits] max_calls_in_flight bounds them)",
            move || load.load().0 as i64,
        );
        let pipeline = Pipeline {
            observers: s6_observe::Observers::new(session.clone(), runtime.metrics.clone()),
            runtime,
            registry,
            session,
            configured: RwLock::new(Arc::new(Configured::new(config))),
            loads: tokio::sync::Mutex::new(()),
            admission,
            observer_tasks: Default::default(),
            approvals: Arc::default(),
        };
        pipeline.start_observers(&pipeline.config());
        pipeline
    }

    /// Starts the observers `config` names, in place of those running (which end once
    /// they have given out what they hold).
    fn start_observers(&self, config: &Config) {
        let started = s6_observe::ObserverSet::start(
            &config.pipeline.observers,
            config.limits.observer_queue,
            &self.runtime,
            &self.registry,
            &self.session,
        );
        let mut tasks = self
            .observer_tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        tasks.retain(|task| !task.is_finished());
        let tap = started.map(|(set, started)| {
            tasks.extend(started);
            set as Arc<dyn crate::session::event_log::EventTap>
        });
        self.session.events.set_tap("observers", tap);
    }

    /// Starts the observers the configuration in force names again (after
    /// [`Pipeline::close_observers`], when the host serves on: an upgrade whose `exec`
    /// failed).
    pub fn open_observers(&self) {
        self.start_observers(&self.config());
    }

    /// Stops giving records to the observers and waits up to `within` for them to see
    /// what they were given (a host that ends: `dsh call` after its call, `dsh serve`
    /// after its last request). Records written after this reach no observer.
    pub async fn close_observers(&self, within: Duration) {
        self.session.events.set_tap("observers", None);
        let tasks = std::mem::take(
            &mut *self
                .observer_tasks
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        if tasks.is_empty() {
            return;
        }
        let all = async {
            for task in tasks {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(within, all).await.is_err() {
            tracing::warn!(
                within_ms = within.as_millis() as u64,
                "the observers had not seen every record they were given when the host ended"
            );
        }
    }

    /// The configuration in force: what the next call runs under.
    pub fn config(&self) -> Arc<Config> {
        self.configured().config.clone()
    }

    fn configured(&self) -> Arc<Configured> {
        self.configured.read().unwrap().clone()
    }

    /// Swaps in the gate, guard chain, filter chain and limits of `config`: calls that
    /// start from now on run under it, calls in flight finish under theirs.
    pub fn reconfigure(&self, config: Arc<Config>) {
        let old = self.config();
        if old.pipeline.observers != config.pipeline.observers
            || old.limits.observer_queue != config.limits.observer_queue
        {
            self.start_observers(&config);
        }
        let configured = Arc::new(Configured::new(config));
        *self.configured.write().unwrap() = configured;
    }

    /// Runs one call through every stage. Never fails: every failure is a result. When
    /// `cancel` fires first, the call is dropped (which kills its processes) and the
    /// result is `CANCELLED`.
    pub async fn call(&self, request: CallRequest, cancel: &CancellationToken) -> CallResult {
        let started = Instant::now();
        let call_id = self.session.next_call_id();
        // The arguments as JSON text, made once: for the `tool/call` event and (unless
        // their paths are normalized or a guard rewrites them) for the guards, the tool
        // and the filters. Serializing a `Value` cannot fail.
        let args =
            serde_json::value::to_raw_value(&request.args).expect("a serde_json::Value serializes");
        // Nothing runs unlogged: a call whose `tool/call` event cannot be written is
        // refused before anything else happens to it.
        if let Err(error) = self.session.events.try_write(
            "tool/call",
            CallEvent {
                call_id: &call_id,
                session: &self.session.id,
                owner: &request.owner,
                scope: &request.scope,
                tool: &request.tool,
                args: &args,
                subagent: request.step.as_ref().map(|step| &*step.job),
                started_by: request.step.as_ref().map(|step| &*step.started_by),
            },
        ) {
            tracing::error!(%error, call_id = %call_id, tool = %request.tool, "refusing a call: its tool/call event cannot be written");
            let result = CallResult::failed(ToolError::new(
                ErrorCode::IoError,
                format!(
                    "{} was refused and did not run, as nothing runs unlogged: {error}; free space in the state directory, then retry",
                    request.tool
                ),
            ));
            self.observers
                .result(&call_id, &request, &result, started.elapsed(), 0, None);
            return result;
        }
        let span = traces::call_span(
            &request.tool,
            &request.owner,
            &call_id,
            &request.trace_parent,
        );
        let configured = self.configured();
        let limits = admission::AdmissionLimits {
            max_in_flight: configured.config.limits.max_calls_in_flight,
            max_queued: configured.config.limits.max_queued_calls,
        };
        let admitted = async {
            let waiting = Instant::now();
            // A subagent's call runs under the slot of the call the subagent runs inside
            // (the `subagent` call, or the `job_output` that waits on it), which waits
            // for it: queueing it behind that slot could wait for ever when every slot
            // holds such a parent. A subagent makes one call at a time.
            let _slot = match &request.step {
                Some(_) => None,
                None => match self
                    .admission
                    .admit(&request.owner, limits)
                    .instrument(traces::stage_span("admission"))
                    .await
                {
                    Ok(slot) => {
                        self.runtime
                            .metrics
                            .observe_admission_wait(waiting.elapsed());
                        Some(slot)
                    }
                    Err(busy) => return Outcome::from(busy),
                },
            };
            // Boxed: the stages' future is kilobytes, and the select and the span it
            // is awaited under would each copy it as they are built.
            Box::pin(self.run(&configured, &request, args.get(), call_id.clone())).await
        };
        let outcome = async {
            tokio::select! {
                outcome = admitted => outcome,
                _ = cancel.cancelled() => Outcome::from(ToolError::new(
                    ErrorCode::Cancelled,
                    format!(
                        "{} was cancelled (by the caller, or its connection closed); every process it started was killed",
                        request.tool
                    ),
                )),
            }
        }
        .instrument(span.clone())
        .await;
        match &outcome.result.error {
            None => traces::finished(&span, crate::metrics::CODE_OK, true),
            Some(error) => traces::finished(&span, error.code.as_str(), false),
        }
        self.observers.result(
            &call_id,
            &request,
            &outcome.result,
            started.elapsed(),
            outcome.attempts,
            outcome.answered_by.as_deref(),
        );
        outcome.result
    }

    /// Per-tool metrics of this session's calls so far.
    pub fn metrics(&self) -> std::collections::BTreeMap<String, s6_observe::ToolStats> {
        self.observers.metrics.snapshot()
    }

    async fn run(
        &self,
        configured: &Configured,
        request: &CallRequest,
        args_json: &str,
        call_id: String,
    ) -> Outcome {
        let config = &configured.config;
        let scope = match self.registry.scope(&request.scope) {
            Ok(scope) => scope,
            Err(error) => return error.into(),
        };
        let catalog = self.registry.snapshot();
        let tool = match catalog.resolve(&request.tool, &scope) {
            Ok(tool) => tool,
            Err(error) => return error.into(),
        };
        if let Err(error) = tool.validate(&request.args) {
            return error.into();
        }
        // From here on, the request with its path arguments normalized, and their JSON
        // text for the guards, the tool and the filters (made again only then).
        let (normalized, normalized_json);
        let (request, args_json) = match paths::normalized(&tool.spec.input_schema, &request.args) {
            Some(args) => {
                normalized = CallRequest {
                    args,
                    ..request.clone()
                };
                normalized_json = normalized.args.to_string();
                (&normalized, normalized_json.as_str())
            }
            None => (request, args_json),
        };
        let context = CallContext {
            owner: request.owner.clone(),
            session: self.session.id.clone(),
            call_id,
            workdir: self.session.workdir.clone(),
            scope: request.scope.clone(),
            tool: request.tool.as_str().into(),
            spill_dir: self.session.spill_dir.clone(),
            output_budget: tool
                .spec
                .output_budget
                .unwrap_or(config.limits.output_budget_bytes),
            spill_cap: config.limits.max_spill_bytes,
            notices: request.notices.clone(),
            sampler: request.sampler.clone(),
            step: request.step.clone(),
        };
        let metrics = &self.runtime.metrics;
        let gated = stage(metrics, Stage::Gate, async {
            configured
                .gate
                .check(&tool.spec.name, &context, &request.args)
        })
        .await;
        if let Err(error) = gated {
            return error.into();
        }
        let guarded = stage(
            metrics,
            Stage::Guards,
            configured.guards.check(
                &self.runtime,
                &catalog,
                s2_guards::Asking {
                    events: &self.session.events,
                    approvals: &self.approvals,
                    console_wait: Duration::from_millis(config.serve.approval_timeout_ms),
                },
                request,
                args_json,
                &tool,
                &context,
            ),
        )
        .await;
        let rewritten = match guarded {
            Ok(rewritten) => rewritten,
            Err(error) => return error.into(),
        };
        // A rewrite passes the gate again: no guard takes a call past a `[gate]` rule.
        if let Some(rewrite) = &rewritten {
            if let Err(error) = configured
                .gate
                .check(&tool.spec.name, &context, &rewrite.args)
            {
                return error.into();
            }
        }
        let args_json = rewritten
            .as_ref()
            .map_or(args_json, |rewrite| rewrite.args_json.as_str());
        // The plugin's timeout, capped by the host's.
        let cap = config.limits.call_timeout_ms;
        let timeout = Duration::from_millis(tool.plugin.config.timeout_ms.unwrap_or(cap).min(cap));
        let mut middleware = Vec::new();
        for name in configured
            .middleware
            .for_call(&tool.spec.name, &context.scope)
        {
            match catalog.stage(name, PluginKind::Middleware) {
                Some(plugin) => middleware.push(plugin.clone()),
                None => {
                    return ToolError::new(
                        ErrorCode::Internal,
                        format!(
                            "{} did not run: middleware {name} is configured in [pipeline] middleware but is not loaded (see `dsh plugins`), so every call it is for fails",
                            tool.spec.name
                        ),
                    )
                    .into()
                }
            }
        }
        // What the call changes in the workspace is recorded under it from here to the
        // end of its execution (`[undo]`): the filters and what follows change no file.
        let recorder = &self.runtime.services.foundation().undo;
        if recorder.is_starting() {
            let starting = recorder.clone();
            let _ = tokio::task::spawn_blocking(move || {
                starting.wait_ready(crate::services::undo::recorder::BASELINE_WAIT)
            })
            .await;
        }
        let changes = recorder
            .hold_async(crate::services::undo::CallRef::of(&context))
            .await;
        let executed = stage(
            metrics,
            Stage::Execute,
            s3_execute::execute(
                &self.runtime,
                middleware,
                &tool,
                context.clone(),
                args_json,
                s3_execute::ExecuteLimits {
                    timeout,
                    max_retries: config.limits.max_retries,
                    max_next_runs: config.limits.max_next_runs,
                },
            ),
        )
        .await;
        let changed = match changes.finish_if_idle() {
            Ok(line) => line,
            Err(changes) => tokio::task::spawn_blocking(move || changes.finish())
                .await
                .unwrap_or(None),
        };
        let result = stage(metrics, Stage::Filters, async {
            let result = configured
                .filters
                .apply(
                    &self.runtime,
                    &catalog,
                    &tool.spec.name,
                    args_json,
                    &context,
                    executed.result,
                )
                .await;
            tool.check_output(result)
        })
        .await;
        let mut result = stage(metrics, Stage::Finalize, async {
            s5_finalize::finalize(result, &context)
        })
        .await;
        // The line saying what the call changed (and how to undo it) comes last, past
        // the budget's cut, so the model always sees it.
        if let Some(line) = changed {
            result.content.push(crate::call::ContentItem::Text(line));
        }
        Outcome {
            result,
            attempts: executed.attempts,
            answered_by: executed.answered_by,
        }
    }
}

/// Runs one stage of a call: its time goes to the stage's histogram, and with traces on
/// it is a span of its own under the call's.
async fn stage<T>(
    metrics: &crate::metrics::Metrics,
    stage: Stage,
    work: impl std::future::Future<Output = T>,
) -> T {
    let started = Instant::now();
    let result = work.instrument(traces::stage_span(stage.as_str())).await;
    metrics.observe_stage(stage, started.elapsed());
    result
}
