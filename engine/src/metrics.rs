//! The host's Prometheus metrics: one registry per host, what `/metrics` on the `dsh
//! serve --http` listener encodes (the Prometheus text format 0.0.4).
//!
//! This module owns the registry and every metric in it, with the names Prometheus
//! users expect (`dsh_` first, counters `_total`, durations `_seconds`). The layers
//! above record into it: the pipeline counts calls, stage and admission times
//! (`pipeline::s6_observe` observes a finished call), the engine counts CPU and memory
//! limit hits, the reloader counts reloads and refusals, the MCP front end counts live
//! owners. What a service already knows (live terminals, jobs, language servers,
//! containment runs, the admission queue) is read from it when scraped, through
//! [`Metrics::gauge_fn`].
//!
//! Label values are bounded: a tool is one the host has or `(unknown)` (see
//! `pipeline::s6_observe`), a code one of the error codes or `ok`, a plugin one that
//! loaded, a stage or a limit one of a fixed list.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of what [`Metrics::encode`] gives.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `code` label of a call that succeeded.
pub const CODE_OK: &str = "ok";

/// Upper bounds, in seconds, of the duration histograms' buckets: from a no-op tool
/// (tens of microseconds) to a long command (minutes).
const DURATION_BUCKETS: &[f64] = &[
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS.iter().copied())
}

/// Why the metrics could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot encode the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// The stages of the pipeline that are timed, in call order.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Stage {
    Gate,
    Guards,
    Execute,
    Filters,
    Finalize,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::Gate,
        Stage::Guards,
        Stage::Execute,
        Stage::Filters,
        Stage::Finalize,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Gate => "gate",
            Stage::Guards => "guards",
            Stage::Execute => "execute",
            Stage::Filters => "filters",
            Stage::Finalize => "finalize",
        }
    }
}

impl EncodeLabelValue for Stage {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// A bound a plugin's call ran into.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Limit {
    /// Its guest CPU budget (`PLUGIN_CPU_LIMIT`).
    Cpu,
    /// Its memory cap (`PLUGIN_OUT_OF_MEMORY`).
    Memory,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Cpu => "cpu",
            Limit::Memory => "memory",
        }
    }
}

