//! The egress proxy's connections: one run's listener served ([`serve_run`]), each
//! connection it accepts spoken to as HTTP/1.1 ([`hyper`]'s server) and decided by the
//! run's policies.
//!
//! - `CONNECT host:port`: the name is checked, dsh resolves it (`[egress] hosts` first,
//!   then the system's resolver), every address is checked and the first allowed one is
//!   connected to; the tunnel's first bytes, when they are a TLS ClientHello, must name
//!   the same host (SNI), else the tunnel is closed unread. A host an `[[egress.inject]]`
//!   rule names has its TLS terminated (a certificate from dsh's CA, [`super::tls`]), its
//!   requests forwarded over dsh's own TLS to the upstream with the header added; every
//!   other tunnel is copied both ways, unread.
//! - `GET http://host/…` (absolute form, plain HTTP): decided the same way, forwarded
//!   with the request made origin-form (the host is the URI's, after any `user@`).
//! - Anything else is answered 400.
//!
//! A refusal is answered `403` with the host and the reason in the status line, a header
//! and the body, and kept for the call's result line. Each connection is bounded: the
//! run's count of open connections (`429` past it), an idle and a total timeout, and the
//! run's bytes; when the run ends (its [`RunProxy`] dropped) every connection it has ends.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use dsh_launch::network::{RunEgress, RunLabel};

use super::policy::{EgressPolicy, Refusal};
use super::tls::Authority;
use crate::services::ToolRunner;

type Body = BoxBody<Bytes, hyper::Error>;

/// What every run's proxy shares: the limits, the names dsh resolves itself, the
/// headers it adds, its CA, the host's own addresses, where events go and the counters.
pub struct Shared {
    pub limits: Limits,
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    pub inject: Vec<Injection>,
    pub authority: Option<Arc<Authority>>,
    own: Mutex<(Option<Instant>, Arc<Vec<IpAddr>>)>,
    pub events: OnceLock<Arc<dyn ToolRunner>>,
    pub counters: Counters,
    /// Runs served now.
    pub live: std::sync::atomic::AtomicUsize,
    /// Every run served, for an upgrade's handover (those gone are skipped and pruned).
    runs: Mutex<Vec<std::sync::Weak<RunState>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("limits", &self.limits)
            .field("inject", &self.inject.len())
            .finish_non_exhaustive()
    }
}

/// The proxy's limits (`[egress]`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connections_per_run: usize,
    pub bytes_per_run: u64,
    pub idle: Duration,
    pub total: Option<Duration>,
    pub connect: Duration,
}

/// A header added to the requests to one host.
#[derive(Clone)]
pub struct Injection {
    pub host: String,
    pub port: u16,
    pub name: hyper::header::HeaderName,
    /// None: its variable was not set when dsh started (the host is refused).
    pub value: Option<hyper::header::HeaderValue>,
    /// The variable it comes from (named in a refusal).
    pub variable: String,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value.
        write!(f, "Injection({}:{} {})", self.host, self.port, self.name)
    }
}

/// The proxy's figures since start.
#[derive(Debug, Default)]
pub struct Counters {
    pub allowed: AtomicU64,
    pub refused: AtomicU64,
    pub bytes_up: AtomicU64,
    pub bytes_down: AtomicU64,
}

impl Shared {
    pub fn new(
        limits: Limits,
        hosts: BTreeMap<String, Vec<IpAddr>>,
        inject: Vec<Injection>,
        authority: Option<Arc<Authority>>,
    ) -> Self {
        Shared {
            limits,
            hosts,
            inject,
            authority,
            own: Mutex::new((None, Arc::new(Vec::new()))),
            events: OnceLock::new(),
            counters: Counters::default(),
            live: std::sync::atomic::AtomicUsize::new(0),
            runs: Mutex::new(Vec::new()),
        }
    }

    /// The host's own addresses, read again when two seconds old (interfaces come and go).
    fn own_addresses(&self) -> Arc<Vec<IpAddr>> {
        let mut own = self.own.lock().unwrap_or_else(|e| e.into_inner());
        if own
            .0
            .is_none_or(|read| read.elapsed() > Duration::from_secs(2))
        {
            *own = (
                Some(Instant::now()),
                Arc::new(dsh_launch::os::own_addresses()),
            );
        }
        own.1.clone()
    }

