//! Subagents: the loop that lets a model work on a bounded task with the caller's tools:
//! a model endpoint the operator configures ([`models`], `[subagent.models]`), or the MCP
//! client's own model through sampling (`client`), chosen per scope. The host owns it (here, not in a plugin): its state outlives any
//! plugin instance, so a reload of the `subagent` plugin leaves running subagents alone.
//!
//! A subagent is a job of its caller's (`subagent-N`, in the one job registry), its
//! output the transcript: one entry per step (the model's text, each tool call with its
//! arguments, the result's first lines and its code, the tokens an operator's model used,
//! the final answer). The loop sends the model (the operator's endpoint, or the client
//! through a sampling request, [`crate::call::Sampler`]) the conversation and the
//! allowed tools' manuals; for each tool use it runs the call through the host's pipeline
//! as the caller (same owner and scope: gate, guards, approval, executor, filters, event
//! log), through the [`ToolRunner`] the host gives it (the pipeline is a layer above);
//! it sends the results back, and stops at the model's final answer, `max_turns`, the
//! timeout, a kill (`job_kill`, the owner's going away) or a sampling failure.
//!
//! On an operator's model a run, foreground or background, works on its own and ends on
//! its own. On the client's model a foreground run asks the client of the call that
//! started it; a background one asks only through clients its owner's `job_output` calls
//! lend it while they wait on it ([`crate::services::jobs::Job::borrow_client`]): a server
//! request reaches a client reliably only inside a request in flight. Between them it
//! waits, its note saying so.
//!
//! Token use on operator models is bounded per subagent and per owner per hour
//! (`LIMIT_EXCEEDED`); the client's model does not say what it used.
//!
//! A subagent's tool calls carry a [`JobStep`]: the pipeline runs them under the
//! admission slot of the call they run inside (never queued behind it), and logs them
//! with the subagent's id and the id of the call that started it. Each step is also a
//! `subagent/step` event.

pub mod capability;
pub mod config;
pub mod models;
pub mod wit;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::call::{
    Approver, CallContext, CallRequest, CallResult, JobStep, SampleContent, SampleError,
    SampleMessage, SampleRequest, SampleRole, SampleTool, Sampler, TokenUse,
};
use crate::error::{ErrorCode, ToolError};
use crate::services::jobs::{Job, JobRegistry, JobState};
use crate::services::ToolRunner;
pub use config::{SubagentConfig, CLIENT_MODEL};
use models::Model;

/// The job kind, and the tool name a subagent is not offered by default.
pub const KIND: &str = "subagent";

/// The system prompt of every sampling request.
const SYSTEM_PROMPT: &str =
    "You are a subagent of dsh, working alone on one task with the tools offered. \
Call them as you need; each result comes back to you. When you are done, answer with your final \
answer as plain text and no tool call.";

/// What a subagent is asked to do.
#[derive(Debug, Clone)]
pub struct Task {
    pub prompt: String,
    pub tools: Option<Vec<String>>,
    pub max_turns: Option<u32>,
    pub timeout_ms: Option<u64>,
    /// The model to ask (`client` or an operator's); none: the scope's.
    pub model: Option<String>,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct Answer {
    pub id: String,
    pub answer: String,
    pub turns: u32,
    /// `client`, or the operator's model that answered.
    pub model: String,
    /// What it used (nothing counted on the client's model).
    pub usage: TokenUse,
}

/// The subagents of one host.
pub struct SubagentService {
    config: SubagentConfig,
    jobs: Arc<JobRegistry>,
    runner: OnceLock<Arc<dyn ToolRunner>>,
    /// Running subagents per owner (ended when the owner goes).
    running: Mutex<HashMap<Arc<str>, Vec<Arc<Job>>>>,
    /// The operator's models, by name.
    models: BTreeMap<String, Arc<Model>>,
    /// Per owner, the tokens its subagents used on operator models in the last hour.
    spent: Mutex<HashMap<Arc<str>, SpentTokens>>,
}

/// When an owner's subagents used how many tokens, oldest first.
type SpentTokens = VecDeque<(Instant, u64)>;

/// The window of `max_tokens_per_owner_per_hour`.
const HOUR: Duration = Duration::from_secs(3600);

impl std::fmt::Debug for SubagentService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Where a run gets its client from.
enum Client {
    /// The client of the call it runs inside (foreground).
    Fixed(Arc<dyn Sampler>),
    /// Borrowed from its owner's waiting `job_output` calls (background).
    Borrowed,
    /// An operator's model; with the caller's client when the run is in the foreground
    /// (a guard's `ask` goes to its user, as for the caller's own calls).
    Operator(Arc<Model>, Option<Arc<dyn Sampler>>),
}

impl Client {
    fn model_name(&self) -> &str {
        match self {
            Client::Operator(model, _) => &model.name,
            _ => CLIENT_MODEL,
        }
    }
}

/// Everything one run needs, checked before it starts.
struct Run {
    job: Arc<Job>,
    owner: Arc<str>,
    scope: Arc<str>,
    step: JobStep,
    prompt: String,
    tools: Vec<SampleTool>,
    allowed: BTreeSet<String>,
    max_turns: u32,
    timeout: Duration,
    client: Client,
    /// The span current when the subagent started (the `subagent` host call's, with
    /// traces on): its steps' calls are its children.
    span: tracing::Span,
}

/// How a run ended badly.
enum Stop {
    Error(ToolError),
    Killed,
}

impl From<ToolError> for Stop {
    fn from(error: ToolError) -> Self {
        Stop::Error(error)
    }
}

impl SubagentService {
    pub fn new(config: SubagentConfig, jobs: Arc<JobRegistry>) -> Self {
        let models = config
            .models
            .iter()
            .map(|(name, model)| (name.clone(), Arc::new(Model::new(name, model.clone()))))
            .collect();
        SubagentService {
            config,
            jobs,
            runner: OnceLock::new(),
            running: Mutex::default(),
            models,
            spent: Mutex::default(),
        }
    }

