//! OpenTelemetry traces of calls, sent over OTLP when `[traces]` in `dsh.toml` names an
//! endpoint (off by default).
//!
//! This module owns the spans' target, names and fields, the OTLP exporter and its
//! batching thread, and the W3C trace context a client sends in a request's `_meta`.
//! A call is one span (`tools/call TOOL`, with the tool, the owner, the call id and the
//! code as attributes) whose parent is the client's `traceparent` when it sent one; each
//! pipeline stage is a child of it, and each host call a plugin makes (`process.run`,
//! `terminal.send`, `lsp.query`, …) a child of its stage.
//!
//! The spans are `tracing` spans of target [`TARGET`], which only the OpenTelemetry layer
//! ([`exporting`]) takes: with traces off no layer wants them, so each is one check of
//! its call site's interest and nothing is allocated or recorded.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of every span this module's functions make, and of the host-call spans.
pub const TARGET: &str = "dsh::traces";

/// The path OTLP/HTTP receivers take traces on, added to an endpoint given without one.
pub const TRACES_PATH: &str = "/v1/traces";

/// Why traces cannot be sent.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error("cannot start the OTLP trace exporter for {endpoint}: {message}")]
    Exporter { endpoint: String, message: String },
}

/// The provider in use, for [`flush`] and [`shutdown`] (set once, by [`exporting`]).
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// The `tracing` layer that sends the spans of [`TARGET`] to `endpoint` (an OTLP/HTTP
/// traces URL, protobuf), batched on a thread of its own and sent at most `timeout`
/// apart from their end. Only the first call in a process installs a provider.
pub fn exporting<S>(
    endpoint: &str,
    timeout: Duration,
) -> Result<impl tracing_subscriber::Layer<S>, TracesError>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use tracing_subscriber::Layer as _;
    crate::tls::install_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(timeout)
        .build()
        .map_err(|error| TracesError::Exporter {
            endpoint: endpoint.to_string(),
            message: error.to_string(),
        })?;
    let resource = Resource::builder()
        .with_service_name("dsh")
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_attribute(opentelemetry::KeyValue::new(
            "process.pid",
            i64::from(std::process::id()),
        ))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("dsh");
    let _ = PROVIDER.set(provider);
    // The spans' attributes are the ones named here: not where in dsh's source a span
    // was made, nor on which thread, nor tracing's busy and idle times.
    Ok(tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(
            tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::INFO),
        ))
}

/// Sends every span ended so far (before an upgrade's `exec`, which ends the batching
/// thread). Does nothing when traces are off.
pub fn flush() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(error) = provider.force_flush() {
            tracing::warn!(%error, "cannot send the last spans to the OTLP endpoint");
        }
    }
}

/// Sends what is left and stops the batching thread (at the process's end).
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(error) = provider.shutdown() {
            tracing::warn!(%error, "cannot send the last spans to the OTLP endpoint");
        }
    }
}

/// The W3C trace context a client sent with a request (`traceparent`, and `tracestate`
/// when there is one), in MCP's `_meta`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceContext {
    headers: HashMap<String, String>,
}

impl TraceContext {
    /// The trace context in a request's `_meta`: none without a `traceparent` string.
    pub fn from_meta(meta: &serde_json::Map<String, serde_json::Value>) -> Option<Self> {
        let traceparent = meta.get("traceparent")?.as_str()?;
        let mut headers = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
        if let Some(tracestate) = meta.get("tracestate").and_then(|value| value.as_str()) {
            headers.insert("tracestate".to_string(), tracestate.to_string());
        }
        Some(TraceContext { headers })
    }
}

/// What a call's span descends from.
#[derive(Debug, Clone, Default)]
pub enum CallParent {
    /// Nothing: the call starts a trace of its own.
    #[default]
    None,
    /// The client's trace (a `traceparent` it sent); one that does not parse is ignored.
    Remote(TraceContext),
    /// A span of this host: the call a subagent's step runs inside.
    Local(tracing::Span),
}

