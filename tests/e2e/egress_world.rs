//! The test world: a small "internet" for the end-to-end tests of egress. A [`World`] owns
//! a network namespace joined to the host's by a veth pair on a public-looking /30 of its
//! own (11.55.N.0/30: the host side is .1, the servers' side .2), the servers it runs in
//! that namespace on the servers' side (one Python script, standard library only: HTTPS
//! on 443 and 8443, plain HTTP on 80, answering for [`NAMES`] by the Host header), the
//! test CA that signed their certificate, the request log they append to, and a temp dir
//! with all of their files. Dropping it stops the servers and deletes the veth pair and
//! the namespace. It needs root (as the tests run here and in CI); the tests at the end
//! check it against curl, pip and git.

use std::ffi::OsStr;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{survivors, wait_for};

/// The names the world's servers answer for (any other name gets `reached HOST` too):
/// `pypi.test` is a PEP 503 index with one wheel ([`WHEEL`]), `git.test` a repository
/// served over git's dumb HTTP protocol (`/repo.git`), `api.test` an API that wants
/// [`World::api_token`], and `evil.test` and `other.test` answer `reached HOST`.
pub const NAMES: &[&str] = &[
    "pypi.test",
    "git.test",
    "api.test",
    "evil.test",
    "other.test",
];

/// The ports of the world's HTTPS servers (the same server on each).
pub const HTTPS_PORTS: [u16; 2] = [443, 8443];

/// The port of the world's plain HTTP server.
pub const HTTP_PORT: u16 = 80;

/// What `README` in git.test's `/repo.git` holds.
pub const GIT_README: &str = "hello from git.test\n";

/// The wheel pypi.test serves (`/packages/WHEEL`, listed by `/simple/dshprobe/`): module
/// `dshprobe` with `VALUE = 42`.
pub const WHEEL: &str = "dshprobe-1.0-py3-none-any.whl";

/// How long [`World::start`] waits for every port to accept.
const SERVERS_READY_WITHIN: Duration = Duration::from_secs(30);

/// Worlds started by this process: with its pid, it names each world's namespace and
/// picks its first candidate subnet.
static WORLDS_STARTED: AtomicU64 = AtomicU64::new(0);

/// The proxy variables clients read; the tests' clients go direct.
const PROXY_VARIABLES: [&str; 6] = [
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "all_proxy",
];