    /// The operator's models, by name.
    pub fn models(&self) -> &BTreeMap<String, Arc<Model>> {
        &self.models
    }

    /// The client a run of `task` for `caller` asks: the model it names or its scope's,
    /// when the scope allows it and it can be asked.
    fn client_for(
        &self,
        caller: &CallContext,
        task: &Task,
        background: bool,
    ) -> Result<Client, ToolError> {
        let allowed = self.config.models_allowed(&caller.scope);
        let name = task.model.as_deref().unwrap_or(allowed[0]);
        if !allowed.contains(&name) {
            return Err(ToolError::new(
                ErrorCode::InvalidArguments,
                format!(
                    "model {name:?} is not one scope {} may use (it may use: {}); nothing ran",
                    caller.scope,
                    allowed.join(", ")
                ),
            ));
        }
        if name == CLIENT_MODEL {
            let sampler = usable_sampler(caller)?;
            return Ok(if background {
                Client::Borrowed
            } else {
                Client::Fixed(sampler)
            });
        }
        let model = self.models.get(name).cloned().ok_or_else(|| {
            ToolError::new(
                ErrorCode::ModelUnavailable,
                format!("model {name} is not configured ([subagent.models])"),
            )
        })?;
        let caller_client = (!background).then(|| caller.sampler.clone()).flatten();
        Ok(Client::Operator(model, caller_client))
    }