/// The span of one call, not entered yet; its code is recorded by [`finished`].
pub fn call_span(tool: &str, owner: &str, call_id: &str, parent: &CallParent) -> tracing::Span {
    let span = match parent {
        CallParent::Local(parent) => tracing::info_span!(
            target: TARGET,
            parent: parent,
            "call",
            otel.name = %format_args!("tools/call {tool}"),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            dsh.tool = tool,
            dsh.owner = owner,
            dsh.call_id = call_id,
            dsh.code = tracing::field::Empty,
        ),
        _ => tracing::info_span!(
            target: TARGET,
            parent: None,
            "call",
            otel.name = %format_args!("tools/call {tool}"),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            dsh.tool = tool,
            dsh.owner = owner,
            dsh.call_id = call_id,
            dsh.code = tracing::field::Empty,
        ),
    };
    if let (CallParent::Remote(context), false) = (parent, span.is_disabled()) {
        let remote = TraceContextPropagator::new().extract(&context.headers);
        let _ = span.set_parent(remote);
    }
    span
}

/// Records a call's outcome on its span: `code` is `ok` or an error code, and an error
/// is the span's status.
pub fn finished(span: &tracing::Span, code: &str, ok: bool) {
    span.record("dsh.code", code);
    if !ok {
        span.record("otel.status_code", "ERROR");
    }
}

/// The span of one pipeline stage (`gate`, `guards`, …) of the call whose span is current.
pub fn stage_span(stage: &'static str) -> tracing::Span {
    tracing::info_span!(target: TARGET, "stage", otel.name = stage)
}

/// The span of one guard or filter run, under its stage's.
pub fn plugin_span(role: &'static str, plugin: &str) -> tracing::Span {
    tracing::info_span!(
        target: TARGET,
        "plugin",
        otel.name = %format_args!("{role} {plugin}"),
        dsh.plugin = plugin,
    )
}

/// The span of one host call a plugin makes (`process.run`, `terminal.send`, …).
pub fn host_call_span(name: &'static str) -> tracing::Span {
    tracing::info_span!(target: TARGET, "host", otel.name = name)
}

/// An endpoint as `[traces] endpoint` may give it, checked: `http://HOST:PORT` (then
/// [`TRACES_PATH`] is added) or a whole URL with its path. `https` is refused: dsh has no
/// TLS stack and sends to a collector beside it.
pub fn endpoint_url(endpoint: &str) -> Result<String, String> {
    let uri: hyper::Uri = endpoint
        .parse()
        .map_err(|error| format!("`{endpoint}` is not a URL: {error}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "`{endpoint}`: dsh sends traces over plain HTTP only, to an OpenTelemetry \
                 collector beside it (give it the TLS part); use an http:// endpoint"
            ))
        }
        _ => {
            return Err(format!(
                "`{endpoint}` is not an http:// URL (an OTLP/HTTP endpoint, such as \
                 http://127.0.0.1:4318)"
            ))
        }
    }
    if uri.authority().is_none() {
        return Err(format!("`{endpoint}` names no host"));
    }
    Ok(match uri.path() {
        "" | "/" => format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/')),
        _ => endpoint.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_without_a_path_gets_the_traces_path() {
        assert_eq!(
            endpoint_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            endpoint_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            endpoint_url("http://collector:4318/otlp/v1/traces").unwrap(),
            "http://collector:4318/otlp/v1/traces"
        );
    }

    #[test]
    fn https_and_non_urls_are_refused_with_why() {
        let error = endpoint_url("https://collector:4318").unwrap_err();
        assert!(error.contains("plain HTTP"), "{error}");
        let error = endpoint_url("collector:4318").unwrap_err();
        assert!(error.contains("http://"), "{error}");
        assert!(endpoint_url("http://").is_err());
    }

    #[test]
    fn the_trace_context_comes_from_meta_when_it_has_a_traceparent() {
        let meta = serde_json::json!({
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "tracestate": "vendor=x",
            "progressToken": 1,
        });
        let context = TraceContext::from_meta(meta.as_object().unwrap()).unwrap();
        assert_eq!(context.headers.len(), 2);
        let none = serde_json::json!({ "progressToken": 1, "traceparent": 7 });
        assert_eq!(TraceContext::from_meta(none.as_object().unwrap()), None);
    }

    #[test]
    fn with_traces_off_a_call_span_is_disabled() {
        // No subscriber in this test thread wants the target: nothing is recorded.
        let span = call_span("bash", "owner", "c1", &CallParent::None);
        assert!(span.is_disabled());
        finished(&span, "ok", true);
    }
}
