//! Network grants, driven through the `prober` test plugin: a plugin may look up only the
//! host names its grants name (any other name is refused before a resolver is asked), a
//! connect grant does not let it bind or listen while a bind grant does, and the prober
//! reports each failure with its real kind (`[denied]`, `[refused]`, `[name-not-found]`).
//!
//! How the DNS test knows what reached a resolver: `dsh` runs in its own mount namespace
//! (`unshare -m`, as root) with a `resolv.conf` bind-mounted over `/etc/resolv.conf` that
//! names a DNS server this test runs on a loopback address. Every query glibc's resolver
//! sends, from dsh or on a plugin's behalf, arrives at that server, which records the names
//! asked and answers them (A 127.0.0.1, NXDOMAIN for names starting `missing-`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::support::{unique_marker, CallOutput, Env};

/// A DNS server on a loopback address, port 53, recording the names it is asked.
struct DnsServer {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
}

impl DnsServer {
    fn start() -> DnsServer {
        // A loopback address of its own, so no other resolver on the machine is in the way.
        let socket = (2..250u8)
            .find_map(|last| UdpSocket::bind(SocketAddr::from(([127, 0, 53, last], 53))).ok())
            .expect("a UDP socket on 127.0.53.x:53 (the test runs as root)");
        let addr = socket.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let record = asked.clone();
        std::thread::spawn(move || {
            let mut packet = [0u8; 512];
            while let Ok((len, peer)) = socket.recv_from(&mut packet) {
                let Some((name, qtype, question_end)) = parse_query(&packet[..len]) else {
                    continue;
                };
                record.lock().unwrap().push(name.clone());
                let reply = answer(&packet[..question_end], &name, qtype);
                let _ = socket.send_to(&reply, peer);
            }
        });
        DnsServer { addr, asked }
    }

    /// Every name asked so far that contains `part`.
    fn asked_for(&self, part: &str) -> Vec<String> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|name| name.contains(part))
            .cloned()
            .collect()
    }
}

/// The question's name, type and where the question ends.
fn parse_query(packet: &[u8]) -> Option<(String, u16, usize)> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*packet.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(packet.get(at..at + len)?).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]);
    Some((labels.join("."), qtype, at + 4))
}

/// A reply to `query` (header and question): A 127.0.0.1 for an A question, no answer for
/// other types, NXDOMAIN for names starting `missing-`.
fn answer(query: &[u8], name: &str, qtype: u16) -> Vec<u8> {
    let mut reply = query.to_vec();
    let missing = name.starts_with("missing-");
    let has_answer = qtype == 1 && !missing;
    reply[2] = 0x81 | (query[2] & 0x01); // a response, recursion desired copied
    reply[3] = if missing { 0x83 } else { 0x80 }; // recursion available, NXDOMAIN or NOERROR
    reply[6..12].copy_from_slice(&[0, u8::from(has_answer), 0, 0, 0, 0]);
    if has_answer {
        reply.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 1, 0, 4, 127, 0, 0, 1]);
    }
    reply
}

/// The prober in a plugin directory, and the DNS server `dsh` is pointed at.
struct Network {
    env: Env,
    dns: DnsServer,
    resolv_conf: std::path::PathBuf,
}

impl Network {
    fn new() -> Network {
        let env = Env::new();
        env.add_plugins(&[("prober", "prober")]);
        let dns = DnsServer::start();
        let resolv_conf = env.dir.path().join("resolv.conf");
        std::fs::write(
            &resolv_conf,
            format!(
                "nameserver {}\noptions timeout:2 attempts:1\n",
                dns.addr.ip()
            ),
        )
        .unwrap();
        Network {
            env,
            dns,
            resolv_conf,
        }
    }

    /// `dsh call TOOL ARGS --json` under `config`, in a mount namespace whose
    /// /etc/resolv.conf names the test's DNS server.
    fn call(&self, config: &str, tool: &str, args: Value) -> CallOutput {
        let dsh = self.env.dsh_configured(config);
        let mut command = Command::new("unshare");
        command
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/resolv.conf && exec \"$@\"")
            .arg(&self.resolv_conf)
            .arg(dsh.get_program())
            .args(dsh.get_args())
            .args(["call", tool, &args.to_string(), "--json"])
            .current_dir(dsh.get_current_dir().unwrap())
            .stdin(Stdio::null());
        for (key, value) in dsh.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let output = command.output().unwrap();
        assert!(
            !output.stdout.is_empty(),
            "dsh did not run in a mount namespace (needs root and `unshare`): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        CallOutput::parse(output)
    }
}

/// A TCP server answering `pong` to every connection.
fn pong_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut ping = [0u8; 5];
            let _ = stream.read_exact(&mut ping);
            let _ = stream.write_all(b"pong\n");
        }
    });
    addr
}