    /// Whether `owner` may send a model another request (`max_tokens_per_owner_per_hour`).
    fn check_owner_budget(&self, owner: &Arc<str>) -> Result<(), ToolError> {
        let limit = self.config.max_tokens_per_owner_per_hour;
        if limit == 0 {
            return Ok(());
        }
        let mut spent = self.spent.lock().unwrap();
        let entries = spent.entry(owner.clone()).or_default();
        while entries.front().is_some_and(|(at, _)| at.elapsed() > HOUR) {
            entries.pop_front();
        }
        let used: u64 = entries.iter().map(|(_, tokens)| tokens).sum();
        if used >= limit {
            return Err(ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "this owner's subagents used {used} tokens on operator models in the last hour, the most allowed ([subagent] max_tokens_per_owner_per_hour = {limit})"
                ),
            ));
        }
        Ok(())
    }

    fn spend(&self, owner: &Arc<str>, tokens: u64) {
        if tokens > 0 {
            self.spent
                .lock()
                .unwrap()
                .entry(owner.clone())
                .or_default()
                .push_back((Instant::now(), tokens));
        }
    }

    /// Gives the service the pipeline it runs tool calls through (once, when the host
    /// is assembled).
    pub fn set_runner(&self, runner: Arc<dyn ToolRunner>) {
        let _ = self.runner.set(runner);
    }

    /// Runs a subagent to its end inside the call `caller`.
    pub async fn run(
        self: &Arc<Self>,
        caller: &CallContext,
        task: Task,
    ) -> Result<Answer, ToolError> {
        let client = self.client_for(caller, &task, false)?;
        let run = self.prepare(caller, task, client)?;
        let id = run.job.id.clone();
        let model = run.client.model_name().to_string();
        let (answer, turns, usage) = self.drive(run).await?;
        Ok(Answer {
            id,
            answer,
            turns,
            model,
            usage,
        })
    }

    /// Starts a background subagent; its id.
    pub fn start(self: &Arc<Self>, caller: &CallContext, task: Task) -> Result<String, ToolError> {
        let client = self.client_for(caller, &task, true)?;
        let run = self.prepare(caller, task, client)?;
        if matches!(run.client, Client::Borrowed) {
            run.job.borrows_clients();
            run.job.set_note(Some("waiting for job_output".into()));
        }
        let id = run.job.id.clone();
        let service = self.clone();
        // Its model requests' spans go under the host call that started it.
        let span = run.span.clone();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let _ = service.drive(run).await;
            },
            span,
        ));
        Ok(id)
    }

    /// Checks a task against the caller and the limits, and makes its job.
    fn prepare(&self, caller: &CallContext, task: Task, client: Client) -> Result<Run, ToolError> {
        let runner = self.runner()?;
        let depth = caller.step.as_ref().map_or(0, |s| s.depth) + 1;
        if depth > self.config.max_depth {
            return Err(ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "a subagent cannot start another here: subagents may be {} deep ([subagent] max_depth)",
                    self.config.max_depth
                ),
            ));
        }
        let visible = runner.tools(&caller.scope);
        let (tools, allowed) = match &task.tools {
            Some(names) => {
                let unknown: Vec<&str> = names
                    .iter()
                    .filter(|name| !visible.iter().any(|t| &t.name == *name))
                    .map(String::as_str)
                    .collect();
                if !unknown.is_empty() {
                    return Err(ToolError::new(
                        ErrorCode::InvalidArguments,
                        format!(
                            "tools names tools the caller does not have: {}",
                            unknown.join(", ")
                        ),
                    ));
                }
                let tools: Vec<SampleTool> = visible
                    .into_iter()
                    .filter(|t| names.contains(&t.name))
                    .collect();
                (tools, names.iter().cloned().collect())
            }
            None => {
                let tools: Vec<SampleTool> =
                    visible.into_iter().filter(|t| t.name != KIND).collect();
                let allowed = tools.iter().map(|t| t.name.clone()).collect();
                (tools, allowed)
            }
        };
        let max_turns = task.max_turns.unwrap_or(self.config.max_turns).max(1);
        let timeout = Duration::from_millis(
            task.timeout_ms
                .unwrap_or(self.config.timeout_ms)
                .min(self.config.timeout_ms)
                .max(1),
        );
        let running = self
            .jobs
            .list(&caller.owner)
            .iter()
            .filter(|job| job.kind == KIND && job.state == JobState::Running)
            .count();
        if running >= self.config.max_running_per_owner {
            return Err(ToolError::new(
                ErrorCode::LimitExceeded,
                format!(
                    "already {running} running subagents, the most allowed per owner ([subagent] max_running_per_owner); kill or wait for one"
                ),
            ));
        }
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let job = self.jobs.create(
            KIND,
            caller.owner.clone(),
            one_line(&task.prompt, 100),
            format!("subagent with {}", names.join(", ")),
        )?;
        self.running
            .lock()
            .unwrap()
            .entry(caller.owner.clone())
            .or_default()
            .push(job.clone());
        let step = JobStep {
            job: job.id.as_str().into(),
            started_by: caller.call_id.as_str().into(),
            depth,
        };
        runner.event(
            "subagent/start",
            json!({
                "subagent": job.id,
                "started_by": caller.call_id,
                "owner": caller.owner,
                "tools": names,
                "max_turns": max_turns,
                "timeout_ms": timeout.as_millis() as u64,
                "background": matches!(client, Client::Borrowed | Client::Operator(_, None)),
                "model": client.model_name(),
            }),
        );
        Ok(Run {
            job,
            owner: caller.owner.clone(),
            scope: caller.scope.clone(),
            step,
            prompt: task.prompt,
            tools,
            allowed,
            max_turns,
            timeout,
            client,
            span: tracing::Span::current(),
        })
    }

    fn runner(&self) -> Result<Arc<dyn ToolRunner>, ToolError> {
        self.runner.get().cloned().ok_or_else(|| {
            ToolError::new(ErrorCode::Internal, "the subagent service has no pipeline")
        })
    }

    /// Runs the loop to its end, records the end in the job and the event log.
    async fn drive(&self, run: Run) -> Result<(String, u32, TokenUse), ToolError> {
        let runner = self.runner()?;
        let job = run.job.clone();
        let mut transcript = Transcript::new(&job, self.config.max_transcript_bytes);
        let mut turns = 0;
        let mut usage = TokenUse::default();
        let timeout = run.timeout;
        let looped = {
            let looping = self.turns(&run, &*runner, &mut transcript, &mut turns, &mut usage);
            tokio::select! {
                ended = tokio::time::timeout(timeout, looping) => match ended {
                    Ok(ended) => ended,
                    Err(_) => Err(Stop::Error(ToolError::new(
                        ErrorCode::Timeout,
                        format!("{} did not finish within {} ms", job.id, timeout.as_millis()),
                    ))),
                },
                _ = job.cancel.cancelled() => Err(Stop::Killed),
            }
        };
        if let Some(jobs) = self.running.lock().unwrap().get_mut(&run.owner) {
            jobs.retain(|j| j.id != job.id);
        }
        job.set_note(None);
        let outcome = match looped {
            Ok(answer) => {
                job.finish(JobState::Exited { code: 0 });
                Ok((answer, turns, usage))
            }
            Err(Stop::Killed) => {
                transcript.push(turns, "killed", "");
                job.finish(JobState::Killed {
                    signal: dsh_launch::os::SIGTERM,
                    reason: None,
                });
                Err(ToolError::new(
                    ErrorCode::Cancelled,
                    format!("{} was killed after {turns} turns", job.id),
                ))
            }
            Err(Stop::Error(error)) => {
                transcript.push(turns, "error", &error.to_string());
                job.finish(JobState::Failed {
                    reason: error.to_string(),
                });
                Err(ToolError::new(
                    error.code,
                    format!(
                        "{} (transcript: job_output {}, {turns} turns)",
                        error.message, job.id
                    ),
                ))
            }
        };
        runner.event(
            "subagent/end",
            json!({
                "subagent": job.id,
                "started_by": run.step.started_by,
                "turns": turns,
                "model": run.client.model_name(),
                "input_tokens": usage.input,
                "output_tokens": usage.output,
                "state": job_state_name(&outcome),
                "error": outcome.as_ref().err().map(|e| json!({"code": e.code, "message": e.message})),
            }),
        );
        outcome
    }

    /// The turns: ask the model, run the tools it asks for, until it answers.
    async fn turns(
        &self,
        run: &Run,
        runner: &dyn ToolRunner,
        transcript: &mut Transcript<'_>,
        turns: &mut u32,
        usage: &mut TokenUse,
    ) -> Result<String, Stop> {
        let job = &run.job;
        let mut messages = vec![SampleMessage {
            role: SampleRole::User,
            content: vec![SampleContent::Text(run.prompt.clone())],
        }];
        let mut approver: Option<Arc<dyn Approver>>;
        let step_event = |turn: u32, kind: &str, fields: serde_json::Value| {
            let mut event = json!({
                "subagent": job.id,
                "started_by": run.step.started_by,
                "turn": turn,
                "step": kind,
            });
            if let (Some(event), serde_json::Value::Object(fields)) =
                (event.as_object_mut(), fields)
            {
                event.extend(fields);
            }
            runner.event("subagent/step", event);
        };
        loop {
            if *turns >= run.max_turns {
                return Err(Stop::Error(ToolError::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "{} reached its {} turns (max_turns) without a final answer",
                        job.id, run.max_turns
                    ),
                )));
            }
            *turns += 1;
            let turn = *turns;
            let request = SampleRequest {
                system: Some(SYSTEM_PROMPT.into()),
                messages: messages.clone(),
                tools: run.tools.clone(),
                max_tokens: self.config.max_tokens,
                wait: Duration::from_millis(self.config.sampling_timeout_ms),
            };
            let reply = match &run.client {
                Client::Fixed(sampler) => {
                    approver = sampler.approver();
                    job.set_note(Some(format!("turn {turn}: asking the model")));
                    sampler.sample(&request).await
                }
                Client::Borrowed => {
                    job.set_note(Some(format!(
                        "turn {turn}: waiting for job_output (its owner's wait_ms lends the client)"
                    )));
                    let borrowed = job.borrow_client().await;
                    approver = borrowed.sampler.approver();
                    job.set_note(Some(format!("turn {turn}: asking the model")));
                    borrowed.sampler.sample(&request).await
                }
                Client::Operator(model, caller) => {
                    approver = caller.as_ref().and_then(|c| c.approver());
                    self.check_owner_budget(&run.owner)?;
                    job.set_note(Some(format!("turn {turn}: asking model {}", model.name)));
                    let asked = Instant::now();
                    let answered = model.ask(&request).await;
                    let used = answered.as_ref().map(|(_, used)| *used).unwrap_or_default();
                    runner.event(
                        "subagent/model",
                        json!({
                            "subagent": job.id,
                            "started_by": run.step.started_by,
                            "turn": turn,
                            "model": model.name,
                            "input_tokens": used.input,
                            "output_tokens": used.output,
                            "duration_ms": asked.elapsed().as_secs_f64() * 1000.0,
                            "error": answered.as_ref().err().map(|e| e.code),
                        }),
                    );
                    let (reply, used) = answered?;
                    self.spend(&run.owner, used.total());
                    usage.input += used.input;
                    usage.output += used.output;
                    transcript.push(
                        turn,
                        "tokens",
                        &format!(
                            "{} in, {} out (model {}; {} in, {} out so far)",
                            used.input, used.output, model.name, usage.input, usage.output
                        ),
                    );
                    let limit = self.config.max_tokens_per_subagent;
                    if limit > 0 && usage.total() > limit {
                        return Err(Stop::Error(ToolError::new(
                            ErrorCode::LimitExceeded,
                            format!(
                                "{} used {} tokens, past its limit ([subagent] max_tokens_per_subagent = {limit})",
                                job.id,
                                usage.total()
                            ),
                        )));
                    }
                    Ok(reply)
                }
            };
            let reply = reply.map_err(|error| {
                ToolError::new(
                    ErrorCode::SamplingUnavailable,
                    match error {
                        SampleError::Unavailable(why) => {
                            format!("the client's model cannot be asked: {why}")
                        }
                        SampleError::Failed(why)
                        | SampleError::TimedOut(why)
                        | SampleError::Invalid(why) => {
                            format!("the client's model did not answer: {why}")
                        }
                    },
                )
            })?;
            let text: Vec<&str> = reply
                .content
                .iter()
                .filter_map(|c| match c {
                    SampleContent::Text(text) => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let text = text.join("\n");
            let uses: Vec<(String, String, serde_json::Value)> = reply
                .content
                .iter()
                .filter_map(|c| match c {
                    SampleContent::ToolUse { id, name, input } => {
                        Some((id.clone(), name.clone(), input.clone()))
                    }
                    _ => None,
                })
                .collect();
            if uses.is_empty() {
                transcript.push(turn, "answer", &text);
                step_event(turn, "answer", json!({ "text": text }));
                return Ok(text);
            }
            if !text.is_empty() {
                transcript.push(turn, "model", &text);
                step_event(turn, "model", json!({ "text": text }));
            }
            messages.push(SampleMessage {
                role: SampleRole::Assistant,
                content: reply.content.clone(),
            });
            let mut results = Vec::new();
            for (use_id, name, input) in uses {
                transcript.push(turn, &format!("call {name}"), &input.to_string());
                step_event(turn, "call", json!({ "tool": name, "args": input }));
                let result = if !run.allowed.contains(&name) {
                    let allowed: Vec<&str> = run.allowed.iter().map(String::as_str).collect();
                    CallResult::failed(ToolError::new(
                        ErrorCode::Denied,
                        format!(
                            "{name} is not among this subagent's tools ({}); nothing ran",
                            allowed.join(", ")
                        ),
                    ))
                } else {
                    job.set_note(Some(format!("turn {turn}: running {name}")));
                    let request = CallRequest {
                        approver: approver.clone(),
                        step: Some(run.step.clone()),
                        trace_parent: crate::traces::CallParent::Local(run.span.clone()),
                        sampler: match &run.client {
                            Client::Fixed(sampler) => Some(sampler.clone()),
                            Client::Operator(_, caller) => caller.clone(),
                            Client::Borrowed => None,
                        },
                        ..CallRequest::new(
                            name.clone(),
                            input.clone(),
                            run.owner.clone(),
                            run.scope.clone(),
                        )
                    };
                    // Dropped when the job is killed: the call is cancelled with it.
                    let never = CancellationToken::new();
                    runner.call(request, &never).await
                };
                let code = result
                    .error
                    .as_ref()
                    .map_or("ok", |error| error.code.as_str());
                let text = result.text();
                transcript.push(
                    turn,
                    &format!("result {name}: {code}"),
                    &first_lines(&text, self.config.result_lines),
                );
                step_event(turn, "result", json!({ "tool": name, "code": code }));
                results.push(SampleContent::ToolResult {
                    tool_use_id: use_id,
                    text,
                    is_error: result.error.is_some(),
                });
            }
            messages.push(SampleMessage {
                role: SampleRole::User,
                content: results,
            });
        }
    }

    /// Ends every running subagent of `owner` (its connection went away).
    pub fn end_owner(&self, owner: &str) -> usize {
        let jobs = self
            .running
            .lock()
            .unwrap()
            .remove(owner)
            .unwrap_or_default();
        for job in &jobs {
            job.set_kill_reason("its owner went away".into());
            job.cancel.cancel();
        }
        jobs.len()
    }

    /// Ends every running subagent (host shutdown).
    pub fn end_all(&self) {
        let all: Vec<Arc<Job>> = self
            .running
            .lock()
            .unwrap()
            .drain()
            .flat_map(|(_, jobs)| jobs)
            .collect();
        for job in all {
            job.set_kill_reason("the host shut down".into());
            job.cancel.cancel();
        }
    }
}

