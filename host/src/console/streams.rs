//! The console's view of what the owners hold, and what a person does with it: the state
//! (every owner's terminals and jobs, the asks waiting), a terminal's frames and a job's
//! output as server-sent events, taking a terminal over, typing into it and handing it
//! back, and answering an ask.
//!
//! One stream carries every terminal and job the page shows ([`watch`]). A terminal's
//! frames come from a [`TerminalView`](crate::services::people::TerminalView) pulled as
//! the connection drains: at most one frame per [`FRAME_INTERVAL`] (30 a second),
//! output coalesced between frames, and a viewer that falls behind gets the screen
//! again, never a backlog. Nothing is computed for a terminal nobody watches.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use futures_util::stream::{self, Stream};
use serde_json::{json, Value};

use crate::error::{ErrorCode, ToolError};
use crate::pipeline::approvals::PersonAnswer;
use crate::services::jobs::JobState;
use crate::services::people::Frame;

use super::{json_ok, json_refusal, read_body, tool_refusal, Console};

/// The shortest time between two frames of one terminal's stream.
pub const FRAME_INTERVAL: Duration = Duration::from_millis(33);
/// Who a console's hold is, as the agent's error and `dsh attach --list` name it.
const CONSOLE_PERSON: &str = "console";
/// How much of a job's output one event carries at most.
const JOB_CHUNK_BYTES: u64 = 64 * 1024;

/// The `owner` and `id` of a request's query.
fn owner_and_id(request: &Request) -> Result<(String, String), Box<Response>> {
    let query = request.uri().query().unwrap_or_default();
    let mut owner = None;
    let mut id = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match &*key {
            "owner" => owner = Some(value.into_owned()),
            "id" => id = Some(value.into_owned()),
            _ => {}
        }
    }
    match (owner, id) {
        (Some(owner), Some(id)) => Ok((owner, id)),
        _ => Err(Box::new(json_refusal(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENTS",
            "name the owner and the id: ?owner=…&id=…",
        ))),
    }
}

/// `GET /console/api/state`: every owner's terminals and jobs, and the asks waiting.
pub async fn state(State(console): State<Arc<Console>>) -> Response {
    let services = &console.host.services;
    let mut owners: BTreeMap<String, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for owner in console.feed.owners() {
        owners.entry(owner).or_default();
    }
    let terminals = console.people.iter().flat_map(|people| people.terminals());
    for info in terminals {
        let shown = serde_json::to_value(&info).unwrap_or(Value::Null);
        owners
            .entry(info.owner.to_string())
            .or_default()
            .0
            .push(shown);
    }
    for (owner, info) in services.jobs.every_job() {
        owners.entry(owner.to_string()).or_default().1.push(json!({
            "id": info.id,
            "kind": info.kind,
            "state": info.state.name(),
            "description": info.description,
            "command": info.command,
            "runtime_ms": info.runtime.as_millis() as u64,
        }));
    }
    let approvals = console.host.pipeline.approvals.waiting();
    for approval in &approvals {
        owners.entry(approval.owner.clone()).or_default();
    }
    let owners: Vec<Value> = owners
        .into_iter()
        .map(|(owner, (terminals, jobs))| {
            json!({"owner": owner, "terminals": terminals, "jobs": jobs})
        })
        .collect();
    json_ok(json!({ "owners": owners, "approvals": approvals }))
}

/// The most terminals and jobs one watch names.
const MAX_WATCHED: usize = 64;

/// One thing a watch names: `term=OWNER/ID` or `job=OWNER/ID[@SINCE]`.
enum Watched {
    Terminal {
        owner: String,
        id: String,
    },
    Job {
        owner: String,
        id: String,
        since: u64,
    },
}

/// What a request's query names to watch.
fn watched(request: &Request) -> Result<Vec<Watched>, Box<Response>> {
    let query = request.uri().query().unwrap_or_default();
    let invalid = |message: String| {
        Box::new(json_refusal(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENTS",
            &message,
        ))
    };
    let mut named = Vec::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let (target, since) = match value.rsplit_once('@') {
            Some((target, since)) if key == "job" => (
                target.to_string(),
                since
                    .parse()
                    .map_err(|_| invalid(format!("{since:?} is not a byte count")))?,
            ),
            _ => (value.to_string(), 0),
        };
        let Some((owner, id)) = target.rsplit_once('/') else {
            return Err(invalid(format!("name {key}s as OWNER/ID, not {target:?}")));
        };
        let (owner, id) = (owner.to_string(), id.to_string());
        named.push(match &*key {
            "term" => Watched::Terminal { owner, id },
            "job" => Watched::Job { owner, id, since },
            other => {
                return Err(invalid(format!(
                    "a watch names term= and job=, not {other}="
                )))
            }
        });
    }
    if named.len() > MAX_WATCHED {
        return Err(invalid(format!(
            "a watch names at most {MAX_WATCHED} terminals and jobs"
        )));
    }
    Ok(named)
}

type Events = std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

/// An event whose data is `fields` with the target's owner and id.
fn event(kind: &str, owner: &str, id: &str, mut fields: Value) -> Result<Event, Infallible> {
    fields["owner"] = json!(owner);
    fields["id"] = json!(id);
    Ok(Event::default().event(kind).data(fields.to_string()))
}

