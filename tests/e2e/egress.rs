//! Contained runs reach the network through dsh's egress proxy, by policy: what an
//! allowed host gives (`pip install` from a package index over HTTPS, `git clone`), what a
//! refused one gets (a 403 naming it, the result's `[network: …]` line, nothing reaching
//! the server), the attacks a run can try (no route but the proxy, no DNS, names that
//! resolve inside, IP literals, a ClientHello naming another host, URL tricks, ports not
//! allowed, a flood of connections) and a credential added on the way that the run never
//! sees. The "internet" is [`World`]: HTTPS servers in a network namespace of the test's,
//! on an address outside every inside range, their names mapped by `[egress] hosts`.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::egress_world::World;
use crate::mcp_stdio::McpServer;
use crate::support::{CallOutput, Env};

/// The variable of dsh's environment the API's header comes from.
const AUTH_VARIABLE: &str = "DSH_TEST_EGRESS_API_AUTH";

/// The configuration every test here runs under: `executor`, the world's names allowed
/// (but `evil.test`) and mapped, three more names mapped inside, the API's header.
fn config(world: &World, executor: &str, extra: &str) -> String {
    let address = world.address();
    let own = world.host_side();
    format!(
        r#"
[process.executor]
default = "{executor}"

[egress]
allow = ["pypi.test", "git.test", "api.test", "other.test", "loop.test", "meta.test", "own.test"]
upstream_ca = ["{ca}"]
{extra}

[egress.hosts]
"pypi.test" = ["{address}"]
"git.test" = ["{address}"]
"api.test" = ["{address}"]
"evil.test" = ["{address}"]
"other.test" = ["{address}"]
"loop.test" = ["127.0.0.1"]
"meta.test" = ["169.254.169.254"]
"own.test" = ["{own}"]

[[egress.inject]]
host = "api.test"
header = "Authorization"
value_env = "{AUTH_VARIABLE}"
"#,
        ca = world.ca_pem().display(),
    )
}

/// `dsh` under `config`, with the API's header value in its environment.
fn dsh(env: &Env, world: &World, config: &str) -> Command {
    let mut command = env.dsh_configured(config);
    command.env(AUTH_VARIABLE, format!("Bearer {}", world.api_token()));
    command
}

/// `bash COMMAND` through `dsh call`, with a timeout of 60 s.
fn bash(env: &Env, world: &World, config: &str, command: &str) -> CallOutput {
    let args = json!({"command": command, "description": "egress check", "timeoutMs": 60_000});
    let output = dsh(env, world, config)
        .args(["call", "bash", &args.to_string(), "--json"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    CallOutput::parse(output)
}

/// What a run's commands need to ignore this machine's own pip and git settings.
const CLEAN: &str = "export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 \
                     GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null HOME=$TMPDIR; ";

/// A world to test against, or None where it cannot be made (not root: said, and a
/// failure under CI).
fn world() -> Option<World> {
    World::start()
}

#[test]
fn pip_installs_and_git_clones_over_https_by_allowed_names_under_container_and_sandbox() {
    let Some(world) = world() else { return };
    let env = Env::new();
    for executor in ["container", "sandbox"] {
        let config = config(&world, executor, "");
        let out = bash(
            &env,
            &world,
            &config,
            &format!(
                "{CLEAN} /usr/bin/python3 -m pip install -q --no-cache-dir --target $TMPDIR/site \
                 --index-url https://pypi.test/simple/ dshprobe 2>&1 | tail -3; \
                 PYTHONPATH=$TMPDIR/site /usr/bin/python3 -c 'import dshprobe; print(\"value\", dshprobe.VALUE)'; \
                 git clone -q https://git.test/repo.git $TMPDIR/repo 2>&1 | tail -3; cat $TMPDIR/repo/README"
            ),
        );
        assert!(
            out.content.contains("value 42"),
            "{executor}: pip did not install: {out:?}\nservers: {}",
            world.servers_stderr()
        );
        assert!(
            out.content.contains(crate::egress_world::GIT_README.trim()),
            "{executor}: git did not clone: {out:?}"
        );
        assert!(
            out.content.contains("net=proxy]"),
            "{executor}: the marker says the network is the proxy: {out:?}"
        );
        assert!(!out.content.contains("[network: refused"), "{out:?}");
    }
    let requests = world.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("pypi.test GET /simple/dshprobe")),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("git.test GET /repo.git")),
        "{requests:?}"
    );
}

