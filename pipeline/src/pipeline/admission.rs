//! Admission: how many calls run at once, and who goes next. A call holds a slot from
//! its first guard to its last filter; at `[limits] max_calls_in_flight` a new call
//! waits in a bounded queue, and a freed slot goes to the owners in turn (round-robin
//! between owners, each owner's calls in the order they came). Past
//! `[limits] max_queued_calls` waiting, a call gets `BUSY` naming both limits.
//!
//! A call holds at most one plugin instance at a time, and the engine's pool has more
//! instances than calls may be admitted ([`crate::engine::MAX_CALL_SLOTS`]), so an
//! admitted call's guards and filters always find an instance: they never fail closed
//! for want of one.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::error::{ErrorCode, ToolError};

/// The limits a call is admitted under (read from its configuration, so they change
/// live).
#[derive(Debug, Clone, Copy)]
pub struct AdmissionLimits {
    pub max_in_flight: usize,
    pub max_queued: usize,
}

/// A waiting call: its number and where its slot is handed.
struct Waiter {
    id: u64,
    grant: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    /// Slots held (by running calls, or handed to a waiter not yet awake).
    in_flight: usize,
    /// The newest `max_calls_in_flight`: a freed slot past it is not handed on.
    max_in_flight: usize,
    /// Waiting calls per owner, oldest first.
    queues: HashMap<Arc<str>, VecDeque<Waiter>>,
    /// Owners with waiting calls, in the order they are served.
    turn: VecDeque<Arc<str>>,
    /// Waiting calls in all.
    queued: usize,
    next_id: u64,
}

impl State {
    /// Hands a freed slot to the next owner's oldest waiting call, or frees it.
    fn release(&mut self) {
        while self.in_flight <= self.max_in_flight {
            let Some(owner) = self.turn.pop_front() else {
                break;
            };
            let Some(queue) = self.queues.get_mut(&owner) else {
                continue;
            };
            let waiter = queue.pop_front();
            if queue.is_empty() {
                self.queues.remove(&owner);
            } else {
                self.turn.push_back(owner);
            }
            let Some(waiter) = waiter else { continue };
            self.queued -= 1;
            if waiter.grant.send(()).is_ok() {
                return;
            }
        }
        self.in_flight -= 1;
    }

    /// Takes a call that gave up waiting out of its owner's queue; `false` when it is no
    /// longer there (it was handed a slot).
    fn withdraw(&mut self, owner: &Arc<str>, id: u64) -> bool {
        let Some(queue) = self.queues.get_mut(owner) else {
            return false;
        };
        let Some(at) = queue.iter().position(|w| w.id == id) else {
            return false;
        };
        queue.remove(at);
        self.queued -= 1;
        if queue.is_empty() {
            self.queues.remove(owner);
            self.turn.retain(|o| o != owner);
        }
        true
    }
}

/// The admission queue of one host.
#[derive(Default, Clone)]
pub struct Admission {
    state: Arc<Mutex<State>>,
}

/// A call's slot: freed (handed to the next waiting call) when dropped.
pub struct Slot {
    state: Arc<Mutex<State>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.state.lock().unwrap().release();
    }
}

/// A call waiting its turn; if it is dropped while waiting (the call was cancelled), it
/// leaves the queue, or passes on the slot it was just handed.
struct Waiting {
    state: Arc<Mutex<State>>,
    owner: Arc<str>,
    id: u64,
    granted: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut granted) = self.granted.take() else {
            return;
        };
        let mut state = self.state.lock().unwrap();
        if !state.withdraw(&self.owner, self.id) && granted.try_recv().is_ok() {
            state.release();
        }
    }
}

impl Admission {
    pub fn new() -> Self {
        Admission::default()
    }

