//! What dsh's egress proxy costs a run's connections, against the same work done straight
//! to the upstream in the same run (samples alternate between the two, so machine noise
//! hits both alike):
//!
//! 1. Throughput: a 100 MB download from a local plain-TCP upstream through a `CONNECT`
//!    tunnel, against the same download direct; median of 5 each, in MB/s, and the ratio
//!    tunnelled/direct (target at least 0.8).
//! 2. Connection set-up, tunnelled: connect to the proxy, `CONNECT`, its `200`, then one
//!    small request/response through the tunnel, against connect + the same round trip
//!    direct; p50 of 200 each, and the difference (target at most 1 ms).
//! 3. Connection set-up, TLS terminated: the same with HTTPS to a TLS upstream for which
//!    an `[[egress.inject]]` rule has the proxy terminate TLS (its certificate minted from
//!    dsh's CA, the upstream's verified against a test CA given as `upstream_ca`), against
//!    TLS straight to the upstream; p50 of 200 each, and the difference.
//!
//! Each set-up part also prints the p50 of each phase of a connection, which says where
//! the added time goes. Part 1 also times two bare `CONNECT` relays (tokio's
//! `copy_bidirectional` with 8 KiB buffers, the size the proxy's tunnel copies with, and
//! with 256 KiB), which tell the proxy's own costs from a relay's; part 3 also times one
//! TLS handshake's CPU (both ends, in memory) with the client's key exchange as the
//! bench's clients offer it and as dsh's client to upstreams does.
//!
//! The proxy is dsh's own (`EgressService`, one run's policy serving a listener), on a
//! Tokio runtime of its own as in dsh; its listener is on the host's loopback rather than
//! in a run's network namespace. The upstreams run on another runtime, the clients on
//! the main thread. The TLS clients are as a run's tools are (curl, pip): a new client
//! each connection (no session resumed), offering X25519 first. The upstream's test
//! certificates are made with the `openssl` command.
//!
//! Run with `cargo bench --bench egress`.

mod support;

use support::{ms, percentile};

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use dsh::services::egress::config::InjectRule;
use dsh::services::egress::{EgressConfig, EgressService};
use dsh_launch::network::{Egress, RunLabel};

/// The download's size (decimal megabytes: the rates are in MB/s).
const DOWNLOAD_BYTES: u64 = 100_000_000;
const DOWNLOAD_ROUNDS: usize = 5;
/// Target of the throughput ratio, tunnelled/direct.
const THROUGHPUT_TARGET: f64 = 0.8;
/// Connections timed on each path, for the set-up parts.
const SETUP_SAMPLES: usize = 200;
/// Connections made on each path before a set-up part is timed (the first TLS one through
/// the proxy mints its certificate).
const WARM_UP: usize = 10;
/// Target of the set-up added by a tunnel.
const TUNNEL_SETUP_TARGET: Duration = Duration::from_millis(1);
/// In-memory TLS handshakes timed for each client configuration.
const HANDSHAKE_SAMPLES: usize = 50;
/// The body of the small answer: a request/response round trip's worth.
const SMALL_BODY: u64 = 64;
/// The name the TLS upstream's certificate is for (the only name besides an address
/// literal whose loopback address an `allow` entry may reach).
const TLS_HOST: &str = "localhost";
/// The header the proxy adds to requests to the TLS upstream, and where its value comes
/// from (dsh's environment).
const INJECTED_HEADER: &str = "x-bench-auth";
const INJECTED_VARIABLE: &str = "DSH_EGRESS_BENCH_AUTH";
const INJECTED_VALUE: &str = "Bearer egress-bench";
/// The upstream's answer header saying whether the request carried the injected value.
const INJECTED_ANSWER: &str = "x-injected";
/// How much the upstream writes at once and the clients read at once.
const CHUNK: usize = 256 * 1024;
/// The buffers of the bare reference relays, each way: tokio's `copy_bidirectional`'s
/// (which the proxy's tunnel copies with), and as large as the upstream's writes.
const SMALL_RELAY_BUFFER: usize = 8 * 1024;
const LARGE_RELAY_BUFFER: usize = CHUNK;