fn job_state_name(outcome: &Result<(String, u32, TokenUse), ToolError>) -> &'static str {
    match outcome {
        Ok(_) => "answered",
        Err(error) if error.code == ErrorCode::Cancelled => "killed",
        Err(_) => "failed",
    }
}

/// The caller's client when it can be asked; `SAMPLING_UNAVAILABLE` otherwise.
fn usable_sampler(caller: &CallContext) -> Result<Arc<dyn Sampler>, ToolError> {
    match &caller.sampler {
        Some(sampler) if sampler.available() => Ok(sampler.clone()),
        Some(_) => Err(ToolError::new(
            ErrorCode::SamplingUnavailable,
            "the MCP client did not declare sampling with tools (capabilities.sampling.tools), so dsh cannot ask its model; nothing ran",
        )),
        None => Err(ToolError::new(
            ErrorCode::SamplingUnavailable,
            "this call has no MCP client to ask for a model's answer (subagents run under `dsh serve`); nothing ran",
        )),
    }
}

/// The transcript: entries appended to the job's output, up to a cap.
struct Transcript<'a> {
    job: &'a Job,
    written: u64,
    cap: u64,
    cut: bool,
}

impl<'a> Transcript<'a> {
    fn new(job: &'a Job, cap: u64) -> Self {
        Transcript {
            job,
            written: 0,
            cap,
            cut: false,
        }
    }