#[test]
fn a_host_not_allowed_gets_a_403_naming_it_the_result_says_so_and_nothing_reaches_it() {
    let Some(world) = world() else { return };
    let env = Env::new();
    let config = config(&world, "container", "");
    let out = bash(
        &env,
        &world,
        &config,
        "curl -sS -v -m 10 https://evil.test/ 2>&1 | grep -E '^< HTTP|curl:'; \
         curl -sS -m 10 http://evil.test/plain",
    );
    assert!(
        out.content
            .contains("< HTTP/1.1 403 Forbidden: refused evil.test:443 (not allowed)"),
        "{out:?}"
    );
    assert!(
        out.content
            .contains("dsh egress proxy refused evil.test:80 (not allowed)"),
        "{out:?}"
    );
    assert!(
        out.content
            .contains("[network: refused evil.test:443 (not allowed), evil.test:80 (not allowed)]"),
        "{out:?}"
    );
    let requests = world.requests();
    assert!(
        !requests.iter().any(|r| r.starts_with("evil.test")),
        "{requests:?}"
    );
    // The refusals are events, naming the run's call.
    let refused: Vec<serde_json::Value> = env
        .events()
        .into_iter()
        .filter(|e| e["event"] == "egress/connection" && e["decision"] == "refused")
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(
        refused.iter().all(|e| e["host"] == "evil.test"),
        "{refused:?}"
    );
    // `dsh stats` counts them per host.
    let stats = env.dsh().args(["stats", "--json"]).output().unwrap();
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["hosts"]["evil.test:443"]["refused"], 1, "{stats}");
    assert_eq!(stats["hosts"]["evil.test:80"]["refused"], 1, "{stats}");
}

#[test]
fn a_run_has_no_route_but_the_proxy_and_no_name_inside_or_literal_or_trick_gets_through() {
    let Some(world) = world() else { return };
    let env = Env::new();
    let address = world.address();
    for executor in ["container", "sandbox"] {
        let config = config(&world, executor, "");
        let script = format!(
            r#"{CLEAN}
probe() {{ printf '%s=' "$1"; shift; "$@" >/dev/null 2>&1 && echo reached || echo refused; }}
probe direct curl -sS -m 5 --noproxy '*' -k https://{address}/
probe dns /usr/bin/python3 -c 'import socket; socket.getaddrinfo("pypi.test", 443)'
probe udp /usr/bin/python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("{address}", 53))'
probe loop curl -sSf -m 5 http://loop.test/
probe meta curl -sSf -m 5 http://meta.test/latest/meta-data/
probe own curl -sSf -m 5 http://own.test/
probe literal curl -sSf -m 5 -k https://{address}/
probe userinfo curl -sSf -m 5 http://pypi.test@evil.test/
probe port curl -sSf -m 5 https://pypi.test:8443/simple/
probe allowed curl -sSf -m 5 https://other.test/
printf 'sni='; printf 'GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n' | timeout 10 openssl s_client -quiet -proxy 127.0.0.1:3128 -connect pypi.test:443 -servername evil.test 2>/dev/null | grep -q 'reached' && echo reached || echo refused
"#
        );
        let out = bash(&env, &world, &config, &script);
        for probe in [
            "direct", "dns", "udp", "loop", "meta", "own", "literal", "userinfo", "port", "sni",
        ] {
            assert!(
                out.content.contains(&format!("{probe}=refused")),
                "{executor}: {probe} got through: {out:?}"
            );
        }
        assert!(
            out.content.contains("allowed=reached"),
            "{executor}: {out:?}"
        );
        for line in [
            "loop.test:80 (resolves inside, to 127.0.0.1)",
            "meta.test:80 (resolves inside, to 169.254.169.254)",
            &format!("own.test:80 (resolves inside, to {})", world.host_side()),
            &format!("{address}:443 (not allowed)"),
            "evil.test:80 (not allowed)",
            "pypi.test:8443 (port not allowed)",
            "pypi.test:443 (TLS names evil.test)",
        ] {
            assert!(
                out.content.contains(line),
                "{executor}: no `{line}` in {out:?}"
            );
        }
    }
    let requests = world.requests();
    assert!(
        requests.iter().all(|r| r.starts_with("other.test")),
        "only the allowed request reached the world: {requests:?}"
    );
}

