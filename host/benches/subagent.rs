//! The host's own cost per subagent step: a subagent whose in-process scripted "model"
//! asks for the no-op `echo` tool N times, then answers (the sampling round trip to a
//! real client is left out: the scripted model answers at once, in process), against N
//! direct calls of the same tool through the same pipeline. Printed as the difference per
//! step; the target is ≤ 1 ms.
//!
//! Run with `cargo bench --bench subagent`.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh::call::{
    CallRequest, SampleContent, SampleFuture, SampleReply, SampleRequest, SampleRole, Sampler,
};

/// Steps per subagent run.
const STEPS: usize = 50;
/// Runs measured.
const ROUNDS: usize = 20;

/// A model that asks for `echo` until it has had `STEPS` results, then answers.
#[derive(Debug)]
struct Scripted;

impl Sampler for Scripted {
    fn available(&self) -> bool {
        true
    }

    fn sample<'a>(&'a self, request: &'a SampleRequest) -> SampleFuture<'a> {
        let asked = request
            .messages
            .iter()
            .filter(|m| m.role == SampleRole::Assistant)
            .count();
        let content = if asked < STEPS {
            vec![SampleContent::ToolUse {
                id: format!("u{asked}"),
                name: "echo".into(),
                input: serde_json::json!({ "text": "x" }),
            }]
        } else {
            vec![SampleContent::Text("done".into())]
        };
        Box::pin(async move {
            Ok(SampleReply {
                content,
                stop_reason: None,
                model: "scripted".into(),
                usage: None,
            })
        })
    }
}

#[tokio::main]
async fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let plugins = support::plugin_dir(scratch.path(), &[("echo", "echo")]);
    let host = support::start_host(scratch.path(), Some(plugins)).await;
    let pipeline = host.pipeline.clone();
    let never = tokio_util::sync::CancellationToken::new();
    let echo = || {
        CallRequest::new(
            "echo",
            serde_json::json!({ "text": "x" }),
            "bench",
            "default",
        )
    };
    let subagent = || CallRequest {
        sampler: Some(Arc::new(Scripted)),
        ..CallRequest::new(
            "subagent",
            serde_json::json!({ "prompt": "echo", "max_turns": STEPS + 1, "tools": ["echo"] }),
            "bench",
            "default",
        )
    };
    // Warm up both paths.
    for _ in 0..20 {
        assert!(pipeline.call(echo(), &never).await.error.is_none());
    }
    let warm = pipeline.call(subagent(), &never).await;
    assert!(warm.error.is_none(), "{}", warm.text());

    let (mut direct, mut stepped) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..STEPS {
            pipeline.call(echo(), &never).await;
        }
        direct.push(started.elapsed() / STEPS as u32);
        let started = Instant::now();
        let result = pipeline.call(subagent(), &never).await;
        assert!(result.error.is_none(), "{}", result.text());
        stepped.push(started.elapsed() / STEPS as u32);
    }
    let direct = support::percentile(&mut direct, 0.5);
    let stepped = support::percentile(&mut stepped, 0.5);
    println!("== subagent step vs direct call (echo, {STEPS} steps a run, {ROUNDS} runs, medians)");
    println!(
        "direct echo call through the pipeline      {:>9.1} µs",
        support::us(direct)
    );
    println!(
        "subagent step (sampling in process + call) {:>9.1} µs",
        support::us(stepped)
    );
    let difference = stepped.saturating_sub(direct);
    println!(
        "host cost per step                          {:>9.1} µs (target ≤ 1000 µs){}",
        support::us(difference),
        if difference <= Duration::from_millis(1) {
            ""
        } else {
            "  OVER TARGET"
        }
    );
}
