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
//! **The key** is `STATE_DIR/round-trips.key` (32 random bytes, 0600; the state directory is
//! hidden from sandboxed and contained runs), so it outlives the process: a state sealed
//! before `dsh upgrade` verifies after it. Call numbers start at a random point in each
//! process, so a state of one process never names a call another parked.
//!
//! **Across `dsh upgrade`** a call parked at a guard's question (nothing of it has run: the
//! guards come before the tool) is handed over ([`RoundTrips::hand_over`]): the old binary
//! ends it there, and the new one, given the retry, runs it again from its start with the
//! answers given so far, each for the guard that asked it ([`Resumed::Again`]). A call
//! parked in a plugin's sampling or form, or in a subagent's model, has run part way and
//! cannot be run again: the upgrade's drain waits for it, then cancels it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::call::{Approval, ApprovalFuture, ApprovalRequest, Approver, CallResult, Notice};
use crate::upgrade::TransportHandover;

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
        /// Set for a guard's question asked before anything of the call ran: the call can
        /// then be run again from its start with these answers (see the module doc).
        before_running: Option<GuardAsk>,
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

/// A guard's question asked before anything of its call ran.
#[derive(Debug, Clone)]
pub struct GuardAsk {
    /// The guard that asks.
    pub guard: String,
    /// The answers the call's earlier guards were given, in order.
    pub answered: Vec<GuardAnswer>,
}

/// A call waiting for its retry.
struct Pending {
    call: Running,
    answer: oneshot::Sender<serde_json::Value>,
    expires: Instant,
    /// When its wait ends (ms since the epoch), as its state says.
    expiry_ms: u64,
    before_running: Option<GuardAsk>,
}

/// What a retry's state resumes.
#[derive(Debug)]
pub enum Resumed {
    /// The call, waiting in this process: the answer is given to it.
    Waiting(Running),
    /// A call handed over by the binary before: to be run again from its start, each of
    /// its guards' questions answered with these (the retry's last).
    Again(Vec<GuardAnswer>),
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
    /// Calls the binary before handed over (or an upgrade that did not happen took back).
    handed: Mutex<HashMap<u64, RoundTripHandover>>,
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
    /// Calls wait at most `wait` for their retry; states are sealed under the key in
    /// `key_file` (made there when missing; `None`, or a key that cannot be had: one made
    /// for this process only, with a warning).
    pub fn new(wait: Duration, key_file: Option<&std::path::Path>) -> Self {
        let random = || {
            let mut key = [0u8; 32];
            getrandom::fill(&mut key).expect("the kernel's random source");
            key
        };
        let key = match key_file.map(|path| (path, crate::private::secret_key(path))) {
            Some((_, Ok((key, false)))) => key,
            Some((path, Ok((key, true)))) => {
                tracing::warn!(key = %path.display(), "the round-trip key was not a private 32-byte file of this user: replaced (states sealed before are refused)");
                key
            }
            Some((path, Err(error))) => {
                tracing::warn!(%error, key = %path.display(), "no round-trip key in the state directory: states are sealed under a key of this process only");
                random()
            }
            None => random(),
        };
        let mut first = [0u8; 8];
        getrandom::fill(&mut first).expect("the kernel's random source");
        RoundTrips {
            key,
            pending: Mutex::new(HashMap::new()),
            handed: Mutex::new(HashMap::new()),
            // Room for 2^62 calls before it wraps.
            next: AtomicU64::new(u64::from_le_bytes(first) >> 2),
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
        before_running: Option<GuardAsk>,
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
                expiry_ms: expiry,
                before_running,
            },
        );
        format!("{id}.{expiry}.{}", self.mac(id, expiry, owner, tool, args))
    }

    /// For `dsh upgrade`: the calls parked at a guard's question before anything of them
    /// ran, each ended here (cancelled: nobody waits for its answer in this process any
    /// more) and described for the next binary, which runs it again on its retry. The
    /// other parked calls stay.
    pub fn hand_over(&self) -> Vec<RoundTripHandover> {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let ids: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| p.before_running.is_some() && p.expires > now)
            .map(|(id, _)| *id)
            .collect();
        let mut handed: Vec<RoundTripHandover> = ids
            .into_iter()
            .filter_map(|id| {
                let parked = pending.remove(&id)?;
                parked.call.cancel.cancel();
                let asked = parked.before_running?;
                Some(RoundTripHandover {
                    id,
                    expiry_ms: parked.expiry_ms,
                    asking_guard: asked.guard,
                    answered: asked.answered,
                })
            })
            .collect();
        drop(pending);
        // Handed to this process before and not retried yet: handed on.
        let before = std::mem::take(&mut *self.handed.lock().unwrap_or_else(|e| e.into_inner()));
        handed.extend(before.into_values().filter(|h| h.expiry_ms >= now_ms()));
        handed
    }

    /// Takes calls handed over by the binary before (or back from an upgrade that did not
    /// happen): their retries run them again.
    pub fn adopt(&self, handed: Vec<RoundTripHandover>) {
        let mut kept = self.handed.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend(handed.into_iter().map(|h| (h.id, h)));
    }

    /// The call `state` names, taken (once) for the retry of `tool` with `args` by `owner`,
    /// with the user's answer given to it: its events go on (or, handed over by the binary
    /// before, it is to run again with the answers so far).
    pub fn resume(
        &self,
        state: &str,
        owner: &str,
        tool: &str,
        args: &str,
        answer: serde_json::Value,
    ) -> Result<Resumed, StateError> {
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
            self.handed
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
            let handed = self
                .handed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            return match handed {
                Some(handed) if handed.expiry_ms == expiry => {
                    let mut answers = handed.answered;
                    answers.push(GuardAnswer {
                        guard: handed.asking_guard,
                        answer,
                    });
                    Ok(Resumed::Again(answers))
                }
                _ => Err(StateError::Gone(wait)),
            };
        };
        if pending.expires <= Instant::now() {
            return Err(StateError::Gone(wait));
        }
        let _ = pending.answer.send(answer);
        Ok(Resumed::Waiting(pending.call))
    }
}