    /// The runs served now, with their listeners, for an upgrade.
    pub fn live_runs(&self) -> Vec<HandedRun> {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.retain(|run| run.strong_count() > 0);
        runs.iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|run| run.leader.load(Ordering::Relaxed) > 0)
            .map(|run| {
                use std::os::fd::AsRawFd;
                HandedRun {
                    fd: run.listener.as_raw_fd(),
                    owner: run.label.owner.to_string(),
                    call: run.label.call.to_string(),
                    tool: run.label.tool.to_string(),
                    scope: run.label.scope.to_string(),
                    leader: run.leader.load(Ordering::Relaxed),
                    refused: run
                        .refused
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone(),
                }
            })
            .collect()
    }

    fn injection(&self, host: &str, port: u16) -> Vec<&Injection> {
        self.inject
            .iter()
            .filter(|rule| rule.port == port && rule.host == host)
            .collect()
    }
}

/// One run's proxy while the run lives (see [`RunEgress`]).
#[derive(Debug)]
pub struct RunProxy {
    state: Arc<RunState>,
    cancel: CancellationToken,
}

impl Drop for RunProxy {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.state.shared.live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RunEgress for RunProxy {
    fn refused(&self) -> Vec<String> {
        self.state
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn started(&self, leader: i32) {
        self.state.leader.store(leader, Ordering::Relaxed);
    }
}

/// A run's proxy as an upgrade hands it to the next binary: its listener (kept open
/// across the `exec`), who the run is, its leader (whose end ends the proxy) and what
/// was refused so far.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct HandedRun {
    pub fd: i32,
    pub owner: String,
    pub call: String,
    pub tool: String,
    pub scope: String,
    pub leader: i32,
    pub refused: Vec<String>,
}

/// What one run's connections share.
#[derive(Debug)]
struct RunState {
    label: RunLabel,
    policies: Vec<Arc<EgressPolicy>>,
    shared: Arc<Shared>,
    refused: Mutex<Vec<String>>,
    slots: Arc<tokio::sync::Semaphore>,
    bytes: AtomicU64,
    /// The run's first process (0 until it started).
    leader: std::sync::atomic::AtomicI32,
    /// A descriptor of the listener of its own, handed over at an upgrade.
    listener: std::os::fd::OwnedFd,
}

/// Most refusals one run keeps for its result line.
const REFUSALS_KEPT: usize = 32;

impl RunState {
    fn refuse(&self, refusal: &Refusal, port: u16) {
        let summary = refusal.summary(port);
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if refused.len() < REFUSALS_KEPT && !refused.contains(&summary) {
            refused.push(summary);
        }
    }

    fn event(&self, fields: serde_json::Value) {
        if let Some(sink) = self.shared.events.get() {
            sink.event("egress/connection", fields);
        }
    }

