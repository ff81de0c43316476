//! Stage 6, result observers: they see every finished call and change nothing. The
//! session event log gets its `tool/result` event here, and the per-tool metrics (calls,
//! errors by code, retries, a latency histogram) are counted here. `dsh stats` reads the
//! metrics from a running server, or rebuilds them from a session's event log. The
//! host's Prometheus metrics ([`crate::metrics`]: `dsh_calls_total`,
//! `dsh_call_duration_seconds`) are counted here too.
//!
//! The observer components (`[pipeline] observers`, [`ObserverSet`]) get the event log's
//! records of calls, approvals and jobs off the call's path: the log hands each record
//! to every observer's bounded queue ([`crate::session::event_log::EventTap`]) and moves
//! on; one task per observer gives them, one at a time, to a fresh instance of it. A full
//! queue drops the record and counts it (`dsh_observer_dropped_total`, and an
//! `observer/dropped` event when the observer takes its next record); an observer that
//! fails is logged and counted, and the call it saw is long done.
//!
//! The metrics table is bounded by the tools the server has: a call naming a tool the
//! caller cannot see (`UNKNOWN_TOOL`, it never ran) is counted under [`UNKNOWN_TOOL`],
//! never under the name the client sent. The Prometheus metrics take the same key.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::call::{CallRequest, CallResult};
use crate::session::Session;

/// Upper bounds (inclusive, in milliseconds) of the latency histogram's buckets; one more
/// bucket counts everything slower.
pub const LATENCY_BUCKETS_MS: &[u64] = &[1, 5, 10, 50, 100, 500, 1_000, 5_000, 10_000, 60_000];

/// The one bucket of every call naming a tool that does not exist (for its caller).
pub const UNKNOWN_TOOL: &str = "(unknown)";

/// The metrics key of a call to `tool` that ended with `code` after `attempts`: the
/// tool's name, or [`UNKNOWN_TOOL`] when the name resolved to no tool.
pub fn metrics_key<'a>(tool: &'a str, code: Option<&str>, attempts: u64) -> &'a str {
    if attempts == 0 && code == Some(crate::error::ErrorCode::UnknownTool.as_str()) {
        UNKNOWN_TOOL
    } else {
        tool
    }
}

/// What was seen of one tool's calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ToolStats {
    pub calls: u64,
    /// Failed calls by error code.
    pub errors: BTreeMap<String, u64>,
    /// Attempts beyond the first (the retry middleware).
    pub retries: u64,
    /// Calls per latency bucket, the buckets of [`LATENCY_BUCKETS_MS`] then the rest.
    pub latency_buckets: Vec<u64>,
    pub latency_total_us: u64,
    pub latency_max_us: u64,
}

impl ToolStats {
    fn record(&mut self, code: Option<&str>, attempts: u64, elapsed_us: u64) {
        self.calls += 1;
        if let Some(code) = code {
            *self.errors.entry(code.to_string()).or_default() += 1;
        }
        self.retries += attempts.saturating_sub(1);
        if self.latency_buckets.is_empty() {
            self.latency_buckets = vec![0; LATENCY_BUCKETS_MS.len() + 1];
        }
        let bucket = LATENCY_BUCKETS_MS
            .iter()
            .position(|&bound| elapsed_us <= bound * 1000)
            .unwrap_or(LATENCY_BUCKETS_MS.len());
        self.latency_buckets[bucket] += 1;
        self.latency_total_us += elapsed_us;
        self.latency_max_us = self.latency_max_us.max(elapsed_us);
    }
}

/// Per-tool metrics, by tool name.
#[derive(Debug, Default)]
pub struct Metrics {
    tools: Mutex<BTreeMap<String, ToolStats>>,
}

impl Metrics {
    /// A copy of every tool's stats.
    pub fn snapshot(&self) -> BTreeMap<String, ToolStats> {
        self.tools.lock().unwrap().clone()
    }

    /// Counts a call; a call naming no known tool goes to [`UNKNOWN_TOOL`].
    fn record(&self, tool: &str, code: Option<&str>, attempts: u64, elapsed_us: u64) {
        let key = metrics_key(tool, code, attempts);
        let mut tools = self.tools.lock().unwrap();
        match tools.get_mut(key) {
            Some(stats) => stats,
            None => tools.entry(key.to_string()).or_default(),
        }
        .record(code, attempts, elapsed_us);
    }

    /// The metrics a session's `tool/result` events add up to.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Value>) -> Metrics {
        let metrics = Metrics::default();
        for event in events {
            if event["event"] != "tool/result" {
                continue;
            }
            metrics.record(
                event["tool"].as_str().unwrap_or("?"),
                event["code"].as_str(),
                event["attempts"].as_u64().unwrap_or(1),
                event["duration_us"].as_u64().unwrap_or(0),
            );
        }
        metrics
    }
}

