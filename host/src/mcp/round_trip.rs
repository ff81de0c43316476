//! Input by round trips (MCP 2026-07-28, SEP-2322): the stateless revision has no
//! server-to-client requests, so a call made under it that needs the client's answer
//! answers `input_required` with the question and a sealed `requestState`; the client's
//! retry of the same call, carrying the answer and the state, resumes the call where it
//! waited. The call itself runs on in a task of its own between the two requests. The
//! questions: a guard's `ask` (an elicitation form, [`RoundTripApprover`]), and a plugin's
//! `sampling` and `elicitation` host calls and the `subagent` loop's model
//! ([`RoundTripSampler`]: `sampling/createMessage`, `elicitation/create`), each its own
//! round.
//!
//! **The state** is `ID.EXPIRY.MAC`: the pending call's number, when its wait ends (ms since
//! the Unix epoch), and an HMAC-SHA256 under this server's key of both with the owner, the
//! tool and its arguments. A retry is refused (`-32602`, nothing run) when the MAC does not
//! match (forged, or another owner's, or another call's state), when no call waits under
//! that number (replayed: a state is taken once), or when the wait is over.
//!
//! **The wait** is bounded by `[serve] approval_timeout_ms`: a call nobody retries within it
//! is denied as a guard's unanswered ask is (the call goes on to its end, `DENIED`, and its
//! result is dropped), and its state is refused after.
//!
//! The key is made at start and kept in memory only: a pending call lives in this process,
//! so a state has nothing to resume in another (a restart or an upgrade).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::call::{Approval, ApprovalFuture, ApprovalRequest, Approver, CallResult, Notice};

/// What a call running between requests reports to the request serving it.
#[derive(Debug)]
pub enum CallEvent {
    /// A plugin's progress or log line.
    Notice(Notice),
    /// The call asks the client (a guard's ask, a plugin's sampling or form): the request
    /// to put to it, and where its answer (the client's result, as JSON) goes.
    Ask {
        question: rmcp::model::InputRequest,
        answer: oneshot::Sender<serde_json::Value>,
    },
    /// The call ended.
    Done(CallResult),
}

/// A call running between requests: what it reports, how to cancel it, and, until it
/// is detached, the future that drives it (polled by the request serving it, so a call
/// that asks nothing costs no task and no wake-up across threads).
#[derive(Debug)]
pub struct Running {
    pub events: mpsc::UnboundedReceiver<CallEvent>,
    pub cancel: CancellationToken,
    pub driver: Option<Driver>,
}

/// The future that runs a call (reporting its notices and questions on the events) and
/// gives its result, and where the result goes once it runs in a task of its own.
pub struct Driver {
    pub call: std::pin::Pin<Box<dyn std::future::Future<Output = CallResult> + Send>>,
    pub events: mpsc::UnboundedSender<CallEvent>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Driver")
    }
}

impl Running {
    /// Moves the call to a task of its own (it outlives the request serving it: it asks
    /// a question, or the request was cancelled); its result comes as [`CallEvent::Done`].
    pub fn detach(&mut self) {
        if let Some(Driver { call, events }) = self.driver.take() {
            tokio::spawn(async move {
                let result = call.await;
                let _ = events.send(CallEvent::Done(result));
            });
        }
    }
}

/// A call waiting for its retry.
struct Pending {
    call: Running,
    answer: oneshot::Sender<serde_json::Value>,
    expires: Instant,
}

/// Why a retry's state was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("requestState is not one dsh issued for this call and caller (forged, altered, or another's)")]
    Forged,
    #[error("no call waits under this requestState: it was used already, or its wait of {0} ms ran out and the call was denied; call again")]
    Gone(u64),
    #[error("the retry carries no answer to the question dsh asked (inputResponses has no `{0}`)")]
    NoAnswer(&'static str),
}

/// The key a question is asked under in `inputRequests` (a call asks one at a time).
pub const INPUT: &str = "input";

/// The calls of one server waiting for their retries.
pub struct RoundTrips {
    key: [u8; 32],
    pending: Mutex<HashMap<u64, Pending>>,
    next: AtomicU64,
    wait: Duration,
}