#[test]
fn a_run_opening_a_thousand_connections_is_bounded_and_another_run_is_unaffected() {
    let Some(world) = world() else { return };
    let env = Env::new();
    let config = config(&world, "container", "max_connections_per_run = 32");
    let server = McpServer::start_command(&env, dsh(&env, &world, &config));
    // Holds 1,000 connections open at once, each asking for a tunnel, and counts answers.
    let flood = r#"/usr/bin/python3 - <<'EOF'
import socket, collections
conns, answers = [], collections.Counter()
for _ in range(1000):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n")
    conns.append(s)
for s in conns:
    try:
        answers[s.recv(64).split(b" ")[1].decode()] += 1
    except Exception as error:
        answers[type(error).__name__] += 1
print("answers", dict(sorted(answers.items())))
EOF"#;
    let flooding = server.start_call(
        "bash",
        json!({"command": flood, "description": "flood", "timeoutMs": 120_000}),
    );
    std::thread::sleep(Duration::from_millis(500));
    let other = server.call_ok(
        "bash",
        json!({"command": "curl -sS -m 20 https://other.test/ && echo", "description": "other run"}),
    );
    assert!(other.contains("reached other.test"), "{other}");
    let flooded = flooding.wait(&server);
    let text = flooded.to_string();
    assert!(
        text.contains("'200': 32") && text.contains("'429': 968"),
        "32 tunnels (the limit), the rest 429: {text}"
    );
}

#[test]
fn a_credential_is_added_on_the_way_and_the_run_never_sees_it() {
    let Some(world) = world() else { return };
    let env = Env::new();
    let token = world.api_token().to_string();
    // The run looks for the token's second half (its command, which the event log keeps,
    // must not hold the whole token).
    let half = &token[token.len() / 2..];
    for executor in ["container", "sandbox"] {
        let config = config(&world, executor, "");
        let out = bash(
            &env,
            &world,
            &config,
            &format!(
                "curl -sS -m 10 https://api.test/whoami; echo; \
             curl -sS -m 10 -H 'Authorization: Bearer forged' https://api.test/whoami; echo; \
             env | grep -c '{half}'; \
             grep -l '{half}' /proc/[0-9]*/environ 2>/dev/null | wc -l; \
             grep -rl '{half}' $TMPDIR \"$SSL_CERT_FILE\" 2>/dev/null | wc -l; \
             cat \"$SSL_CERT_FILE\" | grep -c 'PRIVATE KEY'; \
             ls {state}/egress 2>&1 | head -1",
                state = env.state_dir().display(),
            ),
        );
        assert_eq!(
            out.content.matches("ok tester").count(),
            2,
            "the header was added (and the run's own replaced): {out:?}"
        );
        let lines: Vec<&str> = out.content.lines().collect();
        assert!(
        lines.windows(4).any(|w| w == ["0", "0", "0", "0"]),
        "the token is in no variable, environ or readable file, and the bundle has no key: {out:?}"
    );
        assert!(
            out.content.contains("No such file or directory"),
            "the CA's key is out of the run's sight: {out:?}"
        );
        assert!(!out.content.contains(&token), "{out:?}");
    }
    let key = std::fs::read_to_string(env.state_dir().join("egress/ca-key.pem")).unwrap();
    assert!(key.contains("PRIVATE KEY"));
    let events = serde_json::to_string(&env.events()).unwrap();
    assert!(!events.contains(&token), "an event holds the token");
    assert!(
        env.events()
            .iter()
            .any(|e| e["event"] == "egress/connection" && e["host"] == "api.test"),
        "the connection is an event"
    );
}