/// The `tool/result` event: how a call ended (serialized straight from the call's
/// parts, with no JSON map built on the way).
#[derive(serde::Serialize)]
struct ResultEvent<'a> {
    call_id: &'a str,
    session: &'a str,
    owner: &'a str,
    scope: &'a str,
    tool: &'a str,
    is_error: bool,
    code: Option<crate::error::ErrorCode>,
    message: Option<&'a str>,
    content_bytes: usize,
    full_output_path: Option<&'a std::path::Path>,
    duration_us: u64,
    attempts: u32,
    /// The middleware that answered the call without running its tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    answered_by: Option<&'a str>,
}

/// The observers of finished calls.
pub struct Observers {
    session: Arc<Session>,
    pub metrics: Metrics,
    /// The host's Prometheus metrics.
    prometheus: Arc<crate::metrics::Metrics>,
}

impl Observers {
    pub fn new(session: Arc<Session>, prometheus: Arc<crate::metrics::Metrics>) -> Self {
        Observers {
            session,
            metrics: Metrics::default(),
            prometheus,
        }
    }

    /// Records a finished call that ran its tool `attempts` times (0: it never ran, or it
    /// was cancelled).
    pub fn result(
        &self,
        call_id: &str,
        request: &CallRequest,
        result: &CallResult,
        elapsed: Duration,
        attempts: u32,
        answered_by: Option<&str>,
    ) {
        let code = result.error.as_ref().map(|e| e.code);
        let elapsed_us = elapsed.as_micros() as u64;
        self.session.events.write(
            "tool/result",
            ResultEvent {
                call_id,
                session: &self.session.id,
                owner: &request.owner,
                scope: &request.scope,
                tool: &request.tool,
                is_error: result.is_error(),
                code,
                message: result.error.as_ref().map(|e| e.message.as_str()),
                content_bytes: result.content_bytes(),
                full_output_path: result.full_output_path.as_deref(),
                duration_us: elapsed_us,
                attempts,
                answered_by,
            },
        );
        let code_text = code.map(|c| c.to_string());
        let key = metrics_key(&request.tool, code_text.as_deref(), u64::from(attempts));
        self.prometheus
            .observe_call(key, code_text.as_deref(), elapsed);
        if let Some(path) = &result.full_output_path {
            // Only a result cut to its budget has one: the stat is off the common path.
            match std::fs::metadata(path) {
                Ok(spill) => self.prometheus.spilled(spill.len()),
                Err(error) => {
                    tracing::debug!(path = %path.display(), %error, "cannot size a spill file")
                }
            }
        }
        self.metrics.record(
            &request.tool,
            code_text.as_deref(),
            u64::from(attempts),
            elapsed_us,
        );
    }
}

/// The kinds of record the observers see.
pub const OBSERVED: &[&str] = &[
    "tool/call",
    "tool/result",
    "approval",
    "job/start",
    "job/end",
];

/// One record on its way to an observer.
struct Record {
    kind: &'static str,
    json: Arc<str>,
}

/// One observer's end of the tap: its queue and what it missed.
struct ObserverQueue {
    name: Arc<str>,
    records: tokio::sync::mpsc::Sender<Record>,
    /// Records dropped since the observer last took one.
    missed: Arc<std::sync::atomic::AtomicU64>,
}

/// The observers `[pipeline] observers` names, each with its queue and its task. Dropped
/// (a configuration without them), each task ends once it has given out what is queued.
pub struct ObserverSet {
    queues: Vec<ObserverQueue>,
    prometheus: Arc<crate::metrics::Metrics>,
}

impl ObserverSet {
    /// Starts a task per observer in `names`, each with a queue of `capacity` records,
    /// on the current tokio runtime (none: no observer runs, and that is logged).
    pub fn start(
        names: &[String],
        capacity: usize,
        runtime: &Arc<crate::engine::Runtime>,
        registry: &Arc<crate::registry::Registry>,
        session: &Arc<Session>,
    ) -> Option<(Arc<ObserverSet>, Vec<tokio::task::JoinHandle<()>>)> {
        if names.is_empty() {
            return None;
        }
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(observers = ?names, "no async runtime: the observers do not run");
            return None;
        };
        let mut tasks = Vec::new();
        let queues = names
            .iter()
            .map(|name| {
                let (records, queued) = tokio::sync::mpsc::channel(capacity.max(1));
                let queue = ObserverQueue {
                    name: name.as_str().into(),
                    records,
                    missed: Default::default(),
                };
                tasks.push(tokio.spawn(serve_observer(
                    queue.name.clone(),
                    queued,
                    queue.missed.clone(),
                    runtime.clone(),
                    registry.clone(),
                    session.clone(),
                )));
                queue
            })
            .collect();
        let set = Arc::new(ObserverSet {
            queues,
            prometheus: runtime.metrics.clone(),
        });
        Some((set, tasks))
    }
}