impl std::fmt::Debug for RoundTrips {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundTrips")
            .field("waiting", &self.waiting())
            .field("wait", &self.wait)
            .finish()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl RoundTrips {
    /// Calls wait at most `wait` for their retry.
    pub fn new(wait: Duration) -> Self {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).expect("the kernel's random source");
        RoundTrips {
            key,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            wait,
        }
    }

    /// How many calls wait for their retry now.
    pub fn waiting(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn mac(&self, id: u64, expiry: u64, owner: &str, tool: &str, args: &str) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        for part in [
            id.to_string().as_str(),
            &expiry.to_string(),
            owner,
            tool,
            args,
        ] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part.as_bytes());
        }
        mac.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Keeps a call that asked until its retry; returns its sealed state.
    pub fn park(
        &self,
        owner: &str,
        tool: &str,
        args: &str,
        call: Running,
        answer: oneshot::Sender<serde_json::Value>,
    ) -> String {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let expiry = now_ms() + self.wait.as_millis() as u64;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        // Calls nobody retried in time go (their approver has denied them already).
        pending.retain(|_, p| p.expires > now);
        pending.insert(
            id,
            Pending {
                call,
                answer,
                expires: now + self.wait,
            },
        );
        format!("{id}.{expiry}.{}", self.mac(id, expiry, owner, tool, args))
    }

    /// The call `state` names, taken (once) for the retry of `tool` with `args` by `owner`,
    /// with the user's answer given to it: its events go on.
    pub fn resume(
        &self,
        state: &str,
        owner: &str,
        tool: &str,
        args: &str,
        answer: serde_json::Value,
    ) -> Result<Running, StateError> {
        let mut parts = state.splitn(3, '.');
        let (Some(id), Some(expiry), Some(mac)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(StateError::Forged);
        };
        let (Ok(id), Ok(expiry)) = (id.parse::<u64>(), expiry.parse::<u64>()) else {
            return Err(StateError::Forged);
        };
        let expected = self.mac(id, expiry, owner, tool, args);
        // Compared in constant time: the MAC is the only secret here.
        let same = expected.len() == mac.len()
            && expected
                .bytes()
                .zip(mac.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if !same {
            return Err(StateError::Forged);
        }
        let wait = self.wait.as_millis() as u64;
        if now_ms() > expiry {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            return Err(StateError::Gone(wait));
        }
        let taken = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        let Some(pending) = taken else {
            return Err(StateError::Gone(wait));
        };
        if pending.expires <= Instant::now() {
            return Err(StateError::Gone(wait));
        }
        let _ = pending.answer.send(answer);
        Ok(pending.call)
    }
}

/// Puts `question` to the client through the request serving the call and waits at most
/// `wait` for the retry's answer (the client's result as JSON); `None`: no answer.
async fn ask(
    events: &mpsc::UnboundedSender<CallEvent>,
    question: rmcp::model::InputRequest,
    wait: Duration,
) -> Result<serde_json::Value, String> {
    let (answer, answered) = oneshot::channel();
    events
        .send(CallEvent::Ask { question, answer })
        .map_err(|_| "the request serving the call is gone".to_string())?;
    match tokio::time::timeout(wait, answered).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(_)) => Err("the call's question was dropped".into()),
        Err(_) => Err(format!(
            "the client did not retry with an answer within {} ms",
            wait.as_millis()
        )),
    }
}

/// An elicitation form of `message` for `schema` (an empty object schema: a yes or no).
fn form(message: String, schema: rmcp::model::ElicitationSchema) -> rmcp::model::InputRequest {
    rmcp::model::InputRequest::Elicitation(rmcp::model::ElicitRequest::new(
        rmcp::model::ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: schema,
        },
    ))
}

/// A guard's `ask` under a round trip: the question goes to the request serving the call
/// (which answers `input_required`), the answer comes back with the retry (`accept`
/// approves; anything else denies); none within the wait is a denial.
#[derive(Debug)]
pub struct RoundTripApprover {
    pub events: mpsc::UnboundedSender<CallEvent>,
    pub wait: Duration,
}