    /// Waits for a slot for a call of `owner`; `BUSY` when the queue is full.
    pub async fn admit(&self, owner: &str, limits: AdmissionLimits) -> Result<Slot, ToolError> {
        let mut waiting = {
            let mut state = self.state.lock().unwrap();
            state.max_in_flight = limits.max_in_flight;
            if state.in_flight < limits.max_in_flight && state.queued == 0 {
                state.in_flight += 1;
                return Ok(Slot {
                    state: self.state.clone(),
                });
            }
            if state.queued >= limits.max_queued {
                return Err(busy(limits, state.in_flight, state.queued));
            }
            let owner: Arc<str> = owner.into();
            let (grant, granted) = oneshot::channel();
            state.next_id += 1;
            let id = state.next_id;
            if !state.queues.contains_key(&owner) {
                state.turn.push_back(owner.clone());
            }
            state
                .queues
                .entry(owner.clone())
                .or_default()
                .push_back(Waiter { id, grant });
            state.queued += 1;
            // Slots freed by a raised limit are handed out now, not at the next release.
            while state.in_flight < state.max_in_flight && state.queued > 0 {
                state.in_flight += 1;
                state.release();
            }
            Waiting {
                state: self.state.clone(),
                owner,
                id,
                granted: Some(granted),
            }
        };
        let granted = waiting.granted.as_mut().expect("set above");
        let handed = granted.await;
        waiting.granted = None;
        match handed {
            Ok(()) => Ok(Slot {
                state: self.state.clone(),
            }),
            // The sender is only dropped after a send or by `Admission` going away.
            Err(_) => Err(ToolError::new(
                ErrorCode::Internal,
                "the admission queue was dropped while the call waited",
            )),
        }
    }

    /// Calls running and calls waiting now.
    pub fn load(&self) -> (usize, usize) {
        let state = self.state.lock().unwrap();
        (state.in_flight, state.queued)
    }
}

fn busy(limits: AdmissionLimits, in_flight: usize, queued: usize) -> ToolError {
    ToolError::new(
        ErrorCode::Busy,
        format!(
            "the host is busy: {in_flight} calls are running ([limits] max_calls_in_flight = {}) and {queued} are waiting ([limits] max_queued_calls = {}); the call did not start, try it again later",
            limits.max_in_flight, limits.max_queued
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: AdmissionLimits = AdmissionLimits {
        max_in_flight: 1,
        max_queued: 3,
    };

    fn start(
        admission: &Admission,
        owner: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<Result<Slot, ToolError>> {
        let (admission, order) = (admission.clone(), order.clone());
        tokio::spawn(async move {
            let slot = admission.admit(owner, LIMITS).await?;
            order.lock().unwrap().push(owner);
            Ok(slot)
        })
    }

    async fn until_queued(admission: &Admission, queued: usize) {
        while admission.load().1 != queued {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_owners_in_turn_and_a_full_queue_is_busy() {
        let admission = Admission::new();
        let first = admission.admit("a", LIMITS).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let a2 = start(&admission, "a", &order);
        until_queued(&admission, 1).await;
        let a3 = start(&admission, "a", &order);
        until_queued(&admission, 2).await;
        let b1 = start(&admission, "b", &order);
        until_queued(&admission, 3).await;

        let refused = admission.admit("c", LIMITS).await.err().unwrap();
        assert_eq!(refused.code, ErrorCode::Busy);
        assert!(
            refused.message.contains("max_queued_calls = 3"),
            "{refused}"
        );
        assert!(
            refused.message.contains("max_calls_in_flight = 1"),
            "{refused}"
        );

        drop(first);
        drop(a2.await.unwrap().unwrap());
        drop(b1.await.unwrap().unwrap());
        drop(a3.await.unwrap().unwrap());
        assert_eq!(*order.lock().unwrap(), ["a", "b", "a"]);
        assert_eq!(admission.load(), (0, 0));
    }

    #[tokio::test]
    async fn a_call_cancelled_while_waiting_leaves_the_queue_and_holds_no_slot() {
        let admission = Admission::new();
        let first = admission.admit("a", LIMITS).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiting = start(&admission, "a", &order);
        until_queued(&admission, 1).await;
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(admission.load(), (1, 0));
        drop(first);
        assert_eq!(admission.load(), (0, 0));
        drop(admission.admit("b", LIMITS).await.unwrap());
    }
}