/// `GET /console/api/watch?term=OWNER/ID&job=OWNER/ID@SINCE…`: every named terminal's
/// frames and job's output on one stream of server-sent events (a browser keeps six
/// connections to a host: one stream for all of them). Each event's data is a JSON
/// object naming its `owner` and `id`: `screen` and `output` (`data`: base64 bytes),
/// `held` (`held_by`), `exit` (`exit_code`), `job-output` (`text`, and `next`, the byte
/// count to resume from), `job-end` (`state`), `gone` (`kind`, `code`, `message`: no
/// such terminal or job).
pub async fn watch(State(console): State<Arc<Console>>, request: Request) -> Response {
    let named = match watched(&request) {
        Ok(named) => named,
        Err(refused) => return *refused,
    };
    let mut streams: Vec<Events> = Vec::new();
    for target in named {
        streams.push(match target {
            Watched::Terminal { owner, id } => terminal_frames(&console, owner, id),
            Watched::Job { owner, id, since } => job_output(&console, owner, id, since).await,
        });
    }
    // A watch of nothing still holds its stream (the page names what it shows).
    streams.push(Box::pin(stream::pending()));
    Sse::new(stream::select_all(streams))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A terminal's frames: its screen first, then what changes (see the module doc).
fn terminal_frames(console: &Console, owner: String, id: String) -> Events {
    let Some(people) = &console.people else {
        let error = ToolError::new(ErrorCode::NotFound, "this host has no terminals");
        return gone("term", &owner, &id, error);
    };
    let viewer = match people.view(&owner, &id, false) {
        Ok(viewer) => viewer,
        Err(error) => return gone("term", &owner, &id, error),
    };
    Box::pin(stream::unfold(
        (viewer, owner, id),
        |(mut viewer, owner, id)| async move {
            let frame = viewer.next(FRAME_INTERVAL).await?;
            let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
            let event = match frame {
                Frame::Screen(bytes) => {
                    event("screen", &owner, &id, json!({"data": base64(&bytes)}))
                }
                Frame::Output(bytes) => {
                    event("output", &owner, &id, json!({"data": base64(&bytes)}))
                }
                Frame::Held(by) => event("held", &owner, &id, json!({ "held_by": by })),
                Frame::Exited(code) => event("exit", &owner, &id, json!({ "exit_code": code })),
            };
            Some((event, (viewer, owner, id)))
        },
    ))
}

/// A job's output from `since` as it comes, then its end.
async fn job_output(console: &Console, owner: String, id: String, since: u64) -> Events {
    let jobs = console.host.services.jobs.clone();
    if let Err(error) = jobs.output(&owner, &id, 0, 0, Duration::ZERO).await {
        return gone("job", &owner, &id, error);
    }
    // (next byte to read, ended)
    Box::pin(stream::unfold((since, false), move |(since, ended)| {
        let (jobs, owner, id) = (jobs.clone(), owner.clone(), id.clone());
        async move {
            if ended {
                return None;
            }
            let read = jobs
                .output(&owner, &id, since, JOB_CHUNK_BYTES, Duration::from_secs(15))
                .await
                .ok()?;
            let next = read.next_cursor;
            if !read.output.is_empty() {
                let fields = json!({"text": read.output, "next": next});
                return Some((event("job-output", &owner, &id, fields), (next, false)));
            }
            if read.info.state == JobState::Running {
                return Some((Ok(Event::default().comment("waiting")), (next, false)));
            }
            let fields = json!({"state": read.info.state.name(), "detail": read.info.state});
            Some((event("job-end", &owner, &id, fields), (next, true)))
        }
    }))
}

/// One `gone` event: what was named is not there.
fn gone(kind: &str, owner: &str, id: &str, error: ToolError) -> Events {
    let fields = json!({"kind": kind, "code": error.code, "message": error.message});
    Box::pin(stream::iter([event("gone", owner, id, fields)]))
}

/// `POST /console/api/terminal/{take,release,input}?owner=…&id=…` (input: the body, as
/// typed).
pub async fn terminal_action(
    State(console): State<Arc<Console>>,
    Path(action): Path<String>,
    request: Request,
) -> Response {
    let (owner, id) = match owner_and_id(&request) {
        Ok(named) => named,
        Err(refused) => return *refused,
    };
    let Some(terminals) = &console.people else {
        return json_refusal(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "this host has no terminals",
        );
    };
    let done = match action.as_str() {
        "take" => terminals.take_over(&owner, &id, CONSOLE_PERSON),
        "release" => terminals.release(&owner, &id, CONSOLE_PERSON),
        "input" => {
            let typed = match read_body(request.into_body()).await {
                Ok(typed) => typed,
                Err(refused) => return refused,
            };
            terminals.type_in(&owner, &id, CONSOLE_PERSON, &typed).await
        }
        _ => {
            return json_refusal(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                "a terminal's actions are take, release and input",
            )
        }
    };
    match done {
        Ok(()) => json_ok(json!({ "ok": true })),
        Err(error) => tool_refusal(error),
    }
}

/// `POST /console/api/approvals/{id}` with `{"decision": "approve"|"deny", "note": …}`.
pub async fn answer(
    State(console): State<Arc<Console>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    let body = match read_body(request.into_body()).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let approve = match asked.get("decision").and_then(Value::as_str) {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return json_refusal(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENTS",
                "send {\"decision\": \"approve\" or \"deny\", \"note\": \"…\"}",
            )
        }
    };
    let note = asked
        .get("note")
        .and_then(Value::as_str)
        .map(|note| note.chars().take(500).collect::<String>())
        .filter(|note| !note.trim().is_empty());
    match console
        .host
        .pipeline
        .approvals
        .answer(&id, PersonAnswer { approve, note })
    {
        Ok(()) => json_ok(json!({ "ok": true })),
        Err(error) => json_refusal(StatusCode::NOT_FOUND, "NOT_FOUND", &error.to_string()),
    }
}
