//! The host's own cost per subagent step: a subagent whose scripted "model" asks for the
//! no-op `echo` tool N times, then answers, against N direct calls of the same tool
//! through the same pipeline. Printed as the difference per step; the target is ≤ 1 ms.
//!
//! The model is, in turn: the client's, an in-process `Sampler` that answers at once (the
//! sampling round trip to a real client left out); and an operator's model endpoint for
//! each API (`openai-chat`, `anthropic-messages`), a loopback HTTP/1.1 server on a thread
//! of this process speaking the API's wire format, whose own time per request (from the
//! request read to the answer written) is measured and taken out. What stays in is dsh's:
//! the request's JSON, the HTTP exchange on loopback, the reply's parse, the loop.
//!
//! Run with `cargo bench --bench subagent`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

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

/// An operator's model endpoint on loopback: asks for `echo` until a request carries
/// `STEPS` results, then answers. `busy_ns` adds up its own time per request.
struct Endpoint {
    port: u16,
    busy_ns: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
}

fn endpoint(api: &'static str) -> Endpoint {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let busy_ns = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let (busy, count) = (busy_ns.clone(), requests.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (busy, count) = (busy.clone(), count.clone());
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':') {
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let started = Instant::now();
                    let request: Value = serde_json::from_slice(&body).unwrap();
                    let reply = scripted_reply(api, &request).to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        reply.len()
                    );
                    writer.write_all(head.as_bytes()).unwrap();
                    writer.write_all(reply.as_bytes()).unwrap();
                    busy.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    count.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    Endpoint {
        port,
        busy_ns,
        requests,
    }
}

/// The scripted model's reply to `request`, in `api`'s wire format.
fn scripted_reply(api: &str, request: &Value) -> Value {
    let messages = request["messages"].as_array().unwrap();
    let usage_openai = json!({"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12});
    let usage_anthropic = json!({"input_tokens": 10, "output_tokens": 2});
    if api == "openai-chat" {
        let results = messages.iter().filter(|m| m["role"] == "tool").count();
        let message = if results < STEPS {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("c{results}"),
                "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}]})
        } else {
            json!({"role": "assistant", "content": "done"})
        };
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "bench",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage_openai})
    } else {
        let results = messages.iter().filter(|m| m["role"] == "assistant").count();
        let content = if results < STEPS {
            json!([{"type": "tool_use", "id": format!("t{results}"), "name": "echo", "input": {"text": "x"}}])
        } else {
            json!([{"type": "text", "text": "done"}])
        };
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "bench",
            "content": content, "stop_reason": "end_turn", "usage": usage_anthropic})
    }
}

/// The median per-step time of `ROUNDS` subagent runs of `STEPS` steps each made by
/// `subagent()`, less `server` time per step when the model is an endpoint.
async fn per_step(
    pipeline: &dsh::pipeline::Pipeline,
    subagent: impl Fn() -> CallRequest,
    server: Option<&Endpoint>,
) -> Duration {
    let never = tokio_util::sync::CancellationToken::new();
    let warm = pipeline.call(subagent(), &never).await;
    assert!(warm.error.is_none(), "{}", warm.text());
    let mut stepped = Vec::new();
    for _ in 0..ROUNDS {
        let busy_before = server.map_or(0, |s| s.busy_ns.load(Ordering::Relaxed));
        let started = Instant::now();
        let result = pipeline.call(subagent(), &never).await;
        assert!(result.error.is_none(), "{}", result.text());
        let busy = server.map_or(0, |s| s.busy_ns.load(Ordering::Relaxed)) - busy_before;
        stepped.push(started.elapsed().saturating_sub(Duration::from_nanos(busy)) / STEPS as u32);
    }
    support::percentile(&mut stepped, 0.5)
}

#[tokio::main]
async fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let plugins = support::plugin_dir(scratch.path(), &[("echo", "echo")]);
    let endpoints = [
        ("openai-chat", endpoint("openai-chat")),
        ("anthropic-messages", endpoint("anthropic-messages")),
    ];
    let mut config = String::new();
    for (api, server) in &endpoints {
        config.push_str(&format!(
            "[subagent.models.{api}]\napi = \"{api}\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"bench\"\n",
            server.port
        ));
    }
    config
        .push_str("[subagent.scopes.default]\nallow = [\"openai-chat\", \"anthropic-messages\"]\n");
    let config = dsh::config::Config::parse(&config).unwrap();
    let host = support::start_host_with(scratch.path(), Some(plugins), config).await;
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
    let subagent = |model: &'static str| {
        move || CallRequest {
            sampler: Some(Arc::new(Scripted)),
            ..CallRequest::new(
                "subagent",
                serde_json::json!({ "prompt": "echo", "max_turns": STEPS + 1, "tools": ["echo"], "model": model }),
                "bench",
                "default",
            )
        }
    };
    // Warm up the direct path.
    for _ in 0..20 {
        assert!(pipeline.call(echo(), &never).await.error.is_none());
    }
    let mut direct = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..STEPS {
            pipeline.call(echo(), &never).await;
        }
        direct.push(started.elapsed() / STEPS as u32);
    }
    let direct = support::percentile(&mut direct, 0.5);
    println!("== subagent step vs direct call (echo, {STEPS} steps a run, {ROUNDS} runs, medians)");
    println!(
        "{:<47}{:>9.1} µs",
        "direct echo call through the pipeline",
        support::us(direct)
    );
    let mut rows = vec![(
        "client's model (sampling in process)".to_string(),
        per_step(&pipeline, subagent("client"), None).await,
    )];
    for (api, server) in &endpoints {
        let step = per_step(&pipeline, subagent(api), Some(server)).await;
        let served = server.requests.load(Ordering::Relaxed).max(1);
        println!(
            "{:<47}{:>9.1} µs (taken out)",
            format!("{api} endpoint's own time per request"),
            server.busy_ns.load(Ordering::Relaxed) as f64 / served as f64 / 1000.0
        );
        rows.push((format!("operator model, {api}"), step));
    }
    for (name, step) in rows {
        let difference = step.saturating_sub(direct);
        println!(
            "{name:<38} step {:>9.1} µs; host cost per step {:>9.1} µs (target ≤ 1000 µs){}",
            support::us(step),
            support::us(difference),
            if difference <= Duration::from_millis(1) {
                ""
            } else {
                "  OVER TARGET"
            }
        );
    }
}