/// What the upstream sends as bodies.
static BODY_BYTES: [u8; CHUNK] = [b'x'; CHUNK];

fn main() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let certificates = UpstreamCertificates::make(&scratch.path().join("upstream-tls"));
    // Read by `EgressService::new`, as dsh reads its own environment at start; set before
    // any other thread exists.
    std::env::set_var(INJECTED_VARIABLE, INJECTED_VALUE);

    let upstream_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("upstream")
        .enable_all()
        .build()
        .expect("the upstreams' runtime");
    let dsh_runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("dsh")
        .enable_all()
        .build()
        .expect("dsh's runtime");
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the clients' runtime");

    let upstream_server = certificates.server_acceptor();
    let plain_upstream = upstream_runtime.block_on(serve_plain_upstream());
    let tls_upstream = upstream_runtime.block_on(serve_tls_upstream(upstream_server.clone()));

    let state_dir = scratch.path().join("state");
    let service = EgressService::new(
        &egress_config(plain_upstream, tls_upstream.port(), &certificates.ca),
        Some(&state_dir),
    )
    .unwrap_or_else(|e| panic!("the egress proxy cannot be set up: {e}"));
    let policy = service
        .policy_for("bench", "bench")
        .expect("the bench's [egress] allows hosts, so a run gets a network");
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .expect("a listener for the proxy on 127.0.0.1");
    listener
        .set_nonblocking(true)
        .expect("the proxy's listener made non-blocking");
    let proxy = listener.local_addr().expect("the proxy's address");
    let label = RunLabel {
        owner: "egress-bench".into(),
        call: "call-1".into(),
        tool: "bench".into(),
        scope: "bench".into(),
    };
    let run = {
        let _entered = dsh_runtime.enter();
        policy
            .serve(listener, &label)
            .unwrap_or_else(|e| panic!("the proxy cannot serve its listener: {e}"))
    };

    let relays = [SMALL_RELAY_BUFFER, LARGE_RELAY_BUFFER]
        .map(|buffer| dsh_runtime.block_on(serve_bare_relay(buffer)));

    let to_dsh = client_trusting(&state_dir.join("egress/ca.pem"), curl_like_provider());
    let to_upstream = client_trusting(&certificates.ca, curl_like_provider());
    // As dsh's own client to the upstreams is (rustls's ring defaults).
    let as_dsh_to_upstream = client_trusting(&certificates.ca, ring_provider());
    client_runtime.block_on(async {
        throughput(proxy, plain_upstream, relays).await;
        tunnelled_setup(proxy, plain_upstream).await;
        terminated_setup(proxy, tls_upstream, &to_dsh, &to_upstream).await;
        handshake_costs(&to_upstream, &as_dsh_to_upstream, &upstream_server).await;
    });

    let refused = run.refused();
    assert!(
        refused.is_empty(),
        "the proxy refused connections of the bench: {refused:?}"
    );
    drop(run);
}

/// The bench's `[egress]`: the plain upstream by its address literal; the TLS upstream
/// as `localhost:PORT`, which `hosts` maps to 127.0.0.1 and an inject rule has the proxy
/// terminate TLS for, verifying the upstream against `upstream_ca`.
fn egress_config(plain_upstream: SocketAddr, tls_port: u16, upstream_ca: &Path) -> EgressConfig {
    let tls_target = format!("{TLS_HOST}:{tls_port}");
    EgressConfig {
        allow: vec![plain_upstream.to_string(), tls_target.clone()],
        inject: vec![InjectRule {
            host: tls_target,
            header: INJECTED_HEADER.into(),
            value_env: INJECTED_VARIABLE.into(),
        }],
        hosts: BTreeMap::from([(TLS_HOST.to_string(), vec![IpAddr::V4(Ipv4Addr::LOCALHOST)])]),
        upstream_ca: vec![upstream_ca.to_path_buf()],
        ..EgressConfig::default()
    }
}

/// How a download reaches the upstream.
#[derive(Clone, Copy)]
enum DownloadPath {
    Direct,
    /// Through a `CONNECT` tunnel of the proxy at this address.
    Tunnel(SocketAddr),
}

