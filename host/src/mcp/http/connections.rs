//! The HTTP server's TCP connections: accepting them, at most `[serve]
//! http_max_connections` at once, each served by hyper's HTTP/1 with a deadline for
//! request heads (`http_header_timeout_ms`).
//!
//! A connection that has not yet sent a complete request head is the cheapest to lose:
//! when the cap is reached, the oldest such connection is closed to make room for the
//! new one. Only when every open connection has sent a request is a new one refused,
//! with `503` naming the limit. When the process runs out of descriptors, the oldest
//! headerless connection is closed too, so a valid client is still answered while
//! others hold connections open without a word.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How connections are bounded.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once.
    pub max: usize,
    /// A request head (the first, or the next on a kept-alive connection) must arrive
    /// within this long, or the connection is closed.
    pub header_timeout: Duration,
}

/// Refusals being written at once; past this, an excess connection is just closed.
const MAX_REFUSING: usize = 64;

/// One open connection.
#[derive(Debug)]
struct Open {
    /// Set when its first request head is complete.
    requested: Arc<AtomicBool>,
    /// Cancelled to close it.
    close: CancellationToken,
}

/// The open connections, oldest first.
#[derive(Debug, Default)]
struct Table {
    open: Mutex<BTreeMap<u64, Open>>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Open>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Closes the oldest connection that has sent no request; false if there is none.
    fn evict_oldest_silent(open: &mut BTreeMap<u64, Open>) -> bool {
        let silent = open
            .iter()
            .find(|(_, c)| !c.requested.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        match silent.and_then(|id| open.remove(&id)) {
            Some(connection) => {
                connection.close.cancel();
                true
            }
            None => false,
        }
    }

    /// Admits connection `id` if there is room (making room by closing the oldest
    /// silent connection when needed); None when every slot is busy with requests.
    fn admit(&self, id: u64, max: usize) -> Option<(Arc<AtomicBool>, CancellationToken)> {
        let mut open = self.lock();
        if open.len() >= max && !Self::evict_oldest_silent(&mut open) {
            return None;
        }
        let requested = Arc::new(AtomicBool::new(false));
        let close = CancellationToken::new();
        open.insert(
            id,
            Open {
                requested: requested.clone(),
                close: close.clone(),
            },
        );
        Some((requested, close))
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }
}

/// How [`serve`] stopped.
pub enum Served {
    /// At `shutdown`: the listener is closed and every connection has ended.
    Shutdown,
    /// At `stop` (an upgrade): no connection is accepted any more, but the listener is
    /// open (new connections wait in its queue); the open connections finish the
    /// requests they are serving and close.
    Stopped {
        listener: TcpListener,
        connections: JoinSet<()>,
    },
}

/// Accepts connections on `listener` and serves `router` on each until `shutdown`;
/// then lets open connections finish their requests (bounded by the caller). At `stop`,
/// gives the listener back instead (see [`Served::Stopped`]).
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    stop: CancellationToken,
) -> Served {
    // Connections end gracefully at either.
    let graceful = shutdown.child_token();
    let table = Arc::new(Table::default());
    let refusing = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    let mut next_id: u64 = 0;
    let mut exhausted_warned = false;
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = stop.cancelled() => {
                graceful.cancel();
                return Served::Stopped { listener, connections: tasks };
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(error) if out_of_descriptors(&error) => {
                // Free a descriptor held by a connection that has said nothing, and
                // try again shortly (a listener in this state stays readable).
                let evicted = Table::evict_oldest_silent(&mut table.lock());
                if !exhausted_warned {
                    tracing::warn!(%error, evicted, "out of file descriptors accepting HTTP connections");
                    exhausted_warned = true;
                }
                tokio::time::sleep(Duration::from_millis(if evicted { 5 } else { 100 })).await;
                continue;
            }
            Err(error) => {
                tracing::debug!(%error, "accepting an HTTP connection failed");
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        exhausted_warned = false;
        let _ = stream.set_nodelay(true);
        next_id += 1;
        let id = next_id;
        match table.admit(id, limits.max) {
            Some((requested, close)) => {
                let (table, router, graceful) = (table.clone(), router.clone(), graceful.clone());
                tasks.spawn(async move {
                    serve_connection(stream, router, requested, close, graceful, limits).await;
                    table.remove(id);
                });
            }
            None => {
                if refusing.fetch_add(1, Ordering::Relaxed) < MAX_REFUSING {
                    let refusing = refusing.clone();
                    tasks.spawn(async move {
                        refuse(stream, limits.max).await;
                        refusing.fetch_sub(1, Ordering::Relaxed);
                    });
                } else {
                    refusing.fetch_sub(1, Ordering::Relaxed);
                    drop(stream);
                }
            }
        }
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
    Served::Shutdown
}

/// Serves one connection until it ends, is closed to make room, or (after
/// `shutdown`) its requests in progress are done.
async fn serve_connection(
    stream: TcpStream,
    router: axum::Router,
    requested: Arc<AtomicBool>,
    close: CancellationToken,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
) {
    let service = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |request| {
        requested.store(true, Ordering::Relaxed);
        service.call(request)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => {
            if let Err(error) = served {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
            return;
        }
        _ = close.cancelled() => {
            tracing::debug!("closed a connection that sent no request, to make room");
            return;
        }
        _ = shutdown.cancelled() => {}
    }
    connection.as_mut().graceful_shutdown();
    tokio::select! {
        _ = connection => {}
        _ = close.cancelled() => {}
    }
}

/// Answers a connection there is no room for with 503, then closes it.
async fn refuse(mut stream: TcpStream, max: usize) {
    let body = format!(
        "503 Service Unavailable: the server has its maximum of {max} HTTP connections open \
         (`[serve] http_max_connections`); retry later\n"
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let answered = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent, so closing does not reset the connection before
        // it has read the answer.
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 64 * 1024 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        std::io::Result::Ok(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), answered).await;
    tracing::debug!(max, "refused an HTTP connection: at http_max_connections");
}

/// True for the errors that mean this process (or the system) has no descriptor left.
fn out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(dsh_launch::os::EMFILE) | Some(dsh_launch::os::ENFILE)
    )
}

/// The connection cap in effect: the configured one, but never more than half the
/// descriptors this process may open (the rest are for processes, terminals, files).
pub fn effective_max_connections(configured: usize) -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let allowed = match limit.current {
        Some(current) => usize::try_from(current / 2).unwrap_or(usize::MAX),
        None => usize::MAX,
    };
    configured.min(allowed).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_silent_connection_makes_room() {
        let table = Table::default();
        let (first, first_close) = table.admit(1, 2).unwrap();
        let (_second, second_close) = table.admit(2, 2).unwrap();
        first.store(true, Ordering::Relaxed); // 1 sent a request; 2 has said nothing
        assert!(table.admit(3, 2).is_some());
        assert!(
            second_close.is_cancelled(),
            "the silent connection was not closed"
        );
        assert!(!first_close.is_cancelled());
        assert_eq!(table.lock().keys().copied().collect::<Vec<_>>(), vec![1, 3]);
    }

    #[test]
    fn at_the_cap_with_every_connection_busy_a_new_one_is_refused() {
        let table = Table::default();
        for id in 1..=2 {
            table.admit(id, 2).unwrap().0.store(true, Ordering::Relaxed);
        }
        assert!(table.admit(3, 2).is_none());
        table.remove(1);
        assert!(table.admit(4, 2).is_some());
    }

    #[test]
    fn the_cap_never_exceeds_half_the_descriptor_limit() {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let max = effective_max_connections(usize::MAX);
        if let Some(current) = limit.current {
            assert_eq!(max as u64, (current / 2).max(1));
        }
        assert_eq!(effective_max_connections(3), 3.min(max));
    }
}
