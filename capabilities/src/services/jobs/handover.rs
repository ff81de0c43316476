//! The job registry at an upgrade (see `crate::upgrade`): every job, running or finished,
//! written down with what a read needs (its state, its output's length, its in-memory
//! tail, its spill file's path, its note) and rebuilt by the next binary, so ids,
//! cursors and spill files stay valid. A running job's process is handed over by its
//! producer ([`crate::services::process::handover`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{Job, JobParts, JobRegistry, JobState, Output, Status};

/// Every job, handed over.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobsHandover {
    /// The last number given per kind (ids never repeat).
    pub next: Vec<(String, u64)>,
    /// Oldest first.
    pub jobs: Vec<JobHandover>,
    /// Per owner, the retired ids it is still told were retired.
    pub retired: Vec<(String, Vec<String>)>,
}

/// One job, handed over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobHandover {
    pub id: String,
    pub kind: String,
    pub owner: String,
    pub description: String,
    pub command: String,
    pub spill_path: PathBuf,
    /// Milliseconds since the epoch.
    pub started_at_ms: u64,
    /// How long it had run, or ran, in milliseconds.
    pub runtime_ms: u64,
    /// How long ago it ended, in milliseconds (its retention goes on).
    pub ended_ago_ms: Option<u64>,
    pub state: JobState,
    pub kill_reason: Option<String>,
    /// Bytes of output in all (the cursors' origin).
    pub total: u64,
    /// The in-memory tail, base64.
    pub tail: String,
    /// Why the spill file could not be written, if it could not.
    pub write_error: Option<String>,
    pub note: Option<String>,
}

impl JobRegistry {
    /// Every job as the next binary takes it back.
    pub fn hand_over(&self) -> JobsHandover {
        let table = self.table.lock().unwrap();
        let base64 = base64::engine::general_purpose::STANDARD;
        let jobs = table
            .order
            .values()
            .map(|job| {
                let status = job.status.lock().unwrap();
                let output = job.output.lock().unwrap();
                let (front, back) = output.tail.as_slices();
                JobHandover {
                    id: job.id.clone(),
                    kind: job.kind.clone(),
                    owner: job.owner.to_string(),
                    description: job.description.clone(),
                    command: job.command.clone(),
                    spill_path: job.spill_path.clone(),
                    started_at_ms: job
                        .started_at
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64),
                    runtime_ms: status
                        .ended
                        .unwrap_or_else(Instant::now)
                        .duration_since(job.started)
                        .as_millis() as u64,
                    ended_ago_ms: status.ended.map(|at| at.elapsed().as_millis() as u64),
                    state: status.state.clone(),
                    kill_reason: status.kill_reason.clone(),
                    total: output.total,
                    tail: base64.encode([front, back].concat()),
                    write_error: output.write_error.clone(),
                    note: job.note.lock().unwrap().clone(),
                }
            })
            .collect();
        JobsHandover {
            next: table.next.iter().map(|(k, n)| (k.clone(), *n)).collect(),
            jobs,
            retired: table
                .retired
                .iter()
                .map(|(owner, ids)| (owner.to_string(), ids.order.iter().cloned().collect()))
                .collect(),
        }
    }

    /// Rebuilds the jobs the binary before handed over. A running job's spill file is
    /// opened again for appending; its process is taken back by its producer.
    pub fn restore(&self, handover: JobsHandover) {
        let base64 = base64::engine::general_purpose::STANDARD;
        let mut table = self.table.lock().unwrap();
        for (kind, n) in handover.next {
            let next = table.next.entry(kind).or_insert(0);
            *next = (*next).max(n);
        }
        for (owner, ids) in handover.retired {
            let remembered = table.retired.entry(Arc::from(owner.as_str())).or_default();
            for id in ids {
                remembered.remember(id);
            }
        }
        for handed in handover.jobs {
            let running = handed.state == JobState::Running;
            let mut write_error = handed.write_error;
            let file = if running && write_error.is_none() {
                match std::fs::OpenOptions::new()
                    .append(true)
                    .open(&handed.spill_path)
                {
                    Ok(file) => Some(file),
                    Err(error) => {
                        write_error = Some(crate::output::spill_error_text(&error));
                        None
                    }
                }
            } else {
                None
            };
            let now = Instant::now();
            let ended = handed
                .ended_ago_ms
                .map(|ago| now.checked_sub(Duration::from_millis(ago)).unwrap_or(now));
            let started = ended
                .unwrap_or(now)
                .checked_sub(Duration::from_millis(handed.runtime_ms))
                .unwrap_or(now);
            let owner: Arc<str> = Arc::from(handed.owner.as_str());
            let tail: VecDeque<u8> = base64.decode(&handed.tail).unwrap_or_default().into();
            self.enter(
                &mut table,
                JobParts {
                    id: handed.id,
                    kind: handed.kind,
                    owner,
                    description: handed.description,
                    command: handed.command,
                    spill_path: handed.spill_path,
                    started_at: UNIX_EPOCH + Duration::from_millis(handed.started_at_ms),
                    started,
                    status: Status {
                        state: handed.state,
                        ended,
                        kill_reason: handed.kill_reason,
                    },
                    output: Output {
                        tail,
                        total: handed.total,
                        file,
                        write_error,
                    },
                    note: handed.note,
                },
            );
        }
    }

    /// The running job `id`, whoever owns it (for its producer, at an upgrade).
    pub fn running_job(&self, id: &str) -> Option<Arc<Job>> {
        let table = self.table.lock().unwrap();
        let (_, job) = table.by_id.get(id)?;
        (job.state() == JobState::Running).then(|| job.clone())
    }

    /// Running jobs whose producer is not handed over at an upgrade: every kind but
    /// background commands (`bash`).
    pub fn running_not_handed_over(&self) -> Vec<String> {
        let table = self.table.lock().unwrap();
        table
            .order
            .values()
            .filter(|job| job.kind != "bash" && job.state() == JobState::Running)
            .map(|job| job.id.clone())
            .collect()
    }
}