/// Part 1: a 100 MB download through dsh's tunnel against direct, and through two bare
/// relays (references for what a relay costs by itself), in turns.
async fn throughput(proxy: SocketAddr, upstream: SocketAddr, relays: [SocketAddr; 2]) {
    let target = upstream.to_string();
    let paths = [
        DownloadPath::Direct,
        DownloadPath::Tunnel(proxy),
        DownloadPath::Tunnel(relays[0]),
        DownloadPath::Tunnel(relays[1]),
    ];
    let mut times: [Vec<Duration>; 4] = Default::default();
    for round in 0..DOWNLOAD_ROUNDS {
        for at in (0..paths.len()).map(|turn| (turn + round) % paths.len()) {
            let started = Instant::now();
            let mut stream = match paths[at] {
                DownloadPath::Direct => connect(upstream).await,
                DownloadPath::Tunnel(via) => open_tunnel(via, &target).await,
            };
            fetch(&mut stream, &target, DOWNLOAD_BYTES).await;
            times[at].push(started.elapsed());
        }
    }
    let rate = |samples: &[Duration]| DOWNLOAD_BYTES as f64 / 1e6 / median(samples).as_secs_f64();
    let [direct, tunnelled, small_relay, large_relay] = times.each_ref().map(|t| rate(t));
    let ratio = tunnelled / direct;
    println!(
        "== 1. throughput: a {} MB download from a local upstream, CONNECT-tunnelled against \
         direct (median of {DOWNLOAD_ROUNDS} each, in turns)",
        DOWNLOAD_BYTES / 1_000_000
    );
    println!("  direct     {direct:8.1} MB/s");
    println!("  tunnelled  {tunnelled:8.1} MB/s");
    println!(
        "  ratio tunnelled/direct {ratio:.2} (target >= {THROUGHPUT_TARGET}: {})",
        verdict(ratio >= THROUGHPUT_TARGET)
    );
    println!(
        "  for reference, a bare CONNECT relay on dsh's runtime (tokio's copy_bidirectional; \
         no HTTP server, policy or metering):"
    );
    println!(
        "    {:3} KiB buffers (tokio's)  {small_relay:8.1} MB/s  ratio {:.2}",
        SMALL_RELAY_BUFFER / 1024,
        small_relay / direct
    );
    println!(
        "    {:3} KiB buffers (dsh's)    {large_relay:8.1} MB/s  ratio {:.2}",
        LARGE_RELAY_BUFFER / 1024,
        large_relay / direct
    );
    println!();
}

/// Part 2: connect, CONNECT, 200, one small round trip, against connect and the round trip
/// direct, in turns.
async fn tunnelled_setup(proxy: SocketAddr, upstream: SocketAddr) {
    let target = upstream.to_string();
    let direct_once = async || {
        let started = Instant::now();
        let mut stream = connect(upstream).await;
        let connected = started.elapsed();
        fetch(&mut stream, &target, SMALL_BODY).await;
        [connected, started.elapsed() - connected]
    };
    let tunnelled_once = async || {
        let started = Instant::now();
        let mut stream = open_tunnel(proxy, &target).await;
        let tunnelled = started.elapsed();
        fetch(&mut stream, &target, SMALL_BODY).await;
        [tunnelled, started.elapsed() - tunnelled]
    };
    for _ in 0..WARM_UP {
        direct_once().await;
        tunnelled_once().await;
    }
    let mut direct = Vec::new();
    let mut tunnelled = Vec::new();
    for sample in 0..SETUP_SAMPLES {
        for through_proxy in in_turns(sample) {
            match through_proxy {
                true => tunnelled.push(tunnelled_once().await),
                false => direct.push(direct_once().await),
            }
        }
    }
    println!(
        "== 2. connection set-up added, tunnelled: connect, CONNECT, 200 and a {SMALL_BODY}-byte \
         request/response, against connect and the same round trip direct (p50 of \
         {SETUP_SAMPLES} each, in turns)"
    );
    print_phases("direct", &["connected", "request answered"], &direct);
    print_phases(
        "tunnelled",
        &["CONNECT answered 200", "request answered"],
        &tunnelled,
    );
    let added = ms(p50_total(&tunnelled)) - ms(p50_total(&direct));
    println!(
        "  added: p50 difference {added:.3} ms (target <= {:.0} ms: {})",
        ms(TUNNEL_SETUP_TARGET),
        verdict(added <= ms(TUNNEL_SETUP_TARGET))
    );
    println!();
}

