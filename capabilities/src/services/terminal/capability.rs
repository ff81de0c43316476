//! What the host sees of the terminal capability: its grant, how it starts, what it
//! releases, its gauge, its sessions' screens as resources (`terminal://ID/screen`), and
//! its sessions handed over at an upgrade (the snapshot's `terminals`).

use std::sync::Arc;

use crate::error::ErrorCode;
use crate::services::handover::{
    checked_entry, entry, to_entry, Adopted, Handed, HandoverError, HandoverFuture,
};
use crate::services::resources::{OwnedResource, ReadFuture, ResourceKind, ResourceSource};
use crate::services::{Capability, CapabilityError, CapabilityInfo, Foundation, Gauge};

use super::handover::TerminalsHandover;
use super::{SessionInfo, TerminalConfig, TerminalService, View};

/// The snapshot's entry of the sessions.
const HANDED: &str = "terminals";

/// The scheme of a session's screen URI (what a session's changes are reported under).
pub const SCREEN_SCHEME: &str = "terminal";

impl Capability for Arc<TerminalService> {
    type Config = TerminalConfig;
    const INFO: CapabilityInfo = CapabilityInfo {
        name: "terminal",
        summary: "open, drive, read and close interactive PTY sessions",
        needs_grant: true,
        asks_client: false,
        errors: &[
            ErrorCode::NotFound,
            ErrorCode::InvalidArguments,
            ErrorCode::LimitExceeded,
            ErrorCode::SendActive,
            ErrorCode::SessionClosing,
            ErrorCode::TerminalHeld,
            ErrorCode::Timeout,
        ],
    };

    fn start(config: &TerminalConfig, foundation: &Foundation) -> Result<Self, CapabilityError> {
        Ok(Arc::new(TerminalService::new(
            config.clone(),
            foundation.launch.clone(),
            foundation.jobs.clone(),
        )))
    }

    fn release_owner(&self, owner: &str) -> usize {
        self.close_owner(owner)
    }

    fn shutdown(&self) {
        self.close_all();
    }

    fn resources(&self) -> Vec<Arc<dyn ResourceSource>> {
        vec![Arc::new(Screens {
            terminal: self.clone(),
            kind: ResourceKind {
                scheme: SCREEN_SCHEME,
                part: "screen",
                name: "terminal screen",
                title: "Terminal screen",
                description:
                    "The screen of a terminal session (terminal_open) as it is now; id: term-N."
                        .into(),
            },
        })]
    }

    fn for_people(&self) -> Option<Arc<dyn crate::services::people::PeopleTerminals>> {
        Some(self.clone())
    }

    fn pause(&self) -> HandoverFuture<'_, Result<(), HandoverError>> {
        self.pause_reading();
        Box::pin(async { Ok(()) })
    }

    fn hand_over(
        &self,
    ) -> HandoverFuture<'_, Result<Vec<(&'static str, serde_json::Value)>, HandoverError>> {
        let handed = TerminalService::hand_over(self)
            .map_err(|e| HandoverError::Refused(e.to_string()))
            .and_then(|sessions| to_entry(HANDED, &sessions));
        Box::pin(async move { Ok(vec![handed?]) })
    }

    fn take_back(&self) -> HandoverFuture<'_, ()> {
        TerminalService::take_back(self);
        self.resume_reading();
        Box::pin(async {})
    }

    fn check_handed(handed: &Handed) -> Result<(), String> {
        entry::<TerminalsHandover>(handed, HANDED).map(drop)
    }

    fn handed_descriptors(handed: &Handed) -> Vec<i32> {
        let sessions: TerminalsHandover = checked_entry(handed, HANDED);
        sessions.sessions.iter().map(|s| s.master).collect()
    }

    fn handed_children(handed: &Handed) -> Vec<i32> {
        let sessions: TerminalsHandover = checked_entry(handed, HANDED);
        sessions
            .sessions
            .iter()
            .filter(|s| !s.reaped && !s.exited)
            .map(|s| s.leader)
            .collect()
    }

    fn restore(&self, handed: &Handed, adopted: &mut Adopted, _foundation: &Foundation) {
        TerminalService::restore(self, checked_entry(handed, HANDED), adopted);
    }

    fn gauges(&self) -> Vec<Gauge> {
        let terminal = self.clone();
        vec![Gauge::new(
            "dsh_terminals",
            "Live terminal sessions, of every owner",
            move || terminal.live() as i64,
        )]
    }
}

/// The sessions' screens: the grid as it is now (no cursor, no byte budget).
#[derive(Debug)]
struct Screens {
    terminal: Arc<TerminalService>,
    kind: ResourceKind,
}

impl ResourceSource for Screens {
    fn kind(&self) -> &ResourceKind {
        &self.kind
    }

    fn list(&self, owner: &str) -> Vec<OwnedResource> {
        self.terminal.list(owner).iter().map(listed).collect()
    }

    fn read<'a>(&'a self, owner: &'a str, id: &'a str) -> ReadFuture<'a> {
        Box::pin(async move {
            let read = self.terminal.read(owner, id, View::Screen, 0, usize::MAX)?;
            Ok(read.text)
        })
    }
}

fn listed(session: &SessionInfo) -> OwnedResource {
    let state = if session.alive {
        "running".to_string()
    } else {
        match session.exit_code {
            Some(code) => format!("exited (code {code})"),
            None => "exited".to_string(),
        }
    };
    OwnedResource {
        id: session.id.clone(),
        name: format!("{} screen", session.id),
        title: format!("Terminal {} ({})", session.id, session.shell),
        description: format!(
            "The screen of terminal session {} as it is now ({} in {}, {}x{}, {state}).",
            session.id,
            session.shell,
            session.cwd.display(),
            session.cols,
            session.rows
        ),
    }
}
