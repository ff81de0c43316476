//! The language servers at an upgrade (see `crate::upgrade`): each server's reader is
//! paused between two messages, each server written down with its slot (its pipes kept
//! open across the `exec`, what was read of its next message, its open documents and
//! their versions, its container), and rebuilt by the next binary, which goes on talking
//! to the same process: no restart, no new `initialize`, its index warm.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use dsh_launch::Child;
use dsh_launch::ExecutorKind;

use super::server::{Server, ServerHandover};
use super::{LspService, Slot};

/// A slot and its running server, handed over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlotHandover {
    pub name: String,
    pub root: PathBuf,
    pub executor: ExecutorKind,
    pub started_once: bool,
    pub restarted: bool,
    pub server: ServerHandover,
}

/// A running server with its slot's key and whether its start and restart are spent.
type Running = ((String, PathBuf, ExecutorKind), Arc<Server>, bool, bool);

impl LspService {
    /// The running servers, with their slots.
    fn running(&self) -> Vec<Running> {
        let slots: Vec<_> = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(key, slot)| (key.clone(), slot.clone()))
            .collect();
        slots
            .into_iter()
            .filter_map(|(key, slot)| {
                let slot = slot.try_lock().ok()?;
                let server = slot.server.clone()?;
                Some((key, server, slot.started_once, slot.restarted))
            })
            .collect()
    }

    /// Pauses every running server's reader; the servers whose reader had ended (dead)
    /// are not handed over.
    pub async fn pause_all(&self) {
        for (_, server, _, _) in self.running() {
            server.pause_reading().await;
        }
    }

    /// Reads every server again (an upgrade that did not happen).
    pub async fn resume_all(&self) {
        for (_, server, _, _) in self.running() {
            server.resume_reading().await;
        }
    }

    /// Every paused server as the next binary takes it back.
    pub async fn hand_over(&self) -> std::io::Result<Vec<SlotHandover>> {
        let mut handed = Vec::new();
        for ((name, root, executor), server, started_once, restarted) in self.running() {
            if !server.alive() {
                continue;
            }
            handed.push(SlotHandover {
                name,
                root,
                executor,
                started_once,
                restarted,
                server: server.hand_over().await?,
            });
        }
        Ok(handed)
    }

    /// Rebuilds the servers the binary before handed over (from a tokio context); one
    /// that cannot be taken back is left to start again at its next query.
    pub fn restore(self: &Arc<Self>, slots: Vec<SlotHandover>, children: &mut HashMap<i32, Child>) {
        if slots.is_empty() {
            return;
        }
        for handed in slots {
            let child = children.remove(&handed.server.pid);
            let pid = handed.server.pid;
            match Server::restore(&self.launch, handed.server, child) {
                Ok(server) => {
                    let slot = Slot {
                        server: Some(server),
                        started_once: handed.started_once,
                        restarted: handed.restarted,
                    };
                    self.slots.lock().unwrap_or_else(|e| e.into_inner()).insert(
                        (handed.name, handed.root, handed.executor),
                        Arc::new(tokio::sync::Mutex::new(slot)),
                    );
                }
                Err(why) => {
                    tracing::warn!(pid, %why, "a language server was not taken over; it starts again at its next query")
                }
            }
        }
        self.start_reaper();
    }
}