/// Part 3: HTTPS through the proxy, which terminates TLS (CONNECT, TLS to dsh's
/// certificate, one request and its answer), against TLS straight to the upstream, in
/// turns.
async fn terminated_setup(
    proxy: SocketAddr,
    upstream: SocketAddr,
    to_dsh: &TlsConnector,
    to_upstream: &TlsConnector,
) {
    let target = format!("{TLS_HOST}:{}", upstream.port());
    let name = ServerName::try_from(TLS_HOST).expect("a server name");
    let direct_once = async || {
        let started = Instant::now();
        let stream = connect(upstream).await;
        let connected = started.elapsed();
        let mut tls = to_upstream
            .connect(name.clone(), stream)
            .await
            .expect("TLS straight to the upstream, trusting the test CA");
        let secured = started.elapsed();
        let head = fetch(&mut tls, &target, SMALL_BODY).await;
        assert_eq!(
            header_value(&head, INJECTED_ANSWER),
            Some("no"),
            "a direct request carries no injected header"
        );
        [connected, secured - connected, started.elapsed() - secured]
    };
    let terminated_once = async || {
        let started = Instant::now();
        let tunnel = open_tunnel(proxy, &target).await;
        let tunnelled = started.elapsed();
        let mut tls = to_dsh
            .connect(name.clone(), tunnel)
            .await
            .expect("TLS through the tunnel to the proxy's certificate, trusting dsh's CA");
        let secured = started.elapsed();
        let head = fetch(&mut tls, &target, SMALL_BODY).await;
        assert_eq!(
            header_value(&head, INJECTED_ANSWER),
            Some("yes"),
            "the proxy added the injected header (it terminated TLS)"
        );
        [tunnelled, secured - tunnelled, started.elapsed() - secured]
    };
    let first_started = Instant::now();
    terminated_once().await;
    let first = first_started.elapsed();
    for _ in 0..WARM_UP {
        direct_once().await;
        terminated_once().await;
    }
    let mut direct = Vec::new();
    let mut terminated = Vec::new();
    for sample in 0..SETUP_SAMPLES {
        for through_proxy in in_turns(sample) {
            match through_proxy {
                true => terminated.push(terminated_once().await),
                false => direct.push(direct_once().await),
            }
        }
    }
    println!(
        "== 3. connection set-up added, TLS terminated: CONNECT, TLS to dsh's certificate and a \
         {SMALL_BODY}-byte HTTPS request/response, against TCP, TLS and the same request \
         straight to the upstream (p50 of {SETUP_SAMPLES} each, in turns)"
    );
    print_phases(
        "direct",
        &["connected", "TLS handshake", "request answered"],
        &direct,
    );
    print_phases(
        "terminated",
        &[
            "CONNECT answered 200",
            "TLS handshake with the proxy",
            "request answered (the proxy's TLS to the upstream, then forwarding)",
        ],
        &terminated,
    );
    let added = ms(p50_total(&terminated)) - ms(p50_total(&direct));
    println!("  added: p50 difference {added:.3} ms");
    println!(
        "  (the first connection through the proxy, which minted its certificate for \
         {TLS_HOST}, took {:.3} ms; not counted)",
        ms(first)
    );
}

/// Which path goes first in turn `turn`: the proxy's on even turns.
fn in_turns(turn: usize) -> [bool; 2] {
    match turn % 2 {
        0 => [true, false],
        _ => [false, true],
    }
}

fn verdict(met: bool) -> &'static str {
    match met {
        true => "met",
        false => "MISSED",
    }
}

fn median(samples: &[Duration]) -> Duration {
    percentile(&mut samples.to_vec(), 0.5)
}