impl Approver for RoundTripApprover {
    fn channel(&self) -> &'static str {
        "elicitation (round trip)"
    }

    fn approve<'a>(&'a self, request: ApprovalRequest<'a>) -> ApprovalFuture<'a> {
        Box::pin(async move {
            let question = format!(
                "Guard {} asks for approval: {}\n\nTool: {}\nArguments: {}\n\nAccept to run it, decline to refuse.",
                request.guard,
                request.reason,
                request.tool,
                crate::call::describe_args(request.args)
            );
            let schema = rmcp::model::ElicitationSchema::new(Default::default());
            match ask(&self.events, form(question, schema), self.wait).await {
                Ok(answer) if answer.get("action").and_then(|a| a.as_str()) == Some("accept") => {
                    Approval::Approved
                }
                Ok(_) => Approval::Denied,
                Err(why) => Approval::Unavailable(why),
            }
        })
    }
}

/// What the client of a 2026-07-28 call declared in its request's `_meta`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Declared {
    pub sampling: bool,
    pub sampling_tools: bool,
    pub elicitation: bool,
}

/// The caller's client asked by round trips: its model (`sampling/createMessage`, for a
/// plugin's `sampling` and the `subagent` loop) and its user (`elicitation/create`, for a
/// plugin's `elicitation`), each only as it declared; the calls a subagent's model leads to
/// ask their guards' questions the same way.
#[derive(Debug)]
pub struct RoundTripSampler {
    pub events: mpsc::UnboundedSender<CallEvent>,
    pub declared: Declared,
    /// How long a model's answer may take (`[subagent] sampling_timeout_ms`).
    pub sample_wait: Duration,
    /// How long a user's answer may take (`[serve] approval_timeout_ms`).
    pub ask_wait: Duration,
}

#[allow(deprecated)] // sampling: see `sampling` (deprecated by rmcp after SEP-2577, current in 2026-07-28)
impl RoundTripSampler {
    async fn sample_once(
        &self,
        request: &crate::call::SampleRequest,
    ) -> Result<crate::call::SampleReply, crate::call::SampleError> {
        use crate::call::SampleError;
        if !request.tools.is_empty() && !self.declared.sampling_tools {
            return Err(SampleError::Unavailable(
                "the MCP client did not declare sampling with tools".into(),
            ));
        }
        if !self.declared.sampling {
            return Err(SampleError::Unavailable(
                "the MCP client did not declare sampling".into(),
            ));
        }
        let params: rmcp::model::CreateMessageRequestParams =
            serde_json::from_value(super::sampling::to_wire(request))
                .map_err(|e| SampleError::Failed(format!("cannot build the request: {e}")))?;
        let question = rmcp::model::InputRequest::CreateMessage(
            rmcp::model::CreateMessageRequest::new(params),
        );
        let answer = ask(&self.events, question, self.sample_wait)
            .await
            .map_err(SampleError::TimedOut)?;
        let result: rmcp::model::CreateMessageResult = serde_json::from_value(answer.clone())
            .map_err(|_| SampleError::Failed(format!("the client answered {answer}")))?;
        Ok(super::sampling::from_wire(
            serde_json::to_value(&result.message).unwrap_or_default(),
            result.stop_reason.clone(),
            result.model.clone(),
        ))
    }

    async fn elicit_once(
        &self,
        message: &str,
        schema: &serde_json::Value,
    ) -> Result<crate::call::ElicitReply, crate::call::SampleError> {
        use crate::call::{ElicitReply, SampleError};
        if !self.declared.elicitation {
            return Err(SampleError::Unavailable(
                "the MCP client did not declare elicitation (form mode)".into(),
            ));
        }
        let schema: rmcp::model::ElicitationSchema = serde_json::from_value(schema.clone())
            .map_err(|e| SampleError::Invalid(format!("the requested schema: {e}")))?;
        let answer = ask(
            &self.events,
            form(message.to_string(), schema),
            self.ask_wait,
        )
        .await
        .map_err(SampleError::TimedOut)?;
        Ok(match answer.get("action").and_then(|a| a.as_str()) {
            Some("accept") => ElicitReply::Accept(
                answer
                    .get("content")
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({})),
            ),
            Some("decline") => ElicitReply::Decline,
            _ => ElicitReply::Cancel,
        })
    }
}

impl crate::call::Sampler for RoundTripSampler {
    fn available(&self) -> bool {
        self.declared.sampling_tools
    }

    fn can_sample(&self) -> bool {
        self.declared.sampling
    }

