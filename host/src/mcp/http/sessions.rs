//! The MCP sessions of the HTTP server: rmcp's in-memory session manager, wrapped to
//! count sessions (at most `[serve] http_max_sessions`) and to close the idle ones.
//!
//! A session is idle when no response stream of it is open (no call in flight, no
//! resumed stream) and nothing has reached it for `http_session_idle_ms`: its idle time
//! counts from the end of its last call, so a call that runs longer than the idle time
//! keeps its result. rmcp's own keep-alive (which counts only messages, so a quiet
//! call of 4 s in a session idle after 2 s lost its stream) is turned off; a reaper
//! task closes idle sessions instead.
//!
//! Every session belongs to the scope and the principal whose token opened it: each
//! scope's MCP service sees the sessions through its own [`ScopedSessions`], to which
//! another scope's sessions, and another principal's, do not exist (404), so a token
//! reaches only the sessions it opened.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};
use tokio_util::sync::CancellationToken;

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    #[error(
        "the server already has its maximum of {0} MCP sessions (`[serve] http_max_sessions`)"
    )]
    Full(usize),
    #[error("the session {0} is closing")]
    Closing(SessionId),
    #[error("no session {0}")]
    Unknown(SessionId),
}

/// What is known of one session's use.
#[derive(Debug)]
struct Activity {
    /// The scope whose token opened it.
    scope: Arc<str>,
    /// The principal whose token opened it: another token of the same scope does not
    /// reach it.
    principal: Option<Arc<str>>,
    /// Response streams open now: calls in flight (and resumed streams).
    streams: usize,
    /// When the last request reached it or its last stream ended.
    last: Instant,
}