/// The p50 of whole connections whose phases are `samples`.
fn p50_total<const PHASES: usize>(samples: &[[Duration; PHASES]]) -> Duration {
    let totals: Vec<Duration> = samples.iter().map(|phases| phases.iter().sum()).collect();
    median(&totals)
}

/// `path`'s p50 and p90 whole, and the p50 of each of its phases.
fn print_phases<const PHASES: usize>(
    path: &str,
    names: &[&str; PHASES],
    samples: &[[Duration; PHASES]],
) {
    let totals: Vec<Duration> = samples.iter().map(|phases| phases.iter().sum()).collect();
    println!(
        "  {path:<11} p50 {:.3} ms  (p90 {:.3} ms)",
        ms(median(&totals)),
        ms(percentile(&mut totals.clone(), 0.9))
    );
    for (at, name) in names.iter().enumerate() {
        let phase: Vec<Duration> = samples.iter().map(|phases| phases[at]).collect();
        println!("      {:.3} ms  {name}", ms(median(&phase)));
    }
}

/// A connection to `address`, without Nagle's delay (as curl and the proxy make them).
async fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {address}: {e}"));
    stream.set_nodelay(true).expect("TCP_NODELAY set");
    stream
}

/// A connection to the proxy whose `CONNECT target` was answered 200: the tunnel.
async fn open_tunnel(proxy: SocketAddr, target: &str) -> TcpStream {
    let mut stream = connect(proxy).await;
    let request = format!("CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the CONNECT is sent");
    let (head, rest) = read_head(&mut stream)
        .await
        .unwrap_or_else(|e| panic!("the proxy does not answer CONNECT {target}: {e}"));
    let head = String::from_utf8_lossy(&head);
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "the proxy refuses CONNECT {target}: {head}"
    );
    assert!(rest.is_empty(), "the proxy sent bytes past its 200");
    stream
}

/// Asks for `size` bytes of body on `stream` and reads the whole answer; its head.
async fn fetch<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, host: &str, size: u64) -> String {
    let request = format!("GET /{size} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("the request is sent");
    let (head, rest) = read_head(stream)
        .await
        .unwrap_or_else(|e| panic!("no answer to GET /{size} from {host}: {e}"));
    let head = String::from_utf8(head).expect("an answer's head is text");
    assert!(head.starts_with("HTTP/1.1 200"), "GET /{size}: {head}");
    let length = header_value(&head, "content-length").and_then(|v| v.parse::<u64>().ok());
    assert_eq!(length, Some(size), "the answer's content-length: {head}");
    let mut got = rest.len() as u64;
    let mut buffer = vec![0u8; CHUNK.min(size as usize).max(1)];
    while got < size {
        let n = stream
            .read(&mut buffer)
            .await
            .unwrap_or_else(|e| panic!("the body of GET /{size} broke off after {got} bytes: {e}"));
        assert!(n > 0, "the body of GET /{size} ended after {got} bytes");
        got += n as u64;
    }
    head
}

/// Reads an HTTP head through its blank line: the head, and what was read past it.
async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut head = Vec::with_capacity(1024);
    let mut buffer = [0u8; 4096];
    loop {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the connection ended within the head: {:?}",
                    String::from_utf8_lossy(&head)
                ),
            ));
        }
        head.extend_from_slice(&buffer[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = head.split_off(end + 4);
            return Ok((head, rest));
        }
        if head.len() > 64 * 1024 {
            return Err(std::io::Error::other("a head longer than 64 KiB"));
        }
    }
}

/// The value of the header `name` in `head`.
fn header_value<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// The upstream's side of a connection: `GET /N` answered with N bytes (and whether the
/// request carried the injected header), then the connection closed.
async fn answer_request<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> std::io::Result<()> {
    let (head, _) = read_head(&mut stream).await?;
    let head = String::from_utf8_lossy(&head);
    let size: u64 = head
        .split_whitespace()
        .nth(1)
        .and_then(|path| path.strip_prefix('/'))
        .and_then(|size| size.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not a GET /N: {head}")))?;
    let injected = match header_value(&head, INJECTED_HEADER) == Some(INJECTED_VALUE) {
        true => "yes",
        false => "no",
    };
    let mut first = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n{INJECTED_ANSWER}: {injected}\r\nconnection: close\r\n\r\n"
    )
    .into_bytes();
    let first_body = size.min(CHUNK as u64) as usize;
    first.extend_from_slice(&BODY_BYTES[..first_body]);
    stream.write_all(&first).await?;
    let mut left = size - first_body as u64;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        stream.write_all(&BODY_BYTES[..n]).await?;
        left -= n as u64;
    }
    stream.shutdown().await
}