#[test]
fn only_granted_names_reach_a_resolver_and_a_granted_name_resolves_and_connects() {
    let network = Network::new();
    let marker = unique_marker().to_ascii_lowercase();
    let server = pong_server();
    let granted = format!("granted-{marker}.dsh-test");
    let config = format!(
        "[plugins.prober]\nnetwork = [\"{granted}:{}\"]\n",
        server.port()
    );

    let exfil = format!("data-to-exfiltrate-{marker}.dsh-test");
    let refused = network.call(&config, "lookup", json!({ "host": exfil }));
    assert_eq!(refused.code.as_deref(), Some("DENIED"), "{refused:?}");
    assert!(refused.message.starts_with("[denied]"), "{refused:?}");
    // Same name with different case or a final dot: still refused.
    let dotted = network.call(
        &config,
        "lookup",
        json!({ "host": format!("{}.", exfil.to_uppercase()) }),
    );
    assert_eq!(dotted.code.as_deref(), Some("DENIED"), "{dotted:?}");

    let resolved = network.call(&config, "lookup", json!({ "host": granted }));
    assert_eq!(resolved.code, None, "{resolved:?}");
    assert_eq!(resolved.content, "127.0.0.1", "{resolved:?}");
    assert!(
        !network.dns.asked_for(&granted).is_empty(),
        "the granted lookup went through the test's DNS server"
    );

    // The connect check resolves the granted name too, and lets the address through.
    let connected = network.call(
        &config,
        "connect",
        json!({ "addr": format!("{granted}:{}", server.port()) }),
    );
    assert_eq!(connected.code, None, "{connected:?}");
    assert!(connected.content.contains("pong"), "{connected:?}");

    // The control: with `dns = true` the same kind of name does reach the server, so
    // the server seeing nothing above means nothing was asked.
    let open = format!("dns-open-{marker}.dsh-test");
    let any = network.call(
        "[plugins.prober]\ndns = true\n",
        "lookup",
        json!({ "host": open }),
    );
    assert_eq!(any.code, None, "{any:?}");
    assert!(!network.dns.asked_for(&open).is_empty());
    assert_eq!(
        network.dns.asked_for("data-to-exfiltrate"),
        Vec::<String>::new(),
        "a name not granted reached the resolver"
    );
}

#[test]
fn a_granted_name_that_does_not_exist_is_reported_as_not_found() {
    let network = Network::new();
    let missing = format!("missing-{}.dsh-test", unique_marker().to_ascii_lowercase());
    let config = format!("[plugins.prober]\nnetwork = [\"{missing}:80\"]\n");
    let lookup = network.call(&config, "lookup", json!({ "host": missing }));
    assert_eq!(lookup.code.as_deref(), Some("NOT_FOUND"), "{lookup:?}");
    assert!(lookup.message.starts_with("[name-not-found]"), "{lookup:?}");
    assert!(!network.dns.asked_for(&missing).is_empty());
}

#[test]
fn a_connect_grant_does_not_allow_binding_and_a_bind_grant_allows_listening() {
    let env = Env::new();
    env.add_plugins(&[("prober", "prober")]);
    let port = {
        // A free port, released for the plugin to take.
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let call =
        |config: &str, tool: &str| env.call_configured(config, tool, &json!({ "addr": addr }), &[]);

    let connect_only = format!("[plugins.prober]\nnetwork = [\"{addr}\"]\n");
    let bound = call(&connect_only, "listen");
    assert_eq!(bound.code.as_deref(), Some("DENIED"), "{bound:?}");
    assert!(bound.message.starts_with("[denied]"), "{bound:?}");
    // Nothing listens there: the connect is allowed and refused by the OS, not the sandbox.
    let refused = call(&connect_only, "connect");
    assert_eq!(refused.code.as_deref(), Some("NOT_FOUND"), "{refused:?}");
    assert!(refused.message.starts_with("[refused]"), "{refused:?}");

    let bind_only = format!("[plugins.prober]\nbind = [\"{addr}\"]\n");
    let listening = call(&bind_only, "listen");
    assert_eq!(listening.code, None, "{listening:?}");
    assert_eq!(listening.content, format!("listening on {addr}"));
    // A bind grant is no connect grant.
    let connect = call(&bind_only, "connect");
    assert_eq!(connect.code.as_deref(), Some("DENIED"), "{connect:?}");
    // Nor does it cover listening on any port of the wildcard address.
    let wildcard = env.call_configured(&bind_only, "listen", &json!({ "addr": "0.0.0.0:0" }), &[]);
    assert_eq!(wildcard.code.as_deref(), Some("DENIED"), "{wildcard:?}");
}

#[test]
fn plugins_grants_lists_connect_bind_and_dns_grants() {
    let env = Env::new();
    env.add_plugins(&[("prober", "prober")]);
    let config = "[plugins.prober]\nnetwork = [\"Example.COM.:443\", \"10.0.0.0/8:*\"]\nbind = [\"127.0.0.1:8080\"]\n";
    let plugins = env.plugins_configured(config);
    let prober = plugins.iter().find(|p| p["name"] == "prober").unwrap();
    assert_eq!(
        prober["grants"]["bind"],
        json!(["127.0.0.1:8080"]),
        "{prober}"
    );
    assert_eq!(prober["grants"]["dns"], json!(["example.com"]), "{prober}");
    let output = env
        .dsh_configured(config)
        .args(["plugins", "--grants"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("connect:    Example.COM.:443, 10.0.0.0/8:*"),
        "{text}"
    );
    assert!(text.contains("bind:       127.0.0.1:8080"), "{text}");
    assert!(text.contains("dns:        example.com"), "{text}");
    let open = env
        .dsh_configured("[plugins.prober]\ndns = true\n")
        .args(["plugins", "--grants"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&open.stdout);
    assert!(text.contains("dns:        *"), "{text}");
}