/// The sessions' activity, shared by the manager, its streams and the reaper.
#[derive(Debug)]
struct Table {
    sessions: Mutex<HashMap<SessionId, Activity>>,
    /// Sessions being created (counted against the cap; changed under `sessions`' lock).
    creating: AtomicUsize,
    max: usize,
    idle: Duration,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Activity>> {
        // The map stays consistent whatever panicked while holding it.
        self.sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// True when `id` is a session of `scope`, opened by the principal of the request
    /// being served (if this runs within one).
    fn belongs(&self, id: &SessionId, scope: &str) -> bool {
        let asking = super::request_principal();
        self.lock().get(id).is_some_and(|a| {
            &*a.scope == scope
                && match (&a.principal, &asking) {
                    (Some(opened), Some(asking)) => opened == asking,
                    _ => true,
                }
        })
    }

    /// Records a request reaching `id`; false when the session is unknown (closing).
    fn touch(&self, id: &SessionId) -> bool {
        match self.lock().get_mut(id) {
            Some(activity) => {
                activity.last = Instant::now();
                true
            }
            None => false,
        }
    }

    /// A response stream of `id` opened.
    fn open_stream(&self, id: &SessionId) -> bool {
        match self.lock().get_mut(id) {
            Some(activity) => {
                activity.streams += 1;
                activity.last = Instant::now();
                true
            }
            None => false,
        }
    }

    /// A response stream of `id` ended: the idle time counts from now.
    fn close_stream(&self, id: &SessionId) {
        if let Some(activity) = self.lock().get_mut(id) {
            activity.streams = activity.streams.saturating_sub(1);
            activity.last = Instant::now();
        }
    }

    /// Takes the sessions idle for `idle` out of the table (so no new request is let
    /// into them) and returns their ids, to be closed.
    fn take_idle(&self, now: Instant) -> Vec<SessionId> {
        let mut sessions = self.lock();
        let idle: Vec<SessionId> = sessions
            .iter()
            .filter(|(_, a)| a.streams == 0 && now.saturating_duration_since(a.last) >= self.idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &idle {
            sessions.remove(id);
        }
        idle
    }
}

/// rmcp's local session manager with a session cap (over all scopes) and idle sessions
/// closed only when no call is in flight.
#[derive(Debug)]
pub struct Sessions {
    local: LocalSessionManager,
    table: Arc<Table>,
}

impl Sessions {
    /// At most `max` sessions; one idle for `idle` (no call in flight) is closed by
    /// [`Sessions::close_idle`].
    pub fn new(max: usize, idle: Duration) -> Self {
        let mut local = LocalSessionManager::default();
        // Idleness is judged here, where calls in flight are known.
        local.session_config.keep_alive = None;
        Sessions {
            local,
            table: Arc::new(Table {
                sessions: Mutex::new(HashMap::new()),
                creating: AtomicUsize::new(0),
                max: max.max(1),
                idle,
            }),
        }
    }

    /// The most sessions there may be.
    pub fn max(&self) -> usize {
        self.table.max
    }

    /// True when a new session would be refused.
    pub fn is_full(&self) -> bool {
        self.table.lock().len() + self.table.creating.load(Ordering::Relaxed) >= self.table.max
    }

    /// Closes every session idle for the idle time; returns how many.
    pub async fn close_idle(&self) -> usize {
        let idle = self.table.take_idle(Instant::now());
        for id in &idle {
            tracing::info!(session = %id, idle_ms = self.table.idle.as_millis() as u64, "closing an idle HTTP session");
            if let Err(error) = self.local.close_session(id).await {
                tracing::warn!(session = %id, %error, "closing an idle HTTP session failed");
            }
        }
        idle.len()
    }

    /// Closes idle sessions until `shutdown`, checking a few times per idle period.
    pub async fn reap_until(self: Arc<Self>, shutdown: CancellationToken) {
        let tick = (self.table.idle / 4).clamp(Duration::from_millis(20), Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(tick) => {}
            }
            self.close_idle().await;
        }
    }

    /// The sessions as `scope`'s MCP service sees them: its own only.
    pub fn scoped(self: &Arc<Self>, scope: Arc<str>) -> ScopedSessions {
        ScopedSessions {
            sessions: self.clone(),
            scope,
        }
    }

    fn tracked<S>(&self, id: &SessionId, stream: S) -> Tracked<S> {
        Tracked {
            stream: Box::pin(stream),
            _open: OpenStream {
                table: self.table.clone(),
                id: id.clone(),
            },
        }
    }
}

/// One scope's view of the sessions: it opens sessions in its scope and finds no other.
#[derive(Debug, Clone)]
pub struct ScopedSessions {
    sessions: Arc<Sessions>,
    scope: Arc<str>,
}

impl ScopedSessions {
    /// `id` if it is a session of this scope.
    fn own(&self, id: &SessionId) -> Result<(), SessionsError> {
        match self.sessions.table.belongs(id, &self.scope) {
            true => Ok(()),
            false => Err(SessionsError::Unknown(id.clone())),
        }
    }
}

impl SessionManager for ScopedSessions {
    type Error = SessionsError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let Sessions { local, table } = &*self.sessions;
        {
            let sessions = table.lock();
            if sessions.len() + table.creating.load(Ordering::Relaxed) >= table.max {
                tracing::warn!(
                    max = table.max,
                    "HTTP session refused: at http_max_sessions"
                );
                return Err(SessionsError::Full(table.max));
            }
            table.creating.fetch_add(1, Ordering::Relaxed);
        }
        let created = local.create_session().await;
        let mut sessions = table.lock();
        table.creating.fetch_sub(1, Ordering::Relaxed);
        let (id, transport) = created?;
        sessions.insert(
            id.clone(),
            Activity {
                scope: self.scope.clone(),
                principal: super::request_principal(),
                streams: 0,
                last: Instant::now(),
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.own(id)?;
        self.sessions.table.touch(id);
        // The connection answering it books its session by this id.
        message.insert_extension(super::book::SessionIdOf(id.to_string()));
        Ok(self.sessions.local.initialize_session(id, message).await?)
    }

    /// A session handed over at an upgrade, its client back (rmcp found it in this
    /// scope's store): made again with its id, counted like a new one.
    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        let Sessions { local, table } = &*self.sessions;
        {
            let sessions = table.lock();
            if sessions.len() + table.creating.load(Ordering::Relaxed) >= table.max {
                return Err(SessionsError::Full(table.max));
            }
        }
        let outcome = local.restore_session(id.clone()).await?;
        if matches!(outcome, RestoreOutcome::Restored(_)) {
            table.lock().insert(
                id,
                Activity {
                    scope: self.scope.clone(),
                    principal: super::request_principal(),
                    streams: 0,
                    last: Instant::now(),
                },
            );
        }
        Ok(outcome)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        // A session the reaper took is gone for clients (404), even while it closes.
        // Another scope's session is unknown here, like one that never was.
        Ok(self.sessions.table.belongs(id, &self.scope)
            && self.sessions.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let Sessions { local, table } = &*self.sessions;
        {
            let mut sessions = table.lock();
            match sessions.get(id) {
                Some(activity) if activity.scope != self.scope => return Ok(()),
                _ => sessions.remove(id),
            };
        }
        Ok(local.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.own(id)?;
        let Sessions { local, table } = &*self.sessions;
        if !table.open_stream(id) {
            return Err(SessionsError::Closing(id.clone()));
        }
        match local.create_stream(id, message).await {
            Ok(stream) => Ok(self.sessions.tracked(id, stream)),
            Err(error) => {
                table.close_stream(id);
                Err(error.into())
            }
        }
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.own(id)?;
        self.sessions.table.touch(id);
        Ok(self.sessions.local.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // The standalone stream (GET) carries no call: opening it is activity, holding
        // it open is not (a vanished client's GET can stay open until TCP gives up).
        self.own(id)?;
        self.sessions.table.touch(id);
        Ok(self.sessions.local.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        // A resumed stream is a client coming back for a call's result.
        self.own(id)?;
        let Sessions { local, table } = &*self.sessions;
        if !table.open_stream(id) {
            return Err(SessionsError::Closing(id.clone()));
        }
        match local.resume(id, last_event_id).await {
            Ok(stream) => Ok(self.sessions.tracked(id, stream)),
            Err(error) => {
                table.close_stream(id);
                Err(error.into())
            }
        }
    }
}

/// Marks a response stream open until dropped (ended, or its connection gone).
struct OpenStream {
    table: Arc<Table>,
    id: SessionId,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.table.close_stream(&self.id);
    }
}

/// A response stream that counts as its session's activity while it lives.
struct Tracked<S> {
    stream: Pin<Box<S>>,
    _open: OpenStream,
}

impl<S: Stream> Stream for Tracked<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        self.stream.as_mut().poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(idle_ms: u64) -> Table {
        Table {
            sessions: Mutex::new(HashMap::new()),
            creating: AtomicUsize::new(0),
            max: 4,
            idle: Duration::from_millis(idle_ms),
        }
    }

    fn add(table: &Table, id: &str, last: Instant) -> SessionId {
        let id: SessionId = id.into();
        table.lock().insert(
            id.clone(),
            Activity {
                scope: "default".into(),
                principal: None,
                streams: 0,
                last,
            },
        );
        id
    }

    #[test]
    fn a_session_with_a_call_in_flight_is_never_idle() {
        let table = table(1000);
        let long_ago = Instant::now() - Duration::from_secs(60);
        let busy = add(&table, "busy", long_ago);
        assert!(table.open_stream(&busy));
        table.lock().get_mut(&busy).unwrap().last = long_ago;
        assert!(table.take_idle(Instant::now()).is_empty());
        assert!(table.lock().contains_key(&busy));
    }

    #[test]
    fn idle_time_counts_from_the_end_of_the_last_call() {
        let table = table(1000);
        let id = add(&table, "s", Instant::now() - Duration::from_secs(60));
        assert!(table.open_stream(&id));
        table.close_stream(&id);
        let now = Instant::now();
        assert!(
            table.take_idle(now).is_empty(),
            "idle right after its call ended"
        );
        assert_eq!(
            table.take_idle(now + Duration::from_millis(1000)),
            vec![id.clone()]
        );
        assert!(
            !table.lock().contains_key(&id),
            "an idle session leaves the table"
        );
    }

    #[test]
    fn a_closing_session_takes_no_new_stream() {
        let table = table(10);
        let id = add(&table, "gone", Instant::now() - Duration::from_secs(1));
        assert_eq!(table.take_idle(Instant::now()).len(), 1);
        assert!(!table.open_stream(&id));
        assert!(!table.touch(&id));
    }

    #[tokio::test]
    async fn sessions_past_the_cap_are_refused() {
        let sessions = Arc::new(Sessions::new(2, Duration::from_secs(60)));
        let (one, other) = (sessions.scoped("a".into()), sessions.scoped("b".into()));
        let _a = one.create_session().await.unwrap();
        let _b = other.create_session().await.unwrap();
        assert!(sessions.is_full(), "the cap counts every scope's sessions");
        match one.create_session().await {
            Err(SessionsError::Full(2)) => {}
            other => panic!("expected Full(2), got {:?}", other.map(|(id, _)| id)),
        }
    }

    #[tokio::test]
    async fn a_scope_never_reaches_another_scopes_session() {
        let sessions = Arc::new(Sessions::new(4, Duration::from_secs(60)));
        let (trusted, untrusted) = (
            sessions.scoped("trusted".into()),
            sessions.scoped("untrusted".into()),
        );
        let (id, _transport) = trusted.create_session().await.unwrap();
        assert!(trusted.has_session(&id).await.unwrap());
        assert!(
            !untrusted.has_session(&id).await.unwrap(),
            "404 to the other scope"
        );
        let message: ClientJsonRpcMessage = serde_json::from_value(serde_json::json!(
            {"jsonrpc": "2.0", "method": "notifications/initialized"}
        ))
        .unwrap();
        assert!(matches!(
            untrusted.accept_message(&id, message).await,
            Err(SessionsError::Unknown(_))
        ));
        assert!(matches!(
            untrusted.create_standalone_stream(&id).await,
            Err(SessionsError::Unknown(_))
        ));
        untrusted.close_session(&id).await.unwrap();
        assert!(
            trusted.has_session(&id).await.unwrap(),
            "another scope's DELETE does not close it"
        );
        trusted.close_session(&id).await.unwrap();
        assert!(!trusted.has_session(&id).await.unwrap());
    }
}