impl crate::session::event_log::EventTap for ObserverSet {
    fn written(&self, event: &str, line: &[u8]) {
        let Some(kind) = OBSERVED.iter().find(|kind| **kind == event) else {
            return;
        };
        // The line is JSON serde wrote: UTF-8.
        let Ok(json) = std::str::from_utf8(line) else {
            return;
        };
        let json: Arc<str> = json.into();
        for queue in &self.queues {
            let record = Record {
                kind,
                json: json.clone(),
            };
            match queue.records.try_send(record) {
                Ok(()) => {}
                Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                    queue
                        .missed
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.prometheus.observer_dropped(&queue.name);
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }
}

/// Gives observer `name` its records, one at a time, each to a fresh instance of the
/// version serving when the record is taken.
async fn serve_observer(
    name: Arc<str>,
    mut queued: tokio::sync::mpsc::Receiver<Record>,
    missed: Arc<std::sync::atomic::AtomicU64>,
    runtime: Arc<crate::engine::Runtime>,
    registry: Arc<crate::registry::Registry>,
    session: Arc<Session>,
) {
    use tracing::Instrument as _;
    let mut taken: u64 = 0;
    while let Some(record) = queued.recv().await {
        let dropped = missed.swap(0, std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!(observer = %name, dropped, "an observer's queue was full: records it never saw ([limits] observer_queue)");
            session.events.write(
                "observer/dropped",
                serde_json::json!({ "observer": &*name, "dropped": dropped }),
            );
        }
        let catalog = registry.snapshot();
        let Some(plugin) = catalog
            .stage(&name, crate::engine::plugin::PluginKind::Observer)
            .cloned()
        else {
            continue;
        };
        drop(catalog);
        taken += 1;
        runtime.metrics.observed(&name);
        let context = crate::call::CallContext {
            owner: "dsh".into(),
            session: session.id.clone(),
            call_id: format!("observe-{taken}"),
            workdir: session.workdir.clone(),
            scope: "".into(),
            tool: "".into(),
            spill_dir: session.spill_dir.clone(),
            output_budget: 0,
            spill_cap: 0,
            notices: Default::default(),
            sampler: None,
            step: None,
        };
        let observed = Box::pin(plugin.observe(&runtime, context, record.kind, &record.json))
            .instrument(crate::traces::plugin_span("observer", &name))
            .await;
        if let Err(failure) = observed {
            tracing::warn!(observer = %name, kind = record.kind, code = %failure.code, message = %failure.message, "an observer failed on a record (no call is affected)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stats_add_up_from_events() {
        let events: Vec<Value> = [
            ("bash", None, 1, 800),
            ("bash", Some("TIMEOUT"), 1, 2_000_000),
            ("flaky", None, 2, 40_000),
            ("bash", Some("DENIED"), 0, 300),
        ]
        .iter()
        .map(|(tool, code, attempts, us)| {
            json!({"event": "tool/result", "tool": tool, "code": code, "attempts": attempts, "duration_us": us})
        })
        .chain([json!({"event": "tool/call", "tool": "bash"})])
        .collect();
        let stats = Metrics::from_events(&events).snapshot();
        let bash = &stats["bash"];
        assert_eq!(bash.calls, 3);
        assert_eq!(bash.errors["TIMEOUT"], 1);
        assert_eq!(bash.errors["DENIED"], 1);
        assert_eq!(bash.retries, 0);
        assert_eq!(bash.latency_buckets[0], 2, "two calls within 1 ms");
        assert_eq!(bash.latency_buckets[7], 1, "one within 5 s");
        assert_eq!(bash.latency_max_us, 2_000_000);
        assert_eq!(stats["flaky"].retries, 1);
    }

    #[test]
    fn calls_naming_unknown_tools_share_one_bucket() {
        let metrics = Metrics::default();
        for n in 0..1000 {
            metrics.record(&format!("no_such_tool_{n}"), Some("UNKNOWN_TOOL"), 0, 10);
        }
        metrics.record("bash", None, 1, 10);
        let stats = metrics.snapshot();
        assert_eq!(
            stats.keys().collect::<Vec<_>>(),
            vec![UNKNOWN_TOOL, "bash"],
            "one bucket for every unknown name"
        );
        assert_eq!(stats[UNKNOWN_TOOL].calls, 1000);
        assert_eq!(stats[UNKNOWN_TOOL].errors["UNKNOWN_TOOL"], 1000);
    }
}
