//! Resource changes: what the terminal sessions and background jobs tell whoever watches
//! an owner's resources (the MCP front end, for `notifications/resources/updated` and
//! `notifications/resources/list_changed`).
//!
//! Each owner has its own channel, made when something of the owner first reports or a
//! watcher first subscribes; a session or job holds its owner's sender, so reporting
//! takes no shared lock and costs nothing while nobody watches that owner. Another
//! owner's changes never reach a watcher. A watcher that falls behind hears
//! [`Missed`](tokio::sync::broadcast::error::RecvError::Lagged) and should take
//! everything it watches as changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

/// What changed for one owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceChange {
    /// The resource `id` of the kind whose URIs have `scheme` changed (a terminal
    /// session's output or state, a job's output or its end).
    Updated { scheme: &'static str, id: Arc<str> },
    /// The owner's set of resources, or what one says of itself (running, exited),
    /// changed.
    Listed,
}

/// How many changes a watcher may fall behind before it misses some.
const CHANNEL_CAPACITY: usize = 256;

/// One owner's sender: what a session or job reports through.
#[derive(Debug, Clone)]
pub struct OwnerChanges(broadcast::Sender<ResourceChange>);

impl OwnerChanges {
    /// Reports `change` to the owner's watchers, if any.
    pub fn report(&self, change: ResourceChange) {
        if self.0.receiver_count() > 0 {
            let _ = self.0.send(change);
        }
    }
}

/// Every owner's channel.
#[derive(Debug, Clone, Default)]
pub struct ResourceChanges {
    owners: Arc<Mutex<HashMap<Arc<str>, broadcast::Sender<ResourceChange>>>>,
}

impl ResourceChanges {
    fn sender(&self, owner: &str) -> broadcast::Sender<ResourceChange> {
        let mut owners = self.owners.lock().unwrap();
        if let Some(sender) = owners.get(owner) {
            return sender.clone();
        }
        let (sender, _) = broadcast::channel(CHANNEL_CAPACITY);
        owners.insert(owner.into(), sender.clone());
        sender
    }

    /// The sender a new session or job of `owner` keeps.
    pub fn for_owner(&self, owner: &str) -> OwnerChanges {
        OwnerChanges(self.sender(owner))
    }

    /// A watcher of `owner`'s changes from now on.
    pub fn watch(&self, owner: &str) -> broadcast::Receiver<ResourceChange> {
        self.sender(owner).subscribe()
    }

    /// Forgets `owner`'s channel (it went away). Its sessions and jobs, if any are left,
    /// keep reporting into the old one, which nobody watches.
    pub fn forget_owner(&self, owner: &str) {
        self.owners.lock().unwrap().remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watcher_hears_its_owner_only() {
        let changes = ResourceChanges::default();
        let mut mine = changes.watch("a");
        let theirs = changes.for_owner("b");
        theirs.report(ResourceChange::Listed);
        changes.for_owner("a").report(ResourceChange::Updated {
            scheme: "terminal",
            id: "term-1".into(),
        });
        assert_eq!(
            mine.try_recv().unwrap(),
            ResourceChange::Updated {
                scheme: "terminal",
                id: "term-1".into()
            }
        );
        assert!(mine.try_recv().is_err(), "b's change reached a's watcher");
    }

    #[test]
    fn reporting_with_no_watcher_keeps_nothing() {
        let changes = ResourceChanges::default();
        let sender = changes.for_owner("a");
        for _ in 0..CHANNEL_CAPACITY * 2 {
            sender.report(ResourceChange::Listed);
        }
        let mut late = changes.watch("a");
        assert!(late.try_recv().is_err(), "a change from before it watched");
    }
}
