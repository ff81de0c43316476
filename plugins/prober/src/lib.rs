//! Test plugin `prober`: tries to reach files, environment variables and the network
//! through the WASI std APIs and reports what happened, so the host's end-to-end tests
//! can prove a plugin gets only what it was granted. It imports no dsh host interface.
//! A failure's message starts with its kind as the WASI error code tells it: `[denied]`
//! (the sandbox refused: `access-denied`, EACCES), `[refused]` (nothing listens there),
//! `[name-not-found]` (the resolver says no such name), `[timed-out]`, `[not-found]`
//! (no such file) or `[io]`, followed by the I/O error. Network failures carry the
//! matching code: `denied` only for `[denied]`, `not-found` for `[refused]` and
//! `[name-not-found]`, `timeout` for `[timed-out]`. File failures all carry
//! `denied`: wasi-libc reports a path outside every granted directory as
//! ENOENT, so a missing file and an ungranted one cannot be told apart.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use dsh_plugin::{failure, text, CallContext, ErrorCode, Tool, Tools};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    path: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    text: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct KeyArgs {
    key: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AddrArgs {
    addr: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct HostArgs {
    host: String,
}

/// A probe: what it tries, and how its failure is coded. File probes' failures all
/// carry `denied` (see the crate's doc).
fn probe<A: DeserializeOwned + JsonSchema + 'static>(
    name: &'static str,
    description: &str,
    file: bool,
    run: fn(A) -> Result<String, Failure>,
) -> Tool {
    Tool::new(
        name,
        format!("Test fixture probing the plugin sandbox: {description}"),
        move |_: &CallContext, args: A| match run(args) {
            Ok(content) => text(content),
            Err(failed) => {
                let code = match failed.kind {
                    _ if file => ErrorCode::Denied,
                    Kind::Denied => ErrorCode::Denied,
                    Kind::TimedOut => ErrorCode::Timeout,
                    Kind::NotFound | Kind::NameNotFound | Kind::Refused => ErrorCode::NotFound,
                    Kind::Io => ErrorCode::Internal,
                };
                failure(code, format!("[{}] {}", failed.kind.tag(), failed.message))
            }
        },
    )
}

struct Prober;

impl Tools for Prober {
    fn tools() -> Vec<Tool> {
        vec![
            probe(
                "read_file",
                "read the file at `path` and return its text.",
                true,
                |PathArgs { path }| {
                    std::fs::read_to_string(&path)
                        .map_err(|e| Failure::io(format!("cannot read {path}"), e))
                },
            ),
            probe(
                "write_file",
                "write `text` to the file at `path`.",
                true,
                |WriteArgs { path, text }| {
                    std::fs::write(&path, &text)
                        .map(|()| format!("wrote {} bytes to {path}", text.len()))
                        .map_err(|e| Failure::io(format!("cannot write {path}"), e))
                },
            ),
            probe(
                "list_dir",
                "list the entries of the directory at `path`, sorted.",
                true,
                |PathArgs { path }| {
                    list_dir(&path).map_err(|e| Failure::io(format!("cannot list {path}"), e))
                },
            ),
            probe(
                "env",
                "return the value of the environment variable `key`.",
                false,
                |KeyArgs { key }| {
                    std::env::var(&key).map_err(|e| Failure {
                        kind: Kind::Denied,
                        message: format!("environment variable {key} is not visible: {e}"),
                    })
                },
            ),
            probe(
                "connect",
                "open a TCP connection to `addr` (host:port), send a ping and return any reply.",
                false,
                |AddrArgs { addr }| {
                    connect(&addr).map_err(|f| f.context(format!("cannot connect to {addr}")))
                },
            ),
            probe(
                "lookup",
                "look up the host name `host` and return its addresses, sorted.",
                false,
                |HostArgs { host }| {
                    lookup(&host, 0)
                        .map(|addrs| {
                            let mut ips: Vec<String> =
                                addrs.iter().map(|a| a.ip().to_string()).collect();
                            ips.sort();
                            ips.dedup();
                            ips.join("\n")
                        })
                        .map_err(|f| f.context(format!("cannot look up {host}")))
                },
            ),
            probe(
                "listen",
                "bind a TCP listener to `addr` (host:port) and return the address it listens on.",
                false,
                |AddrArgs { addr }| {
                    listen(&addr).map_err(|f| f.context(format!("cannot listen on {addr}")))
                },
            ),
        ]
    }
}