/// Puts `question` to the client through the request serving the call and waits at most
/// `wait` for the retry's answer (the client's result as JSON); `None`: no answer.
async fn ask(
    events: &mpsc::UnboundedSender<CallEvent>,
    question: rmcp::model::InputRequest,
    wait: Duration,
    before_running: Option<GuardAsk>,
) -> Result<serde_json::Value, String> {
    let (answer, answered) = oneshot::channel();
    events
        .send(CallEvent::Ask {
            question,
            answer,
            before_running,
        })
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
    pub asked: Arc<Asked>,
}

/// What one call has asked its client, shared by its approvers and its sampler.
#[derive(Debug, Default)]
pub struct Asked {
    /// Its model or its user was asked (a plugin's sampling or form, a subagent's model):
    /// the call has run part way, and a guard's question after that (one of a subagent's
    /// calls) cannot be answered by running it again.
    pub client: AtomicBool,
    /// The answers its guards were given, in order.
    pub guards: Mutex<Vec<GuardAnswer>>,
    /// Answers given before this run (a call run again after `dsh upgrade`), each taken
    /// by the first question of its guard.
    pub preset: Mutex<Vec<GuardAnswer>>,
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
            let preset = {
                let mut preset = self.asked.preset.lock().unwrap_or_else(|e| e.into_inner());
                let found = preset.iter().position(|given| given.guard == request.guard);
                found.map(|at| preset.remove(at).answer)
            };
            let answered = match preset {
                Some(answer) => Ok(answer),
                None => {
                    let schema = rmcp::model::ElicitationSchema::new(Default::default());
                    let before_running =
                        (!self.asked.client.load(Ordering::Relaxed)).then(|| GuardAsk {
                            guard: request.guard.to_string(),
                            answered: self
                                .asked
                                .guards
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .clone(),
                        });
                    ask(
                        &self.events,
                        form(question, schema),
                        self.wait,
                        before_running,
                    )
                    .await
                }
            };
            match answered {
                Ok(answer) => {
                    let accepted = answer.get("action").and_then(|a| a.as_str()) == Some("accept");
                    self.asked
                        .guards
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(GuardAnswer {
                            guard: request.guard.to_string(),
                            answer,
                        });
                    if accepted {
                        Approval::Approved
                    } else {
                        Approval::Denied
                    }
                }
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

impl Declared {
    /// What a request's `_meta` capabilities declare (nothing, without them).
    pub fn of(capabilities: Option<&rmcp::model::ClientCapabilities>) -> Self {
        capabilities
            .map(|c| Declared {
                sampling: c.sampling.is_some(),
                sampling_tools: c.sampling.as_ref().is_some_and(|s| s.tools.is_some()),
                elicitation: c.elicitation.is_some(),
            })
            .unwrap_or_default()
    }
}

/// The caller's client asked by round trips: its model (`sampling/createMessage`, for a
/// plugin's `sampling` and the `subagent` loop) and its user (`elicitation/create`, for a
/// plugin's `elicitation`), each only as it declared; the calls a subagent's model leads to
/// ask their guards' questions the same way.
#[derive(Debug)]
pub struct RoundTripSampler {
    pub events: mpsc::UnboundedSender<CallEvent>,
    pub declared: Declared,
    /// How long a user's answer may take (`[serve] approval_timeout_ms`).
    pub ask_wait: Duration,
    pub asked: Arc<Asked>,
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
        self.asked.client.store(true, Ordering::Relaxed);
        let answer = ask(&self.events, question, request.wait, None)
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
        self.asked.client.store(true, Ordering::Relaxed);
        let answer = ask(
            &self.events,
            form(message.to_string(), schema),
            self.ask_wait,
            None,
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
                asked: self.asked.clone(),
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

/// A call parked at a guard's question before anything of it ran, handed over: its
/// state's call number and expiry (the state, sealed under the key in the state
/// directory, binds it to its owner, tool and arguments), the guard that asks, and the
/// answers its earlier guards were given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundTripHandover {
    pub id: u64,
    pub expiry_ms: u64,
    pub asking_guard: String,
    pub answered: Vec<GuardAnswer>,
}

/// A guard's question answered by the client: the guard, and the client's answer (an
/// elicitation result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuardAnswer {
    pub guard: String,
    pub answer: serde_json::Value,
}

/// The calls parked at a guard's question, as the round trips hand them over at an
/// upgrade (the snapshot's `round_trips`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HandedRoundTrips(pub Vec<RoundTripHandover>);

impl TransportHandover for HandedRoundTrips {
    const KEY: &'static str = "round_trips";
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
        let asked = GuardAsk {
            guard: "ask_git_push".into(),
            answered: vec![],
        };
        let state = trips.park(
            "stdio",
            "bash",
            "{\"command\":\"x\"}",
            call,
            answer,
            Some(asked),
        );
        (state, answered)
    }

    #[test]
    fn a_state_resumes_its_call_once_and_carries_the_answer() {
        let trips = RoundTrips::new(Duration::from_secs(60), None);
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
        let trips = RoundTrips::new(Duration::from_secs(60), None);
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

    /// A call parked at a guard's question is handed over (ended here) and adopted by
    /// another process sealing under the same key: the retry there runs it again with the
    /// answers so far, once; a call parked in a plugin's question is not handed over.
    #[test]
    fn a_call_at_a_guard_question_is_handed_over_and_run_again_once_with_its_answers() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("round-trips.key");
        let old = RoundTrips::new(Duration::from_secs(60), Some(&key));
        let (state, _answered) = parked(&old);
        // A plugin's sampling: it ran part way.
        let (_tx, events) = mpsc::unbounded_channel();
        let sampling = Running {
            events,
            cancel: CancellationToken::new(),
            driver: None,
        };
        let (answer, _) = oneshot::channel();
        let sampling_cancelled = sampling.cancel.clone();
        old.park("stdio", "subagent", "{}", sampling, answer, None);
        let handed = old.hand_over();
        assert_eq!(handed.len(), 1, "{handed:?}");
        assert_eq!(handed[0].asking_guard, "ask_git_push");
        assert_eq!(old.waiting(), 1, "the plugin's question stays");
        assert!(!sampling_cancelled.is_cancelled());
        let new = RoundTrips::new(Duration::from_secs(60), Some(&key));
        new.adopt(handed);
        let args = "{\"command\":\"x\"}";
        let forged = new.resume(&state, "http-2", "bash", args, serde_json::json!({}));
        assert_eq!(forged.unwrap_err(), StateError::Forged);
        let accept = serde_json::json!({"action": "accept"});
        match new
            .resume(&state, "stdio", "bash", args, accept.clone())
            .unwrap()
        {
            Resumed::Again(answers) => assert_eq!(
                answers,
                vec![GuardAnswer {
                    guard: "ask_git_push".into(),
                    answer: accept.clone()
                }]
            ),
            Resumed::Waiting(_) => panic!("nothing waits in this process"),
        }
        let replayed = new
            .resume(&state, "stdio", "bash", args, accept)
            .unwrap_err();
        assert!(matches!(replayed, StateError::Gone(_)), "{replayed}");
        // A process with a key of its own refuses the state outright.
        let other = RoundTrips::new(Duration::from_secs(60), None);
        let foreign = other.resume(&state, "stdio", "bash", args, serde_json::json!({}));
        assert_eq!(foreign.unwrap_err(), StateError::Forged);
        assert_eq!(crate::private::mode_of(&key).unwrap(), 0o600);
    }

    #[test]
    fn a_retry_after_the_wait_is_refused() {
        let trips = RoundTrips::new(Duration::from_millis(1), None);
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