/// The servers' script, written into each world's temp dir.
const SERVERS_SCRIPT: &str = r##""""The servers of the end-to-end tests' test world (tests/e2e/egress_world.rs writes and
starts this inside the world's network namespace): HTTPS on 443 and 8443 and plain HTTP
on 80 on one address, each dispatching by the Host header (else the TLS server name):
pypi.test (a PEP 503 index with one wheel it builds), git.test (a bare repository as
static files, git's dumb HTTP protocol), api.test (a bearer token API) and any other name
(`reached HOST`). Every request is appended to the log as `HOST METHOD PATH`. It exits
when its standard input closes (the test process that started it is gone)."""

import argparse
import base64
import hashlib
import hmac
import os
import ssl
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WHEEL = "dshprobe-1.0-py3-none-any.whl"


def build_wheel(path):
    """A pure-Python wheel of `dshprobe` (`VALUE = 42`) with its RECORD, byte for byte
    the same every time (fixed timestamps)."""
    files = [
        ("dshprobe.py", b"VALUE = 42\n"),
        (
            "dshprobe-1.0.dist-info/METADATA",
            b"Metadata-Version: 2.1\nName: dshprobe\nVersion: 1.0\n"
            b"Summary: The test world's probe package\n",
        ),
        (
            "dshprobe-1.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: dsh-test-world\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n",
        ),
    ]
    record = ""
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record += f"{name},sha256={digest.decode()},{len(data)}\n"
    record += "dshprobe-1.0.dist-info/RECORD,,\n"
    files.append(("dshprobe-1.0.dist-info/RECORD", record.encode()))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)


class Site:
    """What the servers answer, and the request log."""

    def __init__(self, args):
        self.address = args.address
        self.token = args.token.encode()
        self.root = os.path.realpath(args.root)
        self.log_file = open(args.log, "a", encoding="utf-8")
        self.log_lock = threading.Lock()
        packages = os.path.join(self.root, "pypi")
        os.makedirs(packages, exist_ok=True)
        wheel = os.path.join(packages, WHEEL)
        build_wheel(wheel)
        with open(wheel, "rb") as f:
            self.wheel_sha256 = hashlib.sha256(f.read()).hexdigest()

    def log(self, line):
        with self.log_lock:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    def answer(self, host, target, headers):
        """(status, content type, body) for a request to `host`."""
        path = target.split("?", 1)[0].split("#", 1)[0]
        if host == "pypi.test":
            return self.pypi(path)
        if host == "git.test":
            return self.static("git", path)
        if host == "api.test":
            return self.api(path, headers)
        return 200, "text/plain", f"reached {host}".encode()

    def pypi(self, path):
        if path in ("/simple", "/simple/"):
            page = '<!DOCTYPE html>\n<html><body><a href="/simple/dshprobe/">dshprobe</a></body></html>\n'
            return 200, "text/html", page.encode()
        if path in ("/simple/dshprobe", "/simple/dshprobe/"):
            page = (
                "<!DOCTYPE html>\n<html><body>"
                f'<a href="/packages/{WHEEL}#sha256={self.wheel_sha256}">{WHEEL}</a>'
                "</body></html>\n"
            )
            return 200, "text/html", page.encode()
        if path.startswith("/packages/"):
            return self.static("pypi", path[len("/packages") :])
        return 404, "text/plain", b"not found"

    def static(self, folder, path):
        """The file at `path` under the root's `folder`, never outside it."""
        base = os.path.join(self.root, folder)
        file = os.path.realpath(os.path.join(base, path.lstrip("/")))
        if not file.startswith(base + os.sep) or not os.path.isfile(file):
            return 404, "text/plain", b"not found"
        with open(file, "rb") as f:
            body = f.read()
        kind = "text/plain" if file.endswith(("/info/refs", "/HEAD")) else "application/octet-stream"
        return 200, kind, body

    def api(self, path, headers):
        given = (headers.get("Authorization") or "").encode()
        if not hmac.compare_digest(given, b"Bearer " + self.token):
            return 401, "text/plain", b"no"
        if path == "/whoami":
            return 200, "text/plain", b"ok tester"
        return 404, "text/plain", b"not found"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dsh-test-world"
    # A client that stops talking frees its thread.
    timeout = 60

    def answer(self):
        site = self.server.site
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            # Not read: the connection ends after the answer.
            self.close_connection = True
        else:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
        host = self.headers.get("Host") or getattr(self.request, "sni_name", None) or site.address
        host = host.strip().lower()
        if host.startswith("["):
            host = host[: host.find("]") + 1]
        elif ":" in host:
            host = host.rsplit(":", 1)[0]
        host = host.rstrip(".")
        site.log(f"{host} {self.command} {self.path}")
        status, kind, body = site.answer(host, self.path, self.headers)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = answer

    def log_message(self, format, *args):
        pass


class Server(ThreadingHTTPServer):
    """A threaded HTTP server; with a TLS context, each connection's handshake happens on
    its own thread (a slow client holds up no other)."""

    daemon_threads = True
    # Tests open a thousand connections at once.
    request_queue_size = 1024

    def __init__(self, address, site, tls):
        self.site = site
        self.tls = tls
        super().__init__(address, Handler)

    def finish_request(self, request, client_address):
        if self.tls is None:
            return super().finish_request(request, client_address)
        request.settimeout(Handler.timeout)
        try:
            connection = self.tls.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError):
            return
        try:
            self.RequestHandlerClass(connection, client_address, self)
        finally:
            try:
                connection.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        # A client that went away mid-answer is not the server's error.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            super().handle_error(request, client_address)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--https-port", type=int, action="append", default=[])
    parser.add_argument("--http-port", type=int, action="append", default=[])
    args = parser.parse_args()

    site = Site(args)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(args.cert, args.key)

    def remember_server_name(connection, server_name, context):
        connection.sni_name = server_name

    tls.sni_callback = remember_server_name
    servers = [Server((args.address, port), site, tls) for port in args.https_port]
    servers += [Server((args.address, port), site, None) for port in args.http_port]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    while sys.stdin.buffer.read(65536):
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
"##;