/// The plain upstream on 127.0.0.1, serving on the current runtime; its address.
async fn serve_plain_upstream() -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("a listener for the plain upstream");
    let address = listener.local_addr().expect("the plain upstream's address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            // A failed answer shows as the client's panic.
            tokio::spawn(answer_request(stream));
        }
    });
    address
}

/// The TLS upstream on 127.0.0.1 (its certificate for `localhost`), serving on the
/// current runtime; its address.
async fn serve_tls_upstream(acceptor: TlsAcceptor) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("a listener for the TLS upstream");
    let address = listener.local_addr().expect("the TLS upstream's address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    let _ = answer_request(tls).await;
                }
            });
        }
    });
    address
}

/// A bare `CONNECT` relay on 127.0.0.1 serving on the current runtime (the target
/// connected to as asked, then copied both ways with `buffer` bytes each way); its
/// address.
async fn serve_bare_relay(buffer: usize) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("a listener for a bare relay");
    let address = listener.local_addr().expect("the bare relay's address");
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            // A failed relay shows as the client's panic.
            tokio::spawn(relay(client, buffer));
        }
    });
    address
}

/// One connection of a bare relay.
async fn relay(mut client: TcpStream, buffer: usize) -> std::io::Result<()> {
    let (head, _) = read_head(&mut client).await?;
    let head = String::from_utf8_lossy(&head);
    let target = head
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| std::io::Error::other(format!("not a CONNECT: {head}")))?;
    let mut upstream = TcpStream::connect(target).await?;
    upstream.set_nodelay(true)?;
    client.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await?;
    tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, buffer, buffer).await?;
    Ok(())
}

/// ring's primitives, as dsh's TLS has them.
fn ring_provider() -> Arc<rustls::crypto::CryptoProvider> {
    #[allow(deprecated)]
    Arc::new(rustls::crypto::ring::default_provider())
}

/// ring's primitives with the key exchange groups in curl's and OpenSSL's default order
/// (X25519 first), as the tools of a run offer them; rustls's ring defaults put P-384
/// first, which ring computes several times slower.
fn curl_like_provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::crypto::ring::kx_group::{SECP256R1, SECP384R1, X25519};
    let mut provider = Arc::unwrap_or_clone(ring_provider());
    provider.kx_groups = vec![X25519, SECP256R1, SECP384R1];
    Arc::new(provider)
}

