//! The console's feed of the event log (every record as it is written: calls, results,
//! approvals, jobs) and its figures (calls, errors, latency, jobs and terminals, one
//! sample a second for the last [`FIGURES_KEPT`] seconds, read from the same registry
//! as `/metrics`).
//!
//! The feed is a tap on the event log: each record is copied into a ring of the last
//! [`FEED_KEPT`] (what a page opened now shows first) and a broadcast channel of as many
//! (a page that falls further behind skips what it missed, and is told so).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::Response;
use futures_util::stream::{self, Stream, StreamExt};
use serde::Serialize;
use tokio::sync::broadcast;

use crate::host::Host;
use crate::session::event_log::EventTap;

use super::Console;

/// How many records a page opened now is shown first, and how far it may lag.
pub const FEED_KEPT: usize = 500;
/// How many seconds of figures are kept.
pub const FIGURES_KEPT: usize = 300;

/// The event log's records for the console, and its figures.
pub struct Feed {
    recent: Mutex<VecDeque<Arc<str>>>,
    live: broadcast::Sender<Arc<str>>,
    figures: Mutex<VecDeque<Sample>>,
}

/// One second's figures (counters since start; the page takes differences).
#[derive(Debug, Clone, Copy, Default, Serialize)]
struct Sample {
    t_ms: u64,
    calls_total: f64,
    errors_total: f64,
    duration_sum_s: f64,
    duration_count: f64,
    jobs_running: usize,
    terminals_live: usize,
}

struct Tap(Weak<Feed>);

impl EventTap for Tap {
    fn written(&self, _event: &str, line: &[u8]) {
        if let Some(feed) = self.0.upgrade() {
            let line: Arc<str> = String::from_utf8_lossy(line).into();
            {
                let mut recent = feed.recent.lock().unwrap();
                if recent.len() == FEED_KEPT {
                    recent.pop_front();
                }
                recent.push_back(line.clone());
            }
            let _ = feed.live.send(line);
        }
    }
}

impl Feed {
    /// Taps `host`'s event log and samples its figures each second, for as long as the
    /// feed lives.
    pub fn start(host: &Arc<Host>) -> Arc<Feed> {
        let feed = Arc::new(Feed {
            recent: Mutex::new(VecDeque::with_capacity(FEED_KEPT)),
            live: broadcast::channel(FEED_KEPT).0,
            figures: Mutex::new(VecDeque::with_capacity(FIGURES_KEPT)),
        });
        host.pipeline
            .session
            .events
            .set_tap("console", Some(Arc::new(Tap(Arc::downgrade(&feed)))));
        let (weak, host) = (Arc::downgrade(&feed), host.clone());
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_secs(1));
            loop {
                ticks.tick().await;
                let Some(feed) = weak.upgrade() else {
                    host.pipeline.session.events.set_tap("console", None);
                    return;
                };
                let sample = sample(&host);
                let mut figures = feed.figures.lock().unwrap();
                if figures.len() == FIGURES_KEPT {
                    figures.pop_front();
                }
                figures.push_back(sample);
            }
        });
        feed
    }

    /// The owners the feed has seen calls of, in the order first seen.
    pub fn owners(&self) -> Vec<String> {
        let recent = self.recent.lock().unwrap();
        let mut owners: Vec<String> = Vec::new();
        for line in recent.iter() {
            if let Ok(record) = serde_json::from_str::<serde_json::Value>(line) {
                if let Some(owner) = record.get("owner").and_then(|o| o.as_str()) {
                    if !owners.iter().any(|known| known == owner) {
                        owners.push(owner.to_string());
                    }
                }
            }
        }
        owners
    }
}

/// The figures now, from the metrics registry and the services.
fn sample(host: &Host) -> Sample {
    let mut sample = Sample {
        t_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        jobs_running: host.services.jobs.running(),
        terminals_live: host.services.for_people().map_or(0, |people| {
            people.terminals().iter().filter(|t| t.alive).count()
        }),
        ..Sample::default()
    };
    let Ok(text) = host.metrics().encode() else {
        return sample;
    };
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        if name.starts_with("dsh_calls_total{") {
            sample.calls_total += value;
            if !name.contains("code=\"ok\"") {
                sample.errors_total += value;
            }
        } else if name.starts_with("dsh_call_duration_seconds_sum{") {
            sample.duration_sum_s += value;
        } else if name.starts_with("dsh_call_duration_seconds_count{") {
            sample.duration_count += value;
        }
    }
    sample
}

/// `GET /console/api/figures`: the samples kept, oldest first.
pub async fn figures(State(console): State<Arc<Console>>) -> Response {
    let samples: Vec<Sample> = console
        .feed
        .figures
        .lock()
        .unwrap()
        .iter()
        .copied()
        .collect();
    super::json_ok(serde_json::json!({ "samples": samples }))
}

/// `GET /console/api/events`: the records kept, then each new one, as server-sent
/// events (one record, a JSON object, per event).
pub async fn events(
    State(console): State<Arc<Console>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    // Subscribed before the ring is read: a record written in between is sent twice at
    // worst (the page matches results to calls by id), never lost.
    let live = console.feed.live.subscribe();
    let kept: Vec<Arc<str>> = console
        .feed
        .recent
        .lock()
        .unwrap()
        .iter()
        .cloned()
        .collect();
    let first = stream::iter(kept).map(|line| Ok(Event::default().data(&*line)));
    let then = stream::unfold(live, |mut live| async move {
        let event = match live.recv().await {
            Ok(line) => Event::default().data(&*line),
            Err(broadcast::error::RecvError::Lagged(missed)) => Event::default()
                .event("lagged")
                .data(format!("{{\"missed\":{missed}}}")),
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((Ok(event), live))
    });
    Sse::new(first.chain(then)).keep_alive(KeepAlive::default())
}