    fn sample<'a>(
        &'a self,
        request: &'a crate::call::SampleRequest,
    ) -> crate::call::SampleFuture<'a> {
        Box::pin(self.sample_once(request))
    }

    fn can_elicit(&self) -> bool {
        self.declared.elicitation
    }

    fn elicit<'a>(
        &'a self,
        message: &'a str,
        schema: &'a serde_json::Value,
    ) -> crate::call::ElicitFuture<'a> {
        Box::pin(self.elicit_once(message, schema))
    }

    fn approver(&self) -> Option<std::sync::Arc<dyn Approver>> {
        self.declared.elicitation.then(|| {
            std::sync::Arc::new(RoundTripApprover {
                events: self.events.clone(),
                wait: self.ask_wait,
            }) as std::sync::Arc<dyn Approver>
        })
    }
}

/// The client's answer in a retry's `inputResponses` (its result, as JSON).
pub fn answer_of(
    responses: Option<&rmcp::model::InputResponses>,
) -> Result<serde_json::Value, StateError> {
    responses
        .and_then(|r| r.get(INPUT))
        .cloned()
        .ok_or(StateError::NoAnswer(INPUT))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parked(trips: &RoundTrips) -> (String, oneshot::Receiver<serde_json::Value>) {
        let (_tx, events) = mpsc::unbounded_channel();
        let (answer, answered) = oneshot::channel::<serde_json::Value>();
        let call = Running {
            events,
            cancel: CancellationToken::new(),
            driver: None,
        };
        let state = trips.park("stdio", "bash", "{\"command\":\"x\"}", call, answer);
        (state, answered)
    }

    #[test]
    fn a_state_resumes_its_call_once_and_carries_the_answer() {
        let trips = RoundTrips::new(Duration::from_secs(60));
        let (state, mut answered) = parked(&trips);
        assert_eq!(trips.waiting(), 1);
        trips
            .resume(
                &state,
                "stdio",
                "bash",
                "{\"command\":\"x\"}",
                serde_json::json!({"action": "accept"}),
            )
            .unwrap();
        assert_eq!(answered.try_recv().unwrap()["action"], "accept");
        // Replayed: gone.
        let again = trips
            .resume(
                &state,
                "stdio",
                "bash",
                "{\"command\":\"x\"}",
                serde_json::json!({}),
            )
            .unwrap_err();
        assert!(matches!(again, StateError::Gone(_)), "{again}");
    }

    #[test]
    fn a_forged_altered_or_foreign_state_is_refused_and_the_call_keeps_waiting() {
        let trips = RoundTrips::new(Duration::from_secs(60));
        let (state, mut answered) = parked(&trips);
        let (id, rest) = state.split_once('.').unwrap();
        let other_id = format!("{}.{rest}", id.parse::<u64>().unwrap() + 1);
        let later = {
            let mut parts: Vec<&str> = state.split('.').collect();
            let expiry = (parts[1].parse::<u64>().unwrap() + 60_000).to_string();
            parts[1] = &expiry;
            parts.join(".")
        };
        for (state, owner, tool, args) in [
            (state.as_str(), "http-7", "bash", "{\"command\":\"x\"}"),
            (state.as_str(), "stdio", "edit", "{\"command\":\"x\"}"),
            (
                state.as_str(),
                "stdio",
                "bash",
                "{\"command\":\"rm -rf /\"}",
            ),
            (other_id.as_str(), "stdio", "bash", "{\"command\":\"x\"}"),
            (later.as_str(), "stdio", "bash", "{\"command\":\"x\"}"),
            ("garbage", "stdio", "bash", "{\"command\":\"x\"}"),
        ] {
            let refused = trips
                .resume(state, owner, tool, args, serde_json::json!({}))
                .unwrap_err();
            assert_eq!(refused, StateError::Forged, "{state} {owner} {tool} {args}");
        }
        assert_eq!(trips.waiting(), 1);
        assert!(answered.try_recv().is_err(), "a refused retry answered");
    }

    #[test]
    fn a_retry_after_the_wait_is_refused() {
        let trips = RoundTrips::new(Duration::from_millis(1));
        let (state, _answered) = parked(&trips);
        std::thread::sleep(Duration::from_millis(5));
        let late = trips
            .resume(
                &state,
                "stdio",
                "bash",
                "{\"command\":\"x\"}",
                serde_json::json!({}),
            )
            .unwrap_err();
        assert!(matches!(late, StateError::Gone(_)), "{late}");
        assert_eq!(trips.waiting(), 0);
    }
}