impl EncodeLabelValue for Limit {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    tool: String,
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    stage: Stage,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EraLabels {
    era: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    plugin: String,
    limit: Limit,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// One host's metrics.
#[derive(Debug)]
pub struct Metrics {
    /// Locked to register a read-at-scrape gauge, and to encode.
    registry: Mutex<Registry>,
    calls: Family<CallLabels, Counter>,
    call_duration: HistogramFamily<ToolLabels>,
    /// Each stage's histogram of the family, made at start (a call observes it without
    /// a lookup), in [`Stage::ALL`] order.
    stages: [Histogram; 5],
    admission_wait: Histogram,
    limit_hits: Family<LimitLabels, Counter>,
    /// Each middleware's own time per call (its runs of the rest of the call not counted).
    middleware_duration: HistogramFamily<PluginLabels>,
    /// Records each observer saw, and those dropped because its queue was full.
    observed: Family<PluginLabels, Counter>,
    observer_drops: Family<PluginLabels, Counter>,
    owners: Gauge,
    http_requests: Family<EraLabels, Counter>,
    reloads: Counter,
    refusals: Counter,
    spilled: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let stage_duration: HistogramFamily<StageLabels> =
            Family::new_with_constructor(duration_histogram);
        let metrics = Metrics {
            registry: Mutex::new(Registry::default()),
            calls: Family::default(),
            call_duration: Family::new_with_constructor(duration_histogram),
            stages: Stage::ALL
                .map(|stage| stage_duration.get_or_create_owned(&StageLabels { stage })),
            admission_wait: duration_histogram(),
            limit_hits: Family::default(),
            middleware_duration: Family::new_with_constructor(duration_histogram),
            observed: Family::default(),
            observer_drops: Family::default(),
            owners: Gauge::default(),
            http_requests: Family::default(),
            reloads: Counter::default(),
            refusals: Counter::default(),
            spilled: Counter::default(),
        };
        {
            let mut registry = metrics.registry.lock().unwrap();
            registry.register(
                "dsh_calls",
                "Tool calls finished, by tool and code (`ok`, or the error code)",
                metrics.calls.clone(),
            );
            registry.register(
                "dsh_call_duration_seconds",
                "Tool call duration, from the call's arrival to its result, by tool",
                metrics.call_duration.clone(),
            );
            registry.register(
                "dsh_stage_duration_seconds",
                "Time a call spent in each pipeline stage (gate, guards, execute, filters, \
                 finalize)",
                stage_duration,
            );
            registry.register(
                "dsh_admission_wait_seconds",
                "Time a call waited for an admission slot (0 when one was free)",
                metrics.admission_wait.clone(),
            );
            registry.register(
                "dsh_plugin_limit_hits",
                "Plugin calls stopped by a bound, by plugin and limit (cpu, memory)",
                metrics.limit_hits.clone(),
            );
            registry.register(
                "dsh_middleware_duration_seconds",
                "A middleware's own time in a call, by plugin (the rest of the call it runs \
                 through `next` not counted)",
                metrics.middleware_duration.clone(),
            );
            registry.register(
                "dsh_observer_records",
                "Event log records an observer was given, by plugin",
                metrics.observed.clone(),
            );
            registry.register(
                "dsh_observer_dropped",
                "Event log records an observer missed because its queue was full ([limits] \
                 observer_queue), by plugin",
                metrics.observer_drops.clone(),
            );
            registry.register(
                "dsh_owners",
                "Live owners: MCP connections (the stdio client, each HTTP session; a 2026-07-28 request over HTTP while it is served)",
                metrics.owners.clone(),
            );
            registry.register(
                "dsh_http_requests",
                "MCP requests admitted over HTTP, by protocol era (`2026-07-28`: stateless, \
                 owned by the token's principal; `2025`: the handshake and its sessions)",
                metrics.http_requests.clone(),
            );
            registry.register(
                "dsh_plugin_reloads",
                "Plugin versions swapped in from the plugin directory while serving",
                metrics.reloads.clone(),
            );
            registry.register(
                "dsh_plugin_refusals",
                "Plugin versions from the plugin directory refused while serving (the \
                 version before keeps serving)",
                metrics.refusals.clone(),
            );
            registry.register(
                "dsh_spilled_bytes",
                "Bytes of call output written to spill files (the full text of a result \
                 cut to its budget)",
                metrics.spilled.clone(),
            );
        }
        metrics
    }

    /// Counts an MCP request admitted over HTTP, of the 2026-07-28 era or not.
    pub fn http_request(&self, modern: bool) {
        let era = if modern { "2026-07-28" } else { "2025" };
        self.http_requests.get_or_create(&EraLabels { era }).inc();
    }

    /// Counts a finished call of `tool` (already bounded by the caller) that ended with
    /// `code` (`None`: it succeeded) after `elapsed`.
    pub fn observe_call(&self, tool: &str, code: Option<&str>, elapsed: Duration) {
        let labels = CallLabels {
            tool: tool.to_string(),
            code: code.unwrap_or(CODE_OK).to_string(),
        };
        self.calls.get_or_create(&labels).inc();
        let labels = ToolLabels { tool: labels.tool };
        self.call_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Records the time a call spent in `stage`.
    pub fn observe_stage(&self, stage: Stage, elapsed: Duration) {
        self.stages[stage as usize].observe(elapsed.as_secs_f64());
    }

    /// Counts `bytes` of a call's output written to a spill file.
    pub fn spilled(&self, bytes: u64) {
        self.spilled.inc_by(bytes);
    }

    /// Records how long a call waited for its admission slot.
    pub fn observe_admission_wait(&self, waited: Duration) {
        self.admission_wait.observe(waited.as_secs_f64());
    }

    /// Counts a call of `plugin` stopped by `limit`.
    pub fn limit_hit(&self, plugin: &str, limit: Limit) {
        self.limit_hits
            .get_or_create(&LimitLabels {
                plugin: plugin.to_string(),
                limit,
            })
            .inc();
    }

    /// Records middleware `plugin`'s own time in one call.
    pub fn observe_middleware(&self, plugin: &str, own: Duration) {
        self.middleware_duration
            .get_or_create(&PluginLabels {
                plugin: plugin.to_string(),
            })
            .observe(own.as_secs_f64());
    }

    /// Counts a record observer `plugin` was given.
    pub fn observed(&self, plugin: &str) {
        self.observed
            .get_or_create(&PluginLabels {
                plugin: plugin.to_string(),
            })
            .inc();
    }

    /// Counts a record observer `plugin` missed (its queue was full).
    pub fn observer_dropped(&self, plugin: &str) {
        self.observer_drops
            .get_or_create(&PluginLabels {
                plugin: plugin.to_string(),
            })
            .inc();
    }

    /// Counts a live owner until the returned guard is dropped.
    pub fn owner(self: &Arc<Self>) -> LiveOwner {
        self.owners.inc();
        LiveOwner {
            metrics: self.clone(),
        }
    }

    /// Counts a plugin version swapped in from the plugin directory while serving.
    pub fn plugin_reloaded(&self) {
        self.reloads.inc();
    }

    /// Counts a plugin version from the plugin directory refused while serving.
    pub fn plugin_refused(&self) {
        self.refusals.inc();
    }

    /// Adds a gauge `name` whose value `read` gives when the metrics are scraped.
    pub fn gauge_fn(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> i64 + Send + Sync + 'static,
    ) {
        self.registry
            .lock()
            .unwrap()
            .register_collector(Box::new(GaugeFn {
                name,
                help,
                read: Box::new(read),
            }));
    }

    /// Adds a family of counters `name` (`_total` added) whose samples, each its labels
    /// and value, `read` gives when the metrics are scraped.
    pub fn counters_fn(
        &self,
        name: &'static str,
        help: &'static str,
        read: impl Fn() -> Vec<(Vec<(&'static str, String)>, f64)> + Send + Sync + 'static,
    ) {
        self.registry
            .lock()
            .unwrap()
            .register_collector(Box::new(CountersFn {
                name,
                help,
                read: Box::new(read),
            }));
    }

    /// Every metric, in the Prometheus text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, MetricsError> {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
        Ok(text)
    }
}

/// A live owner, counted in `dsh_owners` until dropped.
#[derive(Debug)]
pub struct LiveOwner {
    metrics: Arc<Metrics>,
}

impl Drop for LiveOwner {
    fn drop(&mut self) {
        self.metrics.owners.dec();
    }
}

/// A gauge read when scraped.
struct GaugeFn {
    name: &'static str,
    help: &'static str,
    read: Box<dyn Fn() -> i64 + Send + Sync>,
}

impl std::fmt::Debug for GaugeFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GaugeFn").field("name", &self.name).finish()
    }
}

impl Collector for GaugeFn {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = ConstGauge::new((self.read)());
        let metric = encoder.encode_descriptor(self.name, self.help, None, gauge.metric_type())?;
        gauge.encode(metric)
    }
}

