//! Background jobs' processes at an upgrade (see `crate::upgrade`): each job's task is
//! paused between two reads of its output, so no byte is taken from a pipe the snapshot
//! would not account for; the paused trees are written down (the pipe's read end kept
//! open across the `exec`, the shell's pid, its container, its marker) and driven again,
//! by this binary if the upgrade does not happen, or by the next one.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::services::jobs::{Job, JobRegistry};

use super::containment::{self, RunHandover};
use super::{GroupGuard, GroupSignal, ProcessService, ProcessTree};
use dsh_launch::Child;

/// The job tasks of a process service: how many drive a tree now, the token that pauses
/// them, and the trees they gave back.
#[derive(Default)]
pub(super) struct JobTasks {
    running: AtomicUsize,
    pause: Mutex<CancellationToken>,
    paused: Mutex<Vec<PausedJob>>,
    settled: tokio::sync::Notify,
}

/// A job whose task an upgrade paused.
pub(super) struct PausedJob {
    pub job: Arc<Job>,
    pub tree: ProcessTree,
    /// A sandboxed job's closing line (`[sandbox: …]`).
    pub marker: Option<String>,
}

impl std::fmt::Debug for JobTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobTasks")
            .field("running", &self.running.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl JobTasks {
    /// A task starts driving a tree: counted, and given the token that pauses it.
    pub(super) fn enter(&self) -> CancellationToken {
        self.running.fetch_add(1, Ordering::AcqRel);
        self.pause.lock().unwrap().clone()
    }

    /// A task ended (its job finished).
    pub(super) fn left(&self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.settled.notify_waiters();
    }

    /// A task paused and gave its tree back.
    pub(super) fn paused(&self, paused: PausedJob) {
        self.paused.lock().unwrap().push(paused);
        self.left();
    }
}

/// A background job's process, handed over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobProcessHandover {
    pub job: String,
    /// The read end of its output pipe, open across the `exec`.
    pub pipe: i32,
    /// The shell's pid (its process group).
    pub leader: i32,
    pub run: RunHandover,
    pub marker: Option<String>,
    /// A sandboxed job's private temporary directory.
    pub private_tmp: Option<PathBuf>,
}

impl ProcessService {
    /// Pauses every background job's task (each stops between two reads of its output,
    /// or finishes if its shell has exited already); waits at most `limit` for them.
    pub async fn pause_jobs(&self, limit: Duration) -> Result<(), String> {
        let tasks = &self.job_tasks;
        std::mem::take(&mut *tasks.pause.lock().unwrap()).cancel();
        let all_settled = async {
            loop {
                let settled = tasks.settled.notified();
                if tasks.running.load(Ordering::Acquire) == 0 {
                    return;
                }
                settled.await;
            }
        };
        tokio::time::timeout(limit, all_settled).await.map_err(|_| {
            self.resume_jobs();
            format!(
                "{} background job(s) did not pause within {} ms",
                tasks.running.load(Ordering::Acquire),
                limit.as_millis()
            )
        })
    }

    /// Drives the paused jobs again (an upgrade that did not happen): their pipes close
    /// on `exec` again.
    pub fn resume_jobs(&self) {
        let paused = std::mem::take(&mut *self.job_tasks.paused.lock().unwrap());
        for PausedJob { job, tree, marker } in paused {
            containment::close_on_exec(&tree.output.as_raw_fd());
            self.drive_job(job, tree, marker);
        }
    }

    /// The paused jobs' processes as the next binary takes them back (their pipes named
    /// by number).
    pub fn hand_over_jobs(&self) -> std::io::Result<Vec<JobProcessHandover>> {
        let paused = self.job_tasks.paused.lock().unwrap();
        let mut handed = Vec::with_capacity(paused.len());
        for PausedJob { job, tree, marker } in paused.iter() {
            let pipe = tree.output.as_raw_fd();
            handed.push(JobProcessHandover {
                job: job.id.clone(),
                pipe,
                leader: tree.child.pid(),
                run: tree.group.run.hand_over(),
                marker: marker.clone(),
                private_tmp: tree
                    .sandbox
                    .as_ref()
                    .map(|s| s.tmp().to_path_buf())
                    .or_else(|| tree.handed_tmp.clone()),
            });
        }
        Ok(handed)
    }

    /// Drives the jobs the binary before handed over (from a tokio context), reporting
    /// into their jobs in `jobs` (restored first). A job that cannot be taken back is
    /// finished as failed, saying why.
    pub fn restore_jobs(
        &self,
        handed: Vec<JobProcessHandover>,
        jobs: &JobRegistry,
        children: &mut HashMap<i32, Child>,
    ) {
        for process in handed {
            // The pipe first: owned (closed on drop) whatever happens next.
            let pipe = containment::inherited_fd(process.pipe);
            let Some(job) = jobs.running_job(&process.job) else {
                tracing::warn!(job = %process.job, "a handed-over process has no job; it is killed");
                continue;
            };
            let failed = |why: String| {
                job.finish(crate::services::jobs::JobState::Failed {
                    reason: format!("not taken over at an upgrade: {why}"),
                })
            };
            let Some(mut child) = children.remove(&process.leader) else {
                failed("its shell was not adopted".into());
                continue;
            };
            child.watch();
            let Some(pipe) = pipe else {
                failed("its output pipe was not open".into());
                continue;
            };
            let output = match tokio::net::unix::pipe::Receiver::from_owned_fd(pipe) {
                Ok(output) => output,
                Err(error) => {
                    failed(format!("its output pipe: {error}"));
                    continue;
                }
            };
            let run = match self.launch.containment().adopt_run(&process.run) {
                Ok(run) => run,
                Err(error) => {
                    failed(error.to_string());
                    continue;
                }
            };
            let pid = child.pid();
            let group = GroupGuard::new(pid, job.owner.clone(), run, self.live_groups.clone());
            job.set_signaller(Arc::new(GroupSignal(pid)));
            let tree = ProcessTree {
                child,
                output,
                group,
                sandbox: None,
                handed_tmp: process.private_tmp,
                egress: None,
            };
            self.drive_job(job, tree, process.marker);
        }
    }
}