/// A network namespace with HTTP(S) servers in it, reachable from the host's namespace
/// over a veth pair (see the module's doc). Dropping it stops the servers, then deletes
/// the veth pair and the namespace, then the temp dir (fields drop in this order).
pub struct World {
    servers: Servers,
    network: Network,
    ca_pem: PathBuf,
    api_token: String,
    hosts_file: PathBuf,
    request_log: PathBuf,
    dir: tempfile::TempDir,
}

impl World {
    /// A started world, its servers accepting on every port; `None` (the test says it is
    /// skipped, which fails under `CI=true`) when not root. Panics with what failed
    /// (the servers' stderr included) when it cannot be set up.
    pub fn start() -> Option<World> {
        if !rustix::process::geteuid().is_root() {
            crate::support::skipped("the test world (a network namespace) needs root");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("dsh-world-")
            .tempdir()
            .expect("test world: a temp dir");
        let network = Network::create();
        let address = network.address;
        let www = dir.path().join("www");
        std::fs::create_dir_all(&www).expect("test world: the servers' root");
        let certificates = Certificates::make(dir.path(), address);
        make_git_repository(dir.path(), &www.join("git").join("repo.git"));
        let api_token = random_token();
        let request_log = dir.path().join("requests.log");
        let hosts_file = dir.path().join("hosts");
        let mut hosts = format!("127.0.0.1 localhost\n{address}");
        for name in NAMES {
            hosts.push(' ');
            hosts.push_str(name);
        }
        hosts.push('\n');
        std::fs::write(&hosts_file, hosts).expect("test world: its hosts file");
        let servers = Servers::start(
            dir.path(),
            &network.netns.0,
            address,
            &www,
            &request_log,
            &api_token,
            &certificates,
        );
        Some(World {
            servers,
            network,
            ca_pem: certificates.ca_pem,
            api_token,
            hosts_file,
            request_log,
            dir,
        })
    }

    /// The servers' address (the servers' side of the veth pair).
    pub fn address(&self) -> Ipv4Addr {
        self.network.address
    }

    /// The address of the host's side of the veth pair (where the servers see the host's
    /// connections come from).
    pub fn host_side(&self) -> Ipv4Addr {
        self.network.host_side
    }

    /// The PEM of the test CA that signed the servers' certificate (whose names are
    /// [`NAMES`] and [`World::address`]).
    pub fn ca_pem(&self) -> &Path {
        &self.ca_pem
    }

    /// The bearer token api.test wants (`Authorization: Bearer TOKEN`); random per world.
    pub fn api_token(&self) -> &str {
        &self.api_token
    }

    /// Every request any of the servers got so far, in the order they got them, one line
    /// each: `HOST METHOD PATH` (HOST from the Host header without its port, else the TLS
    /// server name, else the address; PATH as the request line has it, query included).
    /// A request is logged before it is answered.
    pub fn requests(&self) -> Vec<String> {
        match std::fs::read_to_string(&self.request_log) {
            Ok(text) => text.lines().map(str::to_owned).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("test world: reading {}: {e}", self.request_log.display()),
        }
    }

    /// The world's temp dir (the servers' files, certificates, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The name of the world's network namespace (`ip netns exec NAME ...` runs there).
    pub fn netns(&self) -> &str {
        &self.network.netns.0
    }

    /// The name of the host's side of the veth pair.
    pub fn host_interface(&self) -> &str {
        &self.network.veth.host_interface
    }

    /// A hosts file that maps [`NAMES`] to [`World::address`] (and `localhost`).
    pub fn hosts_file(&self) -> &Path {
        &self.hosts_file
    }

    /// A command that runs `program` (add its arguments to it) where the system resolver
    /// knows [`NAMES`]: in a mount namespace of its own whose `/etc/hosts` is
    /// [`World::hosts_file`], for clients (pip, git) that have no `--resolve`.
    pub fn command_resolving_names(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /etc/hosts && exec "$@""#)
            .arg(self.hosts_file())
            .arg(program);
        command
    }

    /// The servers' stderr so far (tracebacks of anything that went wrong in them).
    pub fn servers_stderr(&self) -> String {
        std::fs::read_to_string(&self.servers.stderr_path).unwrap_or_default()
    }
}

/// The world's namespace and veth pair, and the addresses on either side. The veth pair
/// drops (is deleted) before the namespace.
struct Network {
    veth: Veth,
    netns: Netns,
    host_side: Ipv4Addr,
    address: Ipv4Addr,
}

/// A network namespace this process added; deleted on drop.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "delete", &self.0]) {
            eprintln!("test world: deleting netns {}: {e}", self.0);
        }
    }
}