/// A family of counters read when scraped.
struct CountersFn {
    name: &'static str,
    help: &'static str,
    #[allow(clippy::type_complexity)]
    read: Box<dyn Fn() -> Vec<(Vec<(&'static str, String)>, f64)> + Send + Sync>,
}

impl std::fmt::Debug for CountersFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountersFn")
            .field("name", &self.name)
            .finish()
    }
}

impl Collector for CountersFn {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::TypedMetric as _;
        let samples = (self.read)();
        if samples.is_empty() {
            return Ok(());
        }
        let mut family =
            encoder.encode_descriptor(self.name, self.help, None, ConstCounter::<f64>::TYPE)?;
        for (labels, value) in samples {
            let metric = family.encode_family(&labels)?;
            ConstCounter::new(value).encode(metric)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `line_start` (its name and labels) in `text`.
    fn sample(text: &str, line_start: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(line_start)?.trim().parse().ok())
    }

    #[test]
    fn calls_are_counted_by_tool_and_code_in_the_text_format() {
        let metrics = Metrics::new();
        metrics.observe_call("bash", None, Duration::from_millis(3));
        metrics.observe_call("bash", None, Duration::from_millis(4));
        metrics.observe_call("bash", Some("TIMEOUT"), Duration::from_secs(2));
        metrics.observe_stage(Stage::Execute, Duration::from_micros(20));
        let text = metrics.encode().unwrap();
        assert!(text.contains("# TYPE dsh_calls_total counter\n"), "{text}");
        assert_eq!(
            sample(&text, r#"dsh_calls_total{tool="bash",code="ok"}"#),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, r#"dsh_calls_total{tool="bash",code="TIMEOUT"}"#),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, r#"dsh_call_duration_seconds_count{tool="bash"}"#),
            Some(3.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"dsh_call_duration_seconds_bucket{tool="bash",le="0.005"}"#
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            sample(
                &text,
                r#"dsh_stage_duration_seconds_count{stage="execute"}"#
            ),
            Some(1.0)
        );
    }

    #[test]
    fn gauges_are_read_when_scraped_and_owners_counted_while_held() {
        let metrics = Arc::new(Metrics::new());
        let value = Arc::new(std::sync::atomic::AtomicI64::new(3));
        let read = value.clone();
        metrics.gauge_fn("dsh_test_things", "Things", move || {
            read.load(std::sync::atomic::Ordering::Relaxed)
        });
        let owner = metrics.owner();
        let text = metrics.encode().unwrap();
        assert_eq!(sample(&text, "dsh_test_things "), Some(3.0), "{text}");
        assert_eq!(sample(&text, "dsh_owners "), Some(1.0));
        value.store(5, std::sync::atomic::Ordering::Relaxed);
        drop(owner);
        let text = metrics.encode().unwrap();
        assert_eq!(sample(&text, "dsh_test_things "), Some(5.0));
        assert_eq!(sample(&text, "dsh_owners "), Some(0.0));
    }
}