    /// One entry: `[turn N] WHAT: first line` and the rest indented.
    fn push(&mut self, turn: u32, what: &str, body: &str) {
        if self.cut {
            return;
        }
        let mut entry = format!("[turn {turn}] {what}");
        let mut lines = body.lines();
        if let Some(first) = lines.next() {
            entry.push_str(": ");
            entry.push_str(first);
        }
        entry.push('\n');
        for line in lines {
            entry.push_str("    ");
            entry.push_str(line);
            entry.push('\n');
        }
        if self.written + entry.len() as u64 > self.cap {
            self.cut = true;
            entry = format!(
                "[transcript cut: it passed {} bytes ([subagent] max_transcript_bytes); the run goes on]\n",
                self.cap
            );
        }
        self.written += entry.len() as u64;
        if let Err(why) = self.job.push_output(entry.as_bytes()) {
            tracing::warn!(job = %self.job.id, %why, "a subagent's transcript passed the job output cap");
            self.cut = true;
        }
    }
}

/// The first `n` lines of `text`, and how many more there were.
fn first_lines(text: &str, n: usize) -> String {
    let total = text.lines().count();
    let mut out: Vec<&str> = text.lines().take(n).collect();
    let more;
    if total > n {
        more = format!("… {} more lines", total - n);
        out.push(&more);
    }
    out.join("\n")
}

/// `text`'s first line, cut to `max` characters.
fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_shows_its_first_lines_and_counts_the_rest() {
        assert_eq!(first_lines("a\nb\nc", 2), "a\nb\n… 1 more lines");
        assert_eq!(first_lines("a", 2), "a");
        assert_eq!(one_line("first\nsecond", 3), "fir…");
    }
}