/// A veth pair this process added (its host side's name); deleted (both sides) on drop.
struct Veth {
    host_interface: String,
}

impl Drop for Veth {
    fn drop(&mut self) {
        if let Err(e) = ip(&["link", "delete", &self.host_interface]) {
            eprintln!("test world: deleting veth {}: {e}", self.host_interface);
        }
    }
}

impl Network {
    /// A fresh namespace (named after this process's pid and a counter) joined to the
    /// host's by a veth pair `dshwNh`/`dshwNs` on 11.55.N.0/30. N starts from the pid and
    /// the counter, modulo 250, and moves on while its host side's name is taken (by
    /// another world, of this process or another: adding the link is the lock) or its
    /// subnet is in use. The first world of a process first deletes what worlds of
    /// processes that were killed left behind.
    fn create() -> Network {
        delete_worlds_of_dead_processes();
        let pid = u64::from(std::process::id());
        let mut attempts = 0;
        let (netns, world_number) = loop {
            let world_number = WORLDS_STARTED.fetch_add(1, Ordering::SeqCst);
            let name = format!("dsh-world-{pid}-{world_number}");
            match ip(&["netns", "add", &name]) {
                Ok(_) => break (Netns(name), world_number),
                // Left behind by an earlier process with this pid (killed before its
                // worlds dropped): take the next number.
                Err(e) if e.contains("File exists") && attempts < 100 => attempts += 1,
                Err(e) => panic!("test world: ip netns add {name}: {e}"),
            }
        };
        for offset in 0..250 {
            let n = (pid + world_number + offset) % 250;
            let host_interface = format!("dshw{n}h");
            let server_interface = format!("dshw{n}s");
            match ip(&[
                "link",
                "add",
                &host_interface,
                "type",
                "veth",
                "peer",
                "name",
                &server_interface,
                "netns",
                &netns.0,
            ]) {
                Ok(_) => {}
                Err(e) if e.contains("File exists") => continue,
                Err(e) => panic!("test world: adding veth {host_interface}: {e}"),
            }
            let veth = Veth { host_interface };
            let subnet = format!("11.55.{n}.0/30");
            let in_use = ip(&["-4", "-o", "addr", "show", "to", &subnet])
                .unwrap_or_else(|e| panic!("test world: listing addresses: {e}"));
            if !in_use.trim().is_empty() {
                continue;
            }
            let host_side = Ipv4Addr::new(11, 55, n as u8, 1);
            let address = Ipv4Addr::new(11, 55, n as u8, 2);
            let host_side_net = format!("{host_side}/30");
            if ip(&["addr", "add", &host_side_net, "dev", &veth.host_interface]).is_err() {
                continue;
            }
            let address_net = format!("{address}/30");
            let steps: [&[&str]; 4] = [
                &["-n", &netns.0, "link", "set", "lo", "up"],
                &[
                    "-n",
                    &netns.0,
                    "addr",
                    "add",
                    &address_net,
                    "dev",
                    &server_interface,
                ],
                &["-n", &netns.0, "link", "set", &server_interface, "up"],
                &["link", "set", &veth.host_interface, "up"],
            ];
            for args in steps {
                if let Err(e) = ip(args) {
                    panic!("test world: ip {}: {e}", args.join(" "));
                }
            }
            return Network {
                veth,
                netns,
                host_side,
                address,
            };
        }
        panic!("test world: every 11.55.N.0/30 (N < 250) is taken on this machine");
    }
}