    /// Decides `host:port` by name and resolves it; the allowed addresses, in order.
    async fn decide(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let mut rules = Vec::with_capacity(self.policies.len());
        for policy in &self.policies {
            rules.push(policy.check_name(&host, port)?.clone());
        }
        if let Some(unset) = self
            .shared
            .injection(&host, port)
            .into_iter()
            .find(|injection| injection.value.is_none())
        {
            return Err(Refusal::NoValue {
                host,
                variable: unset.variable.clone(),
            });
        }
        let literal = host.trim_matches(['[', ']']).parse::<IpAddr>().ok();
        let addresses: Vec<IpAddr> = match (literal, self.shared.hosts.get(&host)) {
            (Some(address), _) => vec![address],
            (None, Some(listed)) => listed.clone(),
            (None, None) => {
                let found = tokio::net::lookup_host((host.as_str(), port)).await;
                match found {
                    Ok(found) => found.map(|a| a.ip()).collect(),
                    Err(error) => {
                        return Err(Refusal::Unresolved {
                            host: host.clone(),
                            why: error.to_string(),
                        })
                    }
                }
            }
        };
        let own = self.shared.own_addresses();
        let mut first_refusal = None;
        let mut allowed = Vec::new();
        for address in addresses {
            let checked = self
                .policies
                .iter()
                .zip(&rules)
                .try_for_each(|(policy, rule)| {
                    policy.check_address_among(&host, rule, address, &own)
                });
            match checked {
                Ok(()) => allowed.push(SocketAddr::new(address, port)),
                Err(refusal) => {
                    first_refusal.get_or_insert(refusal);
                }
            }
        }
        match (allowed.is_empty(), first_refusal) {
            (false, _) => Ok(allowed),
            (true, Some(refusal)) => Err(refusal),
            (true, None) => Err(Refusal::Unresolved {
                host,
                why: "no address".into(),
            }),
        }
    }
}

/// Serves `listener` (made in the run's namespace) for the run `label` under `policies`
/// on the current Tokio runtime, until the returned [`RunProxy`] is dropped.
pub fn serve_run(
    shared: Arc<Shared>,
    policies: Vec<Arc<EgressPolicy>>,
    listener: std::net::TcpListener,
    label: &RunLabel,
    refused: Vec<String>,
) -> Result<RunProxy, String> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        "the egress proxy runs on dsh's async runtime, and none is here".to_string()
    })?;
    let _entered = runtime.enter();
    let kept = dsh_launch::network::duplicate(&listener).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
    let state = Arc::new(RunState {
        label: label.clone(),
        policies,
        slots: Arc::new(tokio::sync::Semaphore::new(
            shared.limits.connections_per_run,
        )),
        shared,
        refused: Mutex::new(refused),
        bytes: AtomicU64::new(0),
        leader: std::sync::atomic::AtomicI32::new(0),
        listener: kept,
    });
    state
        .shared
        .runs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(&state));
    let cancel = CancellationToken::new();
    state.shared.live.fetch_add(1, Ordering::Relaxed);
    runtime.spawn(accept_loop(listener, state.clone(), cancel.clone()));
    Ok(RunProxy { state, cancel })
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    state: Arc<RunState>,
    cancel: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                tracing::debug!(%error, "the egress proxy could not accept a connection");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let cancel = cancel.child_token();
        match state.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                let state = state.clone();
                tokio::spawn(async move {
                    let connection = Connection::new(state, permit, cancel);
                    connection.serve(stream).await;
                });
            }
            Err(_) => {
                tokio::spawn(too_many(stream, state.shared.limits.connections_per_run));
            }
        }
    }
}