/// A TLS client with `provider` trusting only the CA in `ca_pem`, resuming no session.
fn client_trusting(ca_pem: &Path, provider: Arc<rustls::crypto::CryptoProvider>) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(ca_pem)
        .unwrap_or_else(|e| panic!("cannot read the CA {}: {e}", ca_pem.display()));
    for certificate in certificates {
        let certificate = certificate
            .unwrap_or_else(|e| panic!("a bad certificate in {}: {e}", ca_pem.display()));
        roots
            .add(certificate)
            .unwrap_or_else(|e| panic!("the CA of {} not trusted: {e}", ca_pem.display()));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("rustls's default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = rustls::client::Resumption::disabled();
    TlsConnector::from(Arc::new(config))
}

/// Part 3's where the time goes: one TLS handshake with the upstream's server, by the
/// bench's clients and by a client configured as dsh's own to the upstreams.
async fn handshake_costs(
    curl_like: &TlsConnector,
    as_dsh_to_upstream: &TlsConnector,
    upstream_server: &TlsAcceptor,
) {
    let curl_like = handshake_cpu(curl_like, upstream_server).await;
    let ring_defaults = handshake_cpu(as_dsh_to_upstream, upstream_server).await;
    println!(
        "  where the time goes: one TLS handshake's CPU, both ends on one thread over an \
         in-memory pipe (p50 of {HANDSHAKE_SAMPLES}):"
    );
    println!(
        "    {:.3} ms  the client offering X25519 first (curl, OpenSSL; the bench's clients)",
        ms(curl_like)
    );
    println!(
        "    {:.3} ms  ring's default order, P-384 first (why dsh's TLS offers X25519 \
         first, src/tls.rs)",
        ms(ring_defaults)
    );
}

/// The p50 of the time one TLS handshake with `server` takes over an in-memory pipe, both
/// ends on this thread: its CPU, without the network.
async fn handshake_cpu(client: &TlsConnector, server: &TlsAcceptor) -> Duration {
    let name = ServerName::try_from(TLS_HOST).expect("a server name");
    let mut samples = Vec::new();
    for _ in 0..HANDSHAKE_SAMPLES {
        let (near, far) = tokio::io::duplex(64 * 1024);
        let started = Instant::now();
        let (client_side, server_side) =
            tokio::join!(client.connect(name.clone(), near), server.accept(far));
        client_side.expect("the in-memory handshake's client end");
        server_side.expect("the in-memory handshake's server end");
        samples.push(started.elapsed());
    }
    median(&samples)
}

/// The TLS upstream's certificate for `localhost` (ECDSA P-256, as dsh mints its own) and
/// the test CA that signed it, as PEM files.
struct UpstreamCertificates {
    ca: PathBuf,
    certificate: PathBuf,
    key: PathBuf,
}

/// The test CA's `openssl req` configuration.
const TEST_CA_CONFIG: &str = "\
[req]
distinguished_name = dn
x509_extensions = ca_extensions
prompt = no
[dn]
CN = dsh egress bench upstream CA
[ca_extensions]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
";

/// The extensions of the upstream's certificate.
const SERVER_EXTENSIONS: &str = "\
subjectAltName = DNS:localhost
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
";

impl UpstreamCertificates {
    /// Makes them in `dir` with the `openssl` command.
    fn make(dir: &Path) -> UpstreamCertificates {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
        std::fs::write(dir.join("ca.cnf"), TEST_CA_CONFIG)
            .expect("the CA's openssl config written");
        std::fs::write(dir.join("server.cnf"), SERVER_EXTENSIONS)
            .expect("the certificate's extensions written");
        let p256 = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let openssl = |args: &[&str]| {
            let output = std::process::Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot run `openssl` (the bench makes its test certificates with it): {e}"
                    )
                });
            assert!(
                output.status.success(),
                "`openssl {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
        };
        openssl(
            &[
                &["req", "-x509", "-config", "ca.cnf", "-days", "30"][..],
                &p256,
                &["-keyout", "ca-key.pem", "-out", "ca.pem"],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req", "-new", "-config", "ca.cnf", "-subj", "/CN=localhost"][..],
                &p256,
                &["-keyout", "server-key.pem", "-out", "server.csr"],
            ]
            .concat(),
        );
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-set_serial",
            "2",
            "-days",
            "30",
            "-extfile",
            "server.cnf",
            "-out",
            "server.pem",
        ]);
        UpstreamCertificates {
            ca: dir.join("ca.pem"),
            certificate: dir.join("server.pem"),
            key: dir.join("server-key.pem"),
        }
    }

    /// The upstream's TLS server with this certificate.
    fn server_acceptor(&self) -> TlsAcceptor {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.certificate)
            .and_then(|certificates| certificates.collect())
            .unwrap_or_else(|e| {
                panic!(
                    "cannot read the certificate {}: {e}",
                    self.certificate.display()
                )
            });
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .unwrap_or_else(|e| panic!("cannot read the key {}: {e}", self.key.display()));
        let config = rustls::ServerConfig::builder_with_provider(ring_provider())
            .with_safe_default_protocol_versions()
            .expect("rustls's default protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap_or_else(|e| panic!("the upstream's certificate is not usable: {e}"));
        TlsAcceptor::from(Arc::new(config))
    }
}