#[test]
fn a_runs_tunnels_end_with_the_run_and_an_unset_credential_refuses_its_host() {
    let Some(world) = world() else { return };
    let env = Env::new();
    let config = config(&world, "container", "");
    // A tunnel held open by a process that would outlive the shell; the run times out.
    let hold = r#"/usr/bin/python3 - <<'PY' &
import socket, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n")
print(s.recv(64).split(b"\r\n")[0].decode(), flush=True)
time.sleep(600)
PY
sleep 600"#;
    let args = json!({"command": hold, "description": "hold a tunnel", "timeoutMs": 3_000});
    let output = dsh(&env, &world, &config)
        .args(["call", "bash", &args.to_string(), "--json"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let out = CallOutput::parse(output);
    assert!(out.content.contains("HTTP/1.1 200"), "{out:?}");
    // The world's side of the tunnel is gone once the run is.
    let established = || {
        let listed = Command::new("ip")
            .args([
                "netns",
                "exec",
                world.netns(),
                "ss",
                "-Htn",
                "state",
                "established",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter(|line| line.contains(":443"))
            .count()
    };
    assert!(
        crate::support::wait_for(Duration::from_secs(3), || established() == 0),
        "a tunnel outlived its run"
    );

    // A credential whose variable dsh did not get: its host is refused, never reached.
    let args =
        json!({"command": "curl -sS -m 10 https://api.test/whoami", "description": "no key"});
    let output = env
        .dsh_configured(&config)
        .env_remove(AUTH_VARIABLE)
        .args(["call", "bash", &args.to_string(), "--json"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let out = CallOutput::parse(output);
    let line = format!("[network: refused api.test:443 ({AUTH_VARIABLE} not set)]");
    assert!(out.content.contains(&line), "{out:?}");
    assert!(
        !world.requests().iter().any(|r| r.starts_with("api.test")),
        "{:?}",
        world.requests()
    );
}

#[test]
fn a_terminal_with_a_network_keeps_it_across_a_plugin_reload_and_an_upgrade() {
    let Some(world) = world() else { return };
    let env = Env::new();
    // The terminal plugin from the plugins directory needs its grant.
    let config =
        config(&world, "container", "") + "\n[plugins.terminal]\ninterfaces = [\"terminal\"]\n";
    let server = McpServer::start_command(&env, dsh(&env, &world, &config));
    let opened = server.call_ok("terminal_open", json!({}));
    let term = opened
        .split_whitespace()
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened:?}"))
        .to_string();
    let reach = |round: &str| {
        let reply = server.call(
            "terminal_send",
            json!({
                "id": term,
                "input": format!("curl -sS -m 10 https://other.test/{round}; echo; echo done-{round}"),
                "wait": {"pattern": format!("done-{round}"), "timeout_ms": 20_000}
            }),
        );
        assert!(
            reply.text.contains("reached other.test"),
            "{round}: the terminal lost its network: {reply:?}"
        );
    };
    reach("before");
    // The terminal plugin is swapped for a copy of itself: a reload.
    // (A custom section appended makes it another version: a byte copy is the version
    // already serving, which a reload leaves alone.)
    let staged = env.plugins_dir().join("terminal.wasm.partial");
    let mut component = std::fs::read(crate::support::built_plugin("terminal")).unwrap();
    component.extend_from_slice(b"\x00\x0f\x08dsh-testreload");
    std::fs::write(&staged, component).unwrap();
    std::fs::rename(&staged, env.plugins_dir().join("terminal.wasm")).unwrap();
    // The running server's plugin list shows the copy in force (its source the plugins
    // directory).
    let swapped = || {
        let listed = env.dsh().args(["plugins", "--json"]).output().unwrap();
        let plugins: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap_or_default();
        plugins.as_array().is_some_and(|all| {
            all.iter().any(|p| {
                p["name"] == "terminal"
                    && p["status"] == "serving"
                    && p["source"]
                        .as_str()
                        .is_some_and(|s| s.contains("terminal.wasm"))
            })
        })
    };
    assert!(
        crate::support::wait_for(Duration::from_secs(30), swapped),
        "the terminal plugin was not reloaded: {}\n{}",
        String::from_utf8_lossy(
            &env.dsh()
                .args(["plugins", "--json"])
                .output()
                .unwrap()
                .stdout
        ),
        server.stderr()
    );
    reach("after-reload");
    let upgraded = env.dsh().arg("upgrade").output().unwrap();
    assert!(upgraded.status.success(), "{upgraded:?}");
    reach("after-upgrade");
    let requests = world.requests();
    for round in ["before", "after-reload", "after-upgrade"] {
        assert!(
            requests
                .iter()
                .any(|r| r == &format!("other.test GET /{round}")),
            "{round}: {requests:?}"
        );
    }
}

#[test]
fn an_idle_tunnel_is_closed_after_the_idle_timeout() {
    let Some(world) = world() else { return };
    let env = Env::new();
    let config = config(&world, "container", "idle_timeout_ms = 300");
    let idle = r#"/usr/bin/python3 - <<'PY'
import socket, time
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n")
print(s.recv(64).split(b"\r\n")[0].decode(), flush=True)
time.sleep(2)
s.settimeout(5)
print("after idle:", "closed" if s.recv(64) == b"" else "open")
PY"#;
    let out = bash(&env, &world, &config, idle);
    assert!(out.content.contains("HTTP/1.1 200"), "{out:?}");
    assert!(out.content.contains("after idle: closed"), "{out:?}");
}