/// Answers a connection past the run's limit `429` and closes it.
async fn too_many(mut stream: TcpStream, limit: usize) {
    let body = format!("dsh egress proxy: this run has {limit} connections open, its limit ([egress] max_connections_per_run)\n");
    let answer = format!(
        "HTTP/1.1 429 Too Many Connections\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(answer.as_bytes())).await;
}

/// One accepted connection: its meter, its place among the run's connections, and its
/// end (the run's, or its own limits').
#[derive(Clone)]
struct Connection {
    state: Arc<RunState>,
    meter: Arc<Meter>,
    _permit: Arc<tokio::sync::OwnedSemaphorePermit>,
    cancel: CancellationToken,
}

impl Connection {
    fn new(
        state: Arc<RunState>,
        permit: tokio::sync::OwnedSemaphorePermit,
        cancel: CancellationToken,
    ) -> Self {
        Connection {
            meter: Arc::new(Meter::new()),
            state,
            _permit: Arc::new(permit),
            cancel,
        }
    }

    /// Runs `work` until it ends, the run ends, or a limit ends the connection.
    async fn bounded(&self, work: impl std::future::Future<Output = ()>) {
        tokio::select! {
            () = work => {}
            () = self.cancel.cancelled() => {}
            why = self.watch() => {
                tracing::debug!(owner = %self.state.label.owner, why, "an egress connection was ended");
            }
        }
    }

    /// Resolves when a limit of this connection or its run is passed.
    async fn watch(&self) -> &'static str {
        let limits = self.state.shared.limits;
        let tick = (limits.idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            if self.meter.idle_for() > limits.idle {
                return "idle past [egress] idle_timeout_ms";
            }
            if limits
                .total
                .is_some_and(|total| self.meter.started.elapsed() > total)
            {
                return "open past [egress] total_timeout_ms";
            }
            if limits.bytes_per_run > 0
                && self.state.bytes.load(Ordering::Relaxed) > limits.bytes_per_run
            {
                return "the run moved more than [egress] max_bytes_per_run";
            }
        }
    }

    async fn serve(self, stream: TcpStream) {
        let io = Metered {
            inner: stream,
            meter: self.meter.clone(),
            run: self.state.clone(),
        };
        let handler = self.clone();
        let service = hyper::service::service_fn(move |request| {
            let handler = handler.clone();
            async move { Ok::<_, Infallible>(handler.handle(request).await) }
        });
        let served = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(self.state.shared.limits.idle)
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        self.bounded(async {
            let _ = served.await;
        })
        .await;
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        if request.method() == Method::CONNECT {
            return self.connect(request).await;
        }
        match request.uri().scheme_str() {
            Some("http") => self.forward(request).await,
            Some(other) => answer(
                StatusCode::BAD_REQUEST,
                None,
                format!("dsh egress proxy: a `{other}` URL goes through CONNECT, not as a request to the proxy\n"),
            ),
            None => answer(
                StatusCode::BAD_REQUEST,
                None,
                "dsh egress proxy: ask for `http://host/…` or `CONNECT host:port` (this is a proxy, not a server)\n".into(),
            ),
        }
    }

    /// A refusal answered and kept; the event written.
    fn refused(&self, refusal: Refusal, port: u16, how: &str) -> Response<Body> {
        self.note_refusal(&refusal, port, how);
        let summary = refusal.summary(port);
        answer(
            StatusCode::FORBIDDEN,
            Some(&summary),
            format!("dsh egress proxy refused {summary}: {refusal}\n"),
        )
    }

    /// A refusal kept for the result line, counted and written as an event.
    fn note_refusal(&self, refusal: &Refusal, port: u16, how: &str) {
        self.state.refuse(refusal, port);
        let host = refusal.host().unwrap_or_default();
        self.state
            .shared
            .counters
            .refused
            .fetch_add(1, Ordering::Relaxed);
        self.state.event(serde_json::json!({
            "owner": &*self.state.label.owner,
            "call": &*self.state.label.call,
            "tool": &*self.state.label.tool,
            "host": host,
            "port": port,
            "via": how,
            "decision": "refused",
            "reason": refusal.to_string(),
        }));
    }

    /// The connection's end, as an event and counters.
    fn ended(&self, host: &str, port: u16, address: SocketAddr, how: &str) {
        let (up, down) = self.meter.moved();
        let counters = &self.state.shared.counters;
        counters.bytes_up.fetch_add(up, Ordering::Relaxed);
        counters.bytes_down.fetch_add(down, Ordering::Relaxed);
        self.state.event(serde_json::json!({
            "owner": &*self.state.label.owner,
            "call": &*self.state.label.call,
            "tool": &*self.state.label.tool,
            "host": host,
            "port": port,
            "address": address.ip().to_string(),
            "via": how,
            "decision": "allowed",
            "bytes_up": up,
            "bytes_down": down,
        }));
    }

    fn allowed(&self) {
        self.state
            .shared
            .counters
            .allowed
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Connects to the first of `addresses` that answers within the connect timeout.
    async fn dial(&self, addresses: &[SocketAddr]) -> Result<(TcpStream, SocketAddr), String> {
        let mut last = String::from("no address");
        for address in addresses {
            match tokio::time::timeout(
                self.state.shared.limits.connect,
                TcpStream::connect(address),
            )
            .await
            {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok((stream, *address));
                }
                Ok(Err(error)) => last = format!("{address}: {error}"),
                Err(_) => last = format!("{address}: no answer within [egress] connect_timeout_ms"),
            }
        }
        Err(last)
    }

    /// Decides `authority` (its port, else `default_port`) and connects to it: the host,
    /// port, upstream and address, or the answer the run gets (a refusal, a 502).
    async fn open(
        &self,
        authority: &hyper::http::uri::Authority,
        default_port: u16,
        via: &str,
    ) -> Result<(String, u16, TcpStream, SocketAddr), Response<Body>> {
        let host = authority.host().trim_end_matches('.').to_ascii_lowercase();
        let port = authority.port_u16().unwrap_or(default_port);
        let addresses = match self.state.decide(&host, port).await {
            Ok(addresses) => addresses,
            Err(refusal) => return Err(self.refused(refusal, port, via)),
        };
        match self.dial(&addresses).await {
            Ok((upstream, address)) => {
                self.allowed();
                Ok((host, port, upstream, address))
            }
            Err(why) => Err(answer(
                StatusCode::BAD_GATEWAY,
                None,
                format!("dsh egress proxy: cannot reach {host}:{port}: {why}\n"),
            )),
        }
    }

    async fn connect(&self, request: Request<Incoming>) -> Response<Body> {
        let Some(authority) = request.uri().authority().cloned() else {
            return answer(
                StatusCode::BAD_REQUEST,
                None,
                "dsh egress proxy: CONNECT needs host:port\n".into(),
            );
        };
        let (host, port, upstream, address) = match self.open(&authority, 443, "connect").await {
            Ok(opened) => opened,
            Err(answer) => return answer,
        };
        let connection = self.clone();
        tokio::spawn(async move {
            let this = connection.clone();
            connection
                .bounded(async move {
                    let Ok(upgraded) = hyper::upgrade::on(request).await else {
                        return;
                    };
                    let how = this
                        .tunnel(TokioIo::new(upgraded), upstream, &host, port)
                        .await;
                    this.ended(&host, port, address, how);
                })
                .await;
        });
        Response::new(empty())
    }

    /// The tunnel of an allowed CONNECT: the ClientHello's name checked, then copied
    /// both ways or (a host with headers to add) its TLS terminated. Says which.
    async fn tunnel(
        &self,
        mut client: TokioIo<hyper::upgrade::Upgraded>,
        upstream: TcpStream,
        host: &str,
        port: u16,
    ) -> &'static str {
        let first = match read_client_hello(&mut client).await {
            Ok(first) => first,
            Err(_) => return "tunnel",
        };
        if let Some(name) = first.server_name.as_deref() {
            if !name.eq_ignore_ascii_case(host) {
                let refusal = Refusal::OtherName {
                    host: host.to_string(),
                    sni: name.to_string(),
                };
                self.note_refusal(&refusal, port, "connect");
                return "refused";
            }
        }
        let injections: Vec<Injection> = self
            .state
            .shared
            .injection(host, port)
            .into_iter()
            .cloned()
            .collect();
        let client = Rewind {
            prefix: Some(first.bytes),
            inner: client,
        };
        match (
            &self.state.shared.authority,
            injections.is_empty(),
            first.is_tls,
        ) {
            (Some(authority), false, true) => {
                self.terminate(client, upstream, host, authority.clone(), injections)
                    .await;
                "terminated"
            }
            _ => {
                let mut client = client;
                let mut upstream = upstream;
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut client,
                    &mut upstream,
                    TUNNEL_BUFFER,
                    TUNNEL_BUFFER,
                )
                .await;
                "tunnel"
            }
        }
    }

    /// Terminates the run's TLS for `host` with a certificate from dsh's CA and forwards
    /// each request over dsh's own TLS to the upstream, with `injections` added.
    async fn terminate(
        &self,
        client: Rewind<TokioIo<hyper::upgrade::Upgraded>>,
        upstream: TcpStream,
        host: &str,
        authority: Arc<Authority>,
        injections: Vec<Injection>,
    ) {
        let server = match authority.server_for(host) {
            Ok(server) => server,
            Err(error) => {
                tracing::warn!(%error, host, "cannot mint the egress proxy's certificate");
                return;
            }
        };
        let Ok(client) = tokio_rustls::TlsAcceptor::from(server).accept(client).await else {
            return;
        };
        let Ok(name) = rustls::pki_types::ServerName::try_from(host.to_string()) else {
            return;
        };
        let upstream = match tokio_rustls::TlsConnector::from(authority.client())
            .connect(name, upstream)
            .await
        {
            Ok(upstream) => upstream,
            Err(error) => {
                tracing::info!(%error, host, "the upstream's TLS failed (its certificate is not trusted?)");
                let mut client = client;
                let body = format!("dsh egress proxy: the TLS of {host} failed: {error}\n");
                let answer = format!(
                    "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = client.write_all(answer.as_bytes()).await;
                let _ = client.shutdown().await;
                return;
            }
        };
        let Ok((sender, upstream_connection)) =
            hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await
        else {
            return;
        };
        let driving = tokio::spawn(upstream_connection);
        let sender = Arc::new(tokio::sync::Mutex::new(sender));
        let host = host.to_string();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            let sender = sender.clone();
            let injections = injections.clone();
            let host = host.clone();
            async move {
                for injection in &injections {
                    request.headers_mut().remove(&injection.name);
                    if let Some(value) = &injection.value {
                        request
                            .headers_mut()
                            .insert(injection.name.clone(), value.clone());
                    }
                }
                if !request.headers().contains_key(hyper::header::HOST) {
                    if let Ok(value) = hyper::header::HeaderValue::from_str(&host) {
                        request.headers_mut().insert(hyper::header::HOST, value);
                    }
                }
                let mut sender = sender.lock().await;
                let response = match sender.send_request(request).await {
                    Ok(response) => response.map(|body| body.boxed()),
                    Err(error) => answer(
                        StatusCode::BAD_GATEWAY,
                        None,
                        format!("dsh egress proxy: {host} did not answer: {error}\n"),
                    ),
                };
                Ok::<_, Infallible>(response)
            }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(client), service)
            .await;
        driving.abort();
    }

    /// A plain-HTTP request in absolute form, forwarded.
    async fn forward(&self, mut request: Request<Incoming>) -> Response<Body> {
        let Some(authority) = request.uri().authority().cloned() else {
            return answer(
                StatusCode::BAD_REQUEST,
                None,
                "dsh egress proxy: the URL names no host\n".into(),
            );
        };
        let (host, port, upstream, address) = match self.open(&authority, 80, "http").await {
            Ok(opened) => opened,
            Err(answer) => return answer,
        };
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        *request.uri_mut() = match path.parse() {
            Ok(uri) => uri,
            Err(_) => return answer(StatusCode::BAD_REQUEST, None, "bad path\n".into()),
        };
        let shown_host = match authority.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.clone(),
        };
        let headers = request.headers_mut();
        headers.remove("proxy-authorization");
        headers.remove("proxy-connection");
        if let Ok(value) = hyper::header::HeaderValue::from_str(&shown_host) {
            headers.insert(hyper::header::HOST, value);
        }
        let Ok((mut sender, upstream_connection)) =
            hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await
        else {
            return answer(
                StatusCode::BAD_GATEWAY,
                None,
                format!("dsh egress proxy: {host} did not speak HTTP\n"),
            );
        };
        let connection = self.clone();
        tokio::spawn(async move {
            let _ = upstream_connection.await;
            connection.ended(&host, port, address, "http");
        });
        match sender.send_request(request).await {
            Ok(response) => response.map(|body| body.boxed()),
            Err(error) => answer(
                StatusCode::BAD_GATEWAY,
                None,
                format!("dsh egress proxy: the upstream did not answer: {error}\n"),
            ),
        }
    }
}

