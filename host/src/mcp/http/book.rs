//! The HTTP sessions' book, for upgrades (`crate::upgrade`): which owner and scope each
//! live session has and what its client sent in `initialize`, so the next binary can
//! take the sessions back. The next binary holds the sessions handed to it as
//! restorable: rmcp restores one when its client's next request names it (its session
//! store, [`ScopedStore`], gives the `initialize` to replay), and the session's
//! connection takes back its owner, with that owner's terminals and jobs. A session its
//! client never brings back is forgotten after `[serve] http_session_idle_ms`, and its
//! owner released after the grace period, as if it had gone idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};

use serde::{Deserialize, Serialize};

/// Marks the `initialize` of a session (a new one, or one restored) with its id, so the
/// connection answering it learns which session it serves.
#[derive(Debug, Clone)]
pub struct SessionIdOf(pub String);

/// What of a live session's connection changes after its `initialize`: its log level and
/// its subscriptions, read when the session is handed over.
#[derive(Debug, Clone)]
pub struct ConnectionState {
    pub log_threshold: Arc<crate::call::LogThreshold>,
    pub subscriptions: crate::mcp::resources::Subscriptions,
}

/// The live and restorable sessions.
#[derive(Debug, Default)]
pub struct SessionBook {
    live: Mutex<HashMap<String, (HttpSessionHandover, ConnectionState)>>,
    restorable: Mutex<HashMap<String, HttpSessionHandover>>,
}

impl SessionBook {
    /// A session's connection answered its `initialize`; returns what it had before an
    /// upgrade, when it is one taken back.
    pub fn opened(
        &self,
        session: HttpSessionHandover,
        state: ConnectionState,
    ) -> Option<HttpSessionHandover> {
        let before = self.restorable.lock().unwrap().remove(&session.id);
        self.live
            .lock()
            .unwrap()
            .insert(session.id.clone(), (session, state));
        before
    }

    /// A session's connection ended.
    pub fn closed(&self, id: &str) {
        self.live.lock().unwrap().remove(id);
    }

    /// The owner a restored session had in the binary before.
    pub fn restored_owner(&self, id: &str) -> Option<Arc<str>> {
        let restorable = self.restorable.lock().unwrap();
        restorable.get(id).map(|s| Arc::from(s.owner.as_str()))
    }

    /// Every live session (what an upgrade hands over).
    pub fn live(&self) -> Vec<HttpSessionHandover> {
        let mut sessions: Vec<_> = self
            .live
            .lock()
            .unwrap()
            .values()
            .map(|(session, state)| {
                let mut session = session.clone();
                session.log_level = state.log_threshold.get().map(|level| level as u8);
                session.subscriptions = state
                    .subscriptions
                    .lock()
                    .unwrap()
                    .iter()
                    .cloned()
                    .collect();
                session
            })
            .collect();
        // Those handed to this binary and not brought back yet go on too.
        sessions.extend(self.restorable.lock().unwrap().values().cloned());
        sessions
    }

    /// Sessions handed over by the binary before, restorable from now on.
    pub fn hand_in(&self, sessions: Vec<HttpSessionHandover>) {
        let mut restorable = self.restorable.lock().unwrap();
        for session in sessions {
            restorable.insert(session.id.clone(), session);
        }
    }

    /// Forgets a handed-over session that was not brought back; its owner, if so.
    pub fn expire(&self, id: &str) -> Option<Arc<str>> {
        self.restorable
            .lock()
            .unwrap()
            .remove(id)
            .map(|s| Arc::from(s.owner.as_str()))
    }

    /// The store one scope's MCP service restores its sessions from.
    pub fn store(self: &Arc<Self>, scope: Arc<str>) -> ScopedStore {
        ScopedStore {
            book: self.clone(),
            scope,
        }
    }
}

/// One scope's view of the restorable sessions, as rmcp's session store: a session of
/// another scope is not there (the token of one scope never restores another's).
#[derive(Debug)]
pub struct ScopedStore {
    book: Arc<SessionBook>,
    scope: Arc<str>,
}

#[async_trait::async_trait]
impl SessionStore for ScopedStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let restorable = self.book.restorable.lock().unwrap();
        let Some(session) = restorable.get(session_id) else {
            return Ok(None);
        };
        if *session.scope != *self.scope {
            return Ok(None);
        }
        // Only the token that opened it takes it back.
        if let (Some(opened), Some(asking)) = (&session.principal, super::request_principal()) {
            if **opened != *asking {
                return Ok(None);
            }
        }
        let params = serde_json::from_value(session.initialize.clone())?;
        Ok(Some(SessionState::new(params)))
    }

    /// Live sessions are booked by their connections (with their owners); nothing to do.
    async fn store(
        &self,
        _session_id: &str,
        _state: &SessionState,
    ) -> Result<(), SessionStoreError> {
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.book.restorable.lock().unwrap().remove(session_id);
        Ok(())
    }
}

/// One HTTP session, handed over.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HttpSessionHandover {
    pub id: String,
    pub scope: String,
    pub owner: String,
    /// The params of its client's `initialize`.
    pub initialize: serde_json::Value,
    /// The level it set with `logging/setLevel` (its number), if any.
    #[serde(default)]
    pub log_level: Option<u8>,
    /// The resources it subscribed to.
    #[serde(default)]
    pub subscriptions: Vec<String>,
    /// The owner of the principal whose token opened it (`@name`): only that token
    /// takes it back. None from a binary that did not record it (any token of its scope).
    #[serde(default)]
    pub principal: Option<String>,
}
