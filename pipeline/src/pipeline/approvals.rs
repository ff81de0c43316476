//! The approvals a person may answer: every guard's `ask` waiting for an answer is on
//! this board while it waits, for the operator's console to show and answer. The call's
//! own approver (the client's elicitation, `dsh call`'s prompt) is asked at the same
//! time; whichever answers first decides, and the other is dropped. When the call's
//! approver cannot ask anyone (a client without elicitation) and a console is open, the
//! ask waits for the console alone, up to `[serve] approval_timeout_ms` (then: denied).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::oneshot;

/// A person's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonAnswer {
    pub approve: bool,
    /// What they wrote with it.
    pub note: Option<String>,
}

/// One ask waiting, as the console shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingApproval {
    pub id: String,
    pub owner: String,
    pub call_id: String,
    pub tool: String,
    pub args: serde_json::Value,
    pub guard: String,
    pub reason: String,
    pub asked_at_ms: u64,
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("no approval {0} is waiting (it was answered, or its call ended)")]
    NotWaiting(String),
}

/// The asks waiting for an answer.
#[derive(Debug, Default)]
pub struct ApprovalBoard {
    /// Whether a console is open to answer (`DSH_CONSOLE_TOKEN` set on an HTTP server).
    open: AtomicBool,
    next: AtomicU64,
    waiting: Mutex<BTreeMap<u64, (PendingApproval, oneshot::Sender<PersonAnswer>)>>,
}

/// An ask on the board; taken off when dropped.
pub struct Posted<'a> {
    board: &'a ApprovalBoard,
    number: u64,
    answer: oneshot::Receiver<PersonAnswer>,
}

impl ApprovalBoard {
    /// Says a console is open (or no longer is).
    pub fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Release);
    }

    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Puts an ask on the board (only while a console is open: else `None`).
    pub fn post(
        &self,
        owner: &str,
        call_id: &str,
        tool: &str,
        args: &serde_json::Value,
        guard: &str,
        reason: &str,
    ) -> Option<Posted<'_>> {
        if !self.is_open() {
            return None;
        }
        let number = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tell, answer) = oneshot::channel();
        let pending = PendingApproval {
            id: format!("a-{number}"),
            owner: owner.to_string(),
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            args: args.clone(),
            guard: guard.to_string(),
            reason: reason.to_string(),
            asked_at_ms: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        self.waiting.lock().unwrap().insert(number, (pending, tell));
        Some(Posted {
            board: self,
            number,
            answer,
        })
    }

    /// The asks waiting, oldest first.
    pub fn waiting(&self) -> Vec<PendingApproval> {
        self.waiting
            .lock()
            .unwrap()
            .values()
            .map(|(pending, _)| pending.clone())
            .collect()
    }

    /// Answers the ask `id` (`a-N`).
    pub fn answer(&self, id: &str, answer: PersonAnswer) -> Result<(), AnswerError> {
        let not_waiting = || AnswerError::NotWaiting(id.to_string());
        let number: u64 = id
            .strip_prefix("a-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(not_waiting)?;
        let (_, tell) = self
            .waiting
            .lock()
            .unwrap()
            .remove(&number)
            .ok_or_else(not_waiting)?;
        tell.send(answer).map_err(|_| not_waiting())
    }
}

impl Posted<'_> {
    /// The person's answer; `None` after `timeout`, or when the board dropped the ask.
    pub async fn answered(&mut self, timeout: Duration) -> Option<PersonAnswer> {
        tokio::time::timeout(timeout, &mut self.answer)
            .await
            .ok()
            .and_then(Result::ok)
    }
}

impl Drop for Posted<'_> {
    fn drop(&mut self) {
        self.board.waiting.lock().unwrap().remove(&self.number);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_reaches_its_ask_once_and_an_ended_ask_leaves_the_board() {
        let board = ApprovalBoard::default();
        let args = serde_json::json!({"command": "rm -rf build"});
        assert!(
            board
                .post("o", "call-1", "bash", &args, "g", "why")
                .is_none(),
            "nothing is posted while no console is open"
        );
        board.set_open(true);
        let mut posted = board
            .post("o", "call-1", "bash", &args, "g", "why")
            .unwrap();
        let listed = board.waiting();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].tool, "bash");
        let id = listed[0].id.clone();
        let yes = PersonAnswer {
            approve: true,
            note: Some("ok".into()),
        };
        board.answer(&id, yes.clone()).unwrap();
        assert_eq!(
            board.answer(&id, yes.clone()),
            Err(AnswerError::NotWaiting(id.clone()))
        );
        assert_eq!(posted.answered(Duration::from_secs(1)).await, Some(yes));
        drop(posted);
        let ended = board
            .post("o", "call-2", "bash", &args, "g", "why")
            .unwrap();
        let id = board.waiting()[0].id.clone();
        drop(ended);
        assert!(
            board.waiting().is_empty(),
            "a call that ended takes its ask away"
        );
        assert!(board
            .answer(
                &id,
                PersonAnswer {
                    approve: false,
                    note: None
                }
            )
            .is_err());
        assert!(board
            .answer(
                "bogus",
                PersonAnswer {
                    approve: false,
                    note: None
                }
            )
            .is_err());
    }
}