/// A response of the proxy's own; `refused`: the refusal's summary, also put in the
/// status line and a header.
fn answer(status: StatusCode, refused: Option<&str>, body: String) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(summary) = refused {
        if let Ok(value) = hyper::header::HeaderValue::from_str(summary) {
            headers.insert("x-dsh-egress-refused", value);
        }
        if let Ok(reason) =
            hyper::ext::ReasonPhrase::try_from(format!("Forbidden: refused {summary}").into_bytes())
        {
            response.extensions_mut().insert(reason);
        }
    }
    response
}

fn empty() -> Body {
    Full::new(Bytes::new())
        .map_err(|never| match never {})
        .boxed()
}

/// The first bytes of a tunnel: a whole TLS record when it is one, with the name its
/// ClientHello gives.
struct FirstBytes {
    bytes: Bytes,
    is_tls: bool,
    server_name: Option<String>,
}

/// The buffer each direction of a tunnel copies through: tokio's default, 8 KiB, held a
/// tunnel to a seventh of a direct download's throughput here (a read and a write per 8
/// KiB); 256 KiB reached 0.56-0.67 of it (`cargo bench --bench egress`), at 512 KiB of
/// memory per open tunnel (at most `max_connections_per_run` of them per run).
const TUNNEL_BUFFER: usize = 256 * 1024;