/// Deletes the namespaces of worlds whose process is gone (killed before its worlds
/// dropped; their veth pairs go with them), once per process.
fn delete_worlds_of_dead_processes() {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let listed = ip(&["netns", "list"]).unwrap_or_default();
        for name in listed.lines().filter_map(|l| l.split_whitespace().next()) {
            let pid = name
                .strip_prefix("dsh-world-")
                .and_then(|rest| rest.split_once('-'))
                .map(|(pid, _)| pid);
            let Some(pid) = pid.filter(|pid| pid.parse::<u32>().is_ok()) else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                if let Err(e) = ip(&["netns", "delete", name]) {
                    eprintln!("test world: deleting the stale netns {name}: {e}");
                }
            }
        }
    });
}

/// `ip ARGS`: its stdout, or its status and stderr.
fn ip(args: &[&str]) -> Result<String, String> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run ip: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Runs `command` to success (stdin closed), or panics saying it could not `what`, with
/// its output.
fn run(command: &mut Command, what: &str) -> Output {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("test world: could not {what}: running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "test world: could not {what}: {command:?} {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The test CA and the servers' certificate it signed (P-256 keys, made with the
/// `openssl` CLI).
struct Certificates {
    ca_pem: PathBuf,
    server_pem: PathBuf,
    server_key: PathBuf,
}

impl Certificates {
    /// A new CA in `dir` and a server certificate for [`NAMES`] and `address`, both valid
    /// from now for a week, with the extensions strict verifiers want (the CA's basic
    /// constraints and key usage, key identifiers, server auth).
    fn make(dir: &Path, address: Ipv4Addr) -> Certificates {
        let names: Vec<String> = NAMES.iter().map(|name| format!("DNS:{name}")).collect();
        let config = format!(
            "[req]\n\
             distinguished_name = dn\n\
             prompt = no\n\
             [dn]\n\
             CN = dsh test world CA\n\
             [ca]\n\
             basicConstraints = critical,CA:TRUE\n\
             keyUsage = critical,keyCertSign,cRLSign\n\
             subjectKeyIdentifier = hash\n\
             [server]\n\
             basicConstraints = critical,CA:FALSE\n\
             keyUsage = critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage = serverAuth\n\
             subjectKeyIdentifier = hash\n\
             authorityKeyIdentifier = keyid:always\n\
             subjectAltName = {},IP:{address}\n",
            names.join(",")
        );
        let config_path = dir.join("openssl.cnf");
        std::fs::write(&config_path, config).expect("test world: the openssl config");
        let certificates = Certificates {
            ca_pem: dir.join("ca.pem"),
            server_pem: dir.join("server.pem"),
            server_key: dir.join("server.key"),
        };
        let ca_key = dir.join("ca.key");
        let server_csr = dir.join("server.csr");
        let new_key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        run(
            Command::new("openssl")
                .args(["req", "-x509", "-config"])
                .arg(&config_path)
                .args(["-extensions", "ca", "-days", "7"])
                .args(new_key)
                .arg("-keyout")
                .arg(&ca_key)
                .arg("-out")
                .arg(&certificates.ca_pem),
            "make the test CA",
        );
        run(
            Command::new("openssl")
                .args(["req", "-new", "-config"])
                .arg(&config_path)
                .args(["-subj", "/CN=dsh test world"])
                .args(new_key)
                .arg("-keyout")
                .arg(&certificates.server_key)
                .arg("-out")
                .arg(&server_csr),
            "make the servers' key",
        );
        run(
            Command::new("openssl")
                .args(["x509", "-req", "-in"])
                .arg(&server_csr)
                .arg("-CA")
                .arg(&certificates.ca_pem)
                .arg("-CAkey")
                .arg(&ca_key)
                .args(["-set_serial", &format!("0x{}", random_token())])
                .args(["-days", "7", "-extfile"])
                .arg(&config_path)
                .args(["-extensions", "server", "-out"])
                .arg(&certificates.server_pem),
            "sign the servers' certificate",
        );
        certificates
    }
}

/// A bare repository at `bare` with one commit (`README`: [`GIT_README`]), ready for
/// git's dumb HTTP protocol (`git update-server-info`); its work tree is made in `dir`.
fn make_git_repository(dir: &Path, bare: &Path) {
    let source = dir.join("git-source");
    std::fs::create_dir_all(&source).expect("test world: the git source dir");
    std::fs::write(source.join("README"), GIT_README).expect("test world: the README");
    let source = source.to_str().expect("a UTF-8 temp dir");
    let bare = bare.to_str().expect("a UTF-8 temp dir");
    let steps: [(&[&str], &str); 5] = [
        (&["init", "-q", "-b", "main", source], "git init"),
        (&["-C", source, "add", "README"], "git add"),
        (
            &[
                "-C",
                source,
                "commit",
                "-q",
                "-m",
                "The test world's repository",
            ],
            "git commit",
        ),
        (&["clone", "-q", "--bare", source, bare], "git clone --bare"),
        (
            &["-C", bare, "update-server-info"],
            "git update-server-info",
        ),
    ];
    for (args, what) in steps {
        run(
            Command::new("git")
                .args(args)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_AUTHOR_NAME", "dsh test world")
                .env("GIT_AUTHOR_EMAIL", "world@git.test")
                .env("GIT_COMMITTER_NAME", "dsh test world")
                .env("GIT_COMMITTER_EMAIL", "world@git.test"),
            what,
        );
    }
}

/// 32 random hex digits.
fn random_token() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("test world: random bytes");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The servers' process (`ip netns exec NS python3 servers.py`, in a process group of its
/// own) and where its stderr goes. It holds the write end of the script's stdin: the
/// script exits when that closes, so the servers never outlive this process. Killed (the
/// whole group) and reaped on drop.
struct Servers {
    process: Child,
    stderr_path: PathBuf,
}

impl Servers {
    /// Writes the script into `dir`, starts it in `netns` and waits until every port on
    /// `address` accepts from the host's namespace.
    fn start(
        dir: &Path,
        netns: &str,
        address: Ipv4Addr,
        www: &Path,
        request_log: &Path,
        api_token: &str,
        certificates: &Certificates,
    ) -> Servers {
        let script = dir.join("servers.py");
        std::fs::write(&script, SERVERS_SCRIPT).expect("test world: the servers' script");
        let stderr_path = dir.join("servers.stderr");
        let stderr = File::create(&stderr_path).expect("test world: the servers' stderr file");
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", netns, "python3"])
            .arg(&script)
            .args(["--address", &address.to_string(), "--token", api_token])
            .arg("--root")
            .arg(www)
            .arg("--log")
            .arg(request_log)
            .arg("--cert")
            .arg(&certificates.server_pem)
            .arg("--key")
            .arg(&certificates.server_key);
        for port in HTTPS_PORTS {
            command.args(["--https-port", &port.to_string()]);
        }
        command.args(["--http-port", &HTTP_PORT.to_string()]);
        let process = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("test world: could not start {command:?}: {e}"));
        let mut servers = Servers {
            process,
            stderr_path,
        };
        let ports: Vec<u16> = HTTPS_PORTS.iter().copied().chain([HTTP_PORT]).collect();
        let mut exited = None;
        let ready = wait_for(SERVERS_READY_WITHIN, || {
            if let Ok(Some(status)) = servers.process.try_wait() {
                exited = Some(status);
                return true;
            }
            ports.iter().all(|port| {
                let socket = SocketAddr::from((address, *port));
                TcpStream::connect_timeout(&socket, Duration::from_millis(500)).is_ok()
            })
        });
        let stderr = std::fs::read_to_string(&servers.stderr_path).unwrap_or_default();
        if let Some(status) = exited {
            panic!(
                "test world: the servers exited ({status}) before accepting on \
                 {address}:{ports:?}\nstderr:\n{stderr}"
            );
        }
        assert!(
            ready,
            "test world: the servers did not accept on every one of {address}:{ports:?} \
             within {SERVERS_READY_WITHIN:?}\nstderr:\n{stderr}"
        );
        servers
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let group = rustix::process::Pid::from_child(&self.process);
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        let _ = self.process.wait();
    }
}

/// `curl ARGS` from the host's namespace trusting only the world's CA (no proxy): (HTTP
/// status, body).
fn curl(world: &World, args: &[&str]) -> (u16, String) {
    let output = run(
        Command::new("curl")
            .args(["-sS", "--noproxy", "*", "--max-time", "20", "--cacert"])
            .arg(world.ca_pem())
            .args(["--write-out", "\n%{http_code}"])
            .args(args),
        "curl the test world",
    );
    let text = String::from_utf8(output.stdout).expect("a UTF-8 answer");
    let (body, status) = text.rsplit_once('\n').expect("curl wrote the status");
    (status.parse().expect("a status"), body.to_owned())
}

/// Whether `ip netns list` lists `name`.
fn netns_listed(name: &str) -> bool {
    let listed = ip(&["netns", "list"]).expect("ip netns list");
    listed
        .lines()
        .any(|line| line.split_whitespace().next() == Some(name))
}

#[test]
fn the_test_world_serves_its_hosts_to_a_client_that_trusts_its_ca() {
    let started = Instant::now();
    let Some(world) = World::start() else {
        return;
    };
    eprintln!("World::start took {:?}", started.elapsed());
    let address = world.address();
    assert_ne!(world.host_side(), address);

    let pypi = format!("pypi.test:443:{address}");
    let (status, page) = curl(
        &world,
        &["--resolve", &pypi, "https://pypi.test/simple/dshprobe/"],
    );
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("{WHEEL}#sha256=")), "{page}");

    let api = format!("api.test:8443:{address}");
    let whoami = "https://api.test:8443/whoami";
    let authorization = format!("Authorization: Bearer {}", world.api_token());
    let (status, body) = curl(&world, &["--resolve", &api, "-H", &authorization, whoami]);
    assert_eq!((status, body.starts_with("ok ")), (200, true), "{body}");
    let (status, body) = curl(&world, &["--resolve", &api, whoami]);
    assert_eq!((status, body.as_str()), (401, "no"));
    let wrong = "Authorization: Bearer not-the-token";
    let (status, body) = curl(&world, &["--resolve", &api, "-H", wrong, whoami]);
    assert_eq!((status, body.as_str()), (401, "no"));

    let evil = format!("evil.test:80:{address}");
    let (status, body) = curl(&world, &["--resolve", &evil, "http://evil.test/x?y=1"]);
    assert_eq!((status, body.as_str()), (200, "reached evil.test"));
    // The certificate names the address too.
    let (status, body) = curl(&world, &[&format!("https://{address}/")]);
    assert_eq!((status, body), (200, format!("reached {address}")));

    assert_eq!(
        world.requests(),
        [
            "pypi.test GET /simple/dshprobe/",
            "api.test GET /whoami",
            "api.test GET /whoami",
            "api.test GET /whoami",
            "evil.test GET /x?y=1",
            format!("{address} GET /").as_str(),
        ],
        "servers' stderr: {}",
        world.servers_stderr()
    );

    let netns = world.netns().to_owned();
    let host_interface = world.host_interface().to_owned();
    let dir = world.dir().to_owned();
    assert!(netns_listed(&netns), "{netns} is not in `ip netns list`");
    drop(world);
    assert!(!netns_listed(&netns), "{netns} is still in `ip netns list`");
    assert!(ip(&["link", "show", "dev", &host_interface]).is_err());
    assert!(!dir.exists(), "{}", dir.display());
    let left = survivors(dir.to_str().unwrap(), Duration::from_secs(5));
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn pip_installs_the_test_worlds_wheel_from_its_index() {
    let Some(world) = World::start() else {
        return;
    };
    run(
        Command::new("python3").args(["-m", "pip", "--version"]),
        "run pip (python3 -m pip)",
    );
    let target = world.dir().join("site");
    let mut pip = world.command_resolving_names("python3");
    pip.args(["-m", "pip", "install", "--index-url"])
        .arg("https://pypi.test/simple/")
        .arg("--cert")
        .arg(world.ca_pem())
        .args(["--no-deps", "--no-cache-dir", "--disable-pip-version-check"])
        .args(["--root-user-action", "ignore", "--target"])
        .arg(&target)
        .arg("dshprobe")
        // The machine's pip settings (other indexes, local wheels, CA bundles) stay out;
        // requests (pip's HTTP client) lets REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE win over
        // --cert.
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env_remove("PIP_FIND_LINKS")
        .env_remove("PIP_CERT")
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE")
        .env_remove("PIP_INDEX_URL")
        .env_remove("PIP_EXTRA_INDEX_URL");
    for variable in PROXY_VARIABLES {
        pip.env_remove(variable);
    }
    run(&mut pip, "pip install dshprobe from the test world");
    let value = run(
        Command::new("python3")
            .args(["-c", "import dshprobe; print(dshprobe.VALUE)"])
            .env("PYTHONPATH", &target),
        "import dshprobe",
    );
    assert_eq!(String::from_utf8_lossy(&value.stdout).trim(), "42");
    let requests = world.requests();
    assert!(
        requests.contains(&"pypi.test GET /simple/dshprobe/".to_owned())
            && requests.contains(&format!("pypi.test GET /packages/{WHEEL}")),
        "{requests:?}"
    );
}

#[test]
fn git_clones_the_test_worlds_repository_over_dumb_http() {
    let Some(world) = World::start() else {
        return;
    };
    let clone = world.dir().join("clone");
    let mut git = world.command_resolving_names("git");
    git.arg("-c")
        .arg(format!("http.sslCAInfo={}", world.ca_pem().display()))
        .args(["clone", "-q", "https://git.test/repo.git"])
        .arg(&clone)
        // The machine's git settings and CA bundle (GIT_SSL_CAINFO would win over
        // http.sslCAInfo) stay out.
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_SSL_CAINFO");
    for variable in PROXY_VARIABLES {
        git.env_remove(variable);
    }
    run(&mut git, "git clone from the test world");
    let readme = std::fs::read_to_string(clone.join("README")).expect("the clone's README");
    assert_eq!(readme, GIT_README);
    let requests = world.requests();
    assert!(
        requests.contains(&"git.test GET /repo.git/info/refs?service=git-upload-pack".to_owned()),
        "{requests:?}"
    );
}