/// What kind of failure an operation met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The sandbox refused (WASI `access-denied` / `not-permitted`, EACCES / EPERM).
    Denied,
    /// Nothing listens there (`connection-refused`).
    Refused,
    /// The resolver says the name does not exist (`name-unresolvable`).
    NameNotFound,
    /// No such file or directory.
    NotFound,
    /// The operation timed out.
    TimedOut,
    /// Any other I/O error.
    Io,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Denied => "denied",
            Kind::Refused => "refused",
            Kind::NameNotFound => "name-not-found",
            Kind::NotFound => "not-found",
            Kind::TimedOut => "timed-out",
            Kind::Io => "io",
        }
    }

    /// The kind of an I/O error, from its error kind (which std derives from the errno
    /// wasi-libc maps each WASI error code to).
    fn of(error: &std::io::Error) -> Kind {
        match error.kind() {
            ErrorKind::PermissionDenied => Kind::Denied,
            ErrorKind::ConnectionRefused => Kind::Refused,
            ErrorKind::NotFound => Kind::NotFound,
            ErrorKind::TimedOut | ErrorKind::WouldBlock => Kind::TimedOut,
            _ => Kind::Io,
        }
    }
}

/// A failed operation: its kind and what happened.
struct Failure {
    kind: Kind,
    message: String,
}

impl Failure {
    fn io(what: String, error: std::io::Error) -> Failure {
        Failure {
            kind: Kind::of(&error),
            message: format!(
                "{what}: {error} ({:?}, os error {:?})",
                error.kind(),
                error.raw_os_error()
            ),
        }
    }

    fn context(self, what: String) -> Failure {
        Failure {
            kind: self.kind,
            message: format!("{what}: {}", self.message),
        }
    }
}

/// The names of the directory's entries, sorted, one per line.
fn list_dir(path: &str) -> std::io::Result<String> {
    let mut names = std::fs::read_dir(path)?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names.join("\n"))
}

/// Looks `host` up (with `port`) through the resolver (`wasi:sockets/ip-name-lookup`).
/// wasi-libc's getaddrinfo turns `name-unresolvable` into EAI_NONAME, which std reports
/// as "failed to lookup address information: ..."; an access-denied lookup comes back as
/// EAI_SYSTEM with errno EACCES, which std reports as PermissionDenied.
fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, Failure> {
    match (host, port).to_socket_addrs() {
        Ok(addrs) => Ok(addrs.collect()),
        Err(error) => {
            let text = error.to_string().to_ascii_lowercase();
            let kind = match Kind::of(&error) {
                Kind::Io
                    if text.contains("not known")
                        || text.contains("does not resolve")
                        || text.contains("no address")
                        || text.contains("nonam") =>
                {
                    Kind::NameNotFound
                }
                kind => kind,
            };
            let failed = Failure::io("lookup".into(), error);
            Err(Failure { kind, ..failed })
        }
    }
}

/// The addresses `addr` (HOST:PORT) stands for: an address literal as is, else the
/// host's addresses from [`lookup`].
fn addresses(addr: &str) -> Result<Vec<SocketAddr>, Failure> {
    if let Ok(literal) = addr.parse::<SocketAddr>() {
        return Ok(vec![literal]);
    }
    let (host, port) = addr.rsplit_once(':').ok_or(Failure {
        kind: Kind::Io,
        message: format!("{addr:?} is not HOST:PORT"),
    })?;
    let port = port.parse::<u16>().map_err(|_| Failure {
        kind: Kind::Io,
        message: format!("port {port:?} is not a number"),
    })?;
    lookup(host, port)
}

/// Binds a listener to `addr` and returns the address it listens on.
fn listen(addr: &str) -> Result<String, Failure> {
    let addrs = addresses(addr)?;
    let listener = TcpListener::bind(&addrs[..]).map_err(|e| Failure::io("bind".into(), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::io("local address".into(), e))?;
    Ok(format!("listening on {local}"))
}

/// Connects, sends `ping\n` and reads up to 64 bytes of reply (2 s read timeout where
/// the platform supports one; a failed or timed-out read just leaves the reply empty).
fn connect(addr: &str) -> Result<String, Failure> {
    let addrs = addresses(addr)?;
    let mut stream =
        TcpStream::connect(&addrs[..]).map_err(|e| Failure::io("connect".into(), e))?;
    stream
        .write_all(b"ping\n")
        .map_err(|e| Failure::io("send".into(), e))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reply = [0u8; 64];
    let read = stream.read(&mut reply).unwrap_or(0);
    Ok(format!(
        "connected to {addr}\n{}",
        String::from_utf8_lossy(&reply[..read])
    ))
}

dsh_plugin::export!(tool: Prober);