/// Most bytes of a ClientHello read before the tunnel is decided.
const HELLO_MAX: usize = 16 * 1024 + 5;

/// Reads what the client sends first: a TLS handshake record whole (its name parsed), or
/// whatever the first read gives.
async fn read_client_hello(client: &mut (impl AsyncRead + Unpin)) -> std::io::Result<FirstBytes> {
    let mut buffer = vec![0u8; 4096];
    let n = client.read(&mut buffer).await?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    buffer.truncate(n);
    if buffer[0] != 0x16 {
        return Ok(FirstBytes {
            bytes: Bytes::from(buffer),
            is_tls: false,
            server_name: None,
        });
    }
    while buffer.len() < 5 {
        let mut more = [0u8; 5];
        let got = client.read(&mut more[..5 - buffer.len()]).await?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&more[..got]);
    }
    let record = 5 + u16::from_be_bytes([buffer[3], buffer[4]]) as usize;
    if record > HELLO_MAX {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    while buffer.len() < record {
        let mut more = vec![0u8; record - buffer.len()];
        let got = client.read(&mut more).await?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&more[..got]);
    }
    let server_name = server_name(&buffer[5..record.min(buffer.len())]);
    Ok(FirstBytes {
        bytes: Bytes::from(buffer),
        is_tls: true,
        server_name,
    })
}

/// The `server_name` a ClientHello handshake message carries (the first host name).
pub fn server_name(handshake: &[u8]) -> Option<String> {
    let mut at = Reader(handshake);
    if at.u8()? != 1 {
        return None; // not a ClientHello
    }
    let length = at.u24()?;
    let mut hello = Reader(at.take(length)?);
    hello.take(2 + 32)?; // version, random
    let session = hello.u8()? as usize;
    hello.take(session)?;
    let suites = hello.u16()? as usize;
    hello.take(suites)?;
    let compressions = hello.u8()? as usize;
    hello.take(compressions)?;
    let extensions = hello.u16()? as usize;
    let mut extensions = Reader(hello.take(extensions)?);
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let length = extensions.u16()? as usize;
        let mut body = Reader(extensions.take(length)?);
        if kind != 0 {
            continue;
        }
        let list = body.u16()? as usize;
        let mut names = Reader(body.take(list)?);
        while !names.0.is_empty() {
            let name_type = names.u8()?;
            let length = names.u16()? as usize;
            let name = names.take(length)?;
            if name_type == 0 {
                return std::str::from_utf8(name).ok().map(str::to_string);
            }
        }
    }
    None
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3)
            .map(|b| (b[0] as usize) << 16 | (b[1] as usize) << 8 | b[2] as usize)
    }
}

/// A stream with bytes already read from it put back in front.
struct Rewind<S> {
    prefix: Option<Bytes>,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut prefix) = self.prefix.take() {
            let n = prefix.len().min(buf.remaining());
            buf.put_slice(&prefix.split_to(n));
            if !prefix.is_empty() {
                self.prefix = Some(prefix);
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a connection moved and when it last moved anything.
#[derive(Debug)]
struct Meter {
    started: Instant,
    up: AtomicU64,
    down: AtomicU64,
    /// Milliseconds after `started` of the last byte either way.
    last: AtomicU64,
}

impl Meter {
    fn new() -> Self {
        Meter {
            started: Instant::now(),
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            last: AtomicU64::new(0),
        }
    }
    fn moved(&self) -> (u64, u64) {
        (
            self.up.load(Ordering::Relaxed),
            self.down.load(Ordering::Relaxed),
        )
    }
    fn touch(&self) {
        self.last
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }
}

/// The run's side of a connection, counted: reads are what the run sends (up), writes
/// what it receives (down).
struct Metered {
    inner: TcpStream,
    meter: Arc<Meter>,
    run: Arc<RunState>,
}

impl AsyncRead for Metered {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            self.meter.up.fetch_add(n, Ordering::Relaxed);
            self.run.bytes.fetch_add(n, Ordering::Relaxed);
            self.meter.touch();
        }
        polled
    }
}

impl AsyncWrite for Metered {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            if n > 0 {
                self.meter.down.fetch_add(n as u64, Ordering::Relaxed);
                self.run.bytes.fetch_add(n as u64, Ordering::Relaxed);
                self.meter.touch();
            }
        }
        polled
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as curl sends it (made by rustls here), for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            #[allow(deprecated)]
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let mut connection = rustls::ClientConnection::new(
            Arc::new(config),
            rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
        )
        .unwrap();
        let mut bytes = Vec::new();
        connection.write_tls(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn the_name_of_a_client_hello_is_read_and_garbage_gives_none() {
        let hello = client_hello("pypi.org");
        assert_eq!(server_name(&hello[5..]).as_deref(), Some("pypi.org"));
        assert_eq!(server_name(b"").as_deref(), None);
        assert_eq!(server_name(&hello[5..40]).as_deref(), None);
        let mut wrong = hello[5..].to_vec();
        wrong[0] = 2;
        assert_eq!(server_name(&wrong).as_deref(), None);
    }
}
