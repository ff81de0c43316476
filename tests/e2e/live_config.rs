//! Live configuration: `dsh serve` with a `dsh.toml` that the test edits while a client is
//! connected. A guard added to `[pipeline]` denies the next call and removing it allows
//! again; a file with a syntax error is refused (logged, shown by `dsh plugins`) while
//! the configuration in force keeps serving; a grant removed makes the next call of that
//! plugin fail naming it. Files are written both atomically (write + rename) and in
//! place, as editors do.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{unique_marker, Env};

/// How long a configuration change may take to reach calls.
const WITHIN: Duration = Duration::from_secs(20);

/// A `dsh serve` on stdio with a minimal MCP client in front of it.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: u64,
    stderr: PathBuf,
}

/// One `tools/call` result.
#[derive(Debug)]
struct Called {
    is_error: bool,
    text: String,
}

impl Server {
    fn start(mut command: Command, stderr: PathBuf) -> Server {
        let mut child = command
            .env("RUST_LOG", "dsh=info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if send.send(line).is_err() {
                    return;
                }
            }
        });
        let mut server = Server {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 1,
            stderr,
        };
        server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "live-config-test", "version": "0"}
            }),
        );
        server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        // As clients do: the catalog first (it is answered once the plugins the server
        // started with have loaded), so the tests' configuration changes come after.
        server.request("tools/list", json!({}));
        server
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and waits for its response (notifications are skipped); a
    /// JSON-RPC error is an error.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let response = self.respond(method, params);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// Sends a request and returns its whole response.
    fn respond(&mut self, method: &str, params: Value) -> Value {
        let id = self.start_request(method, params);
        self.response(method, id)
    }

    /// Sends a request without waiting: its id.
    fn start_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Waits for the response to request `id`.
    fn response(&mut self, method: &str, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => panic!("no answer to {method} within 60 s"),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "dsh serve closed stdout; stderr:\n{}",
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                ),
            };
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message;
            }
        }
    }

    /// A tool call; an unknown tool (a JSON-RPC error) is an error result whose text is
    /// `UNKNOWN_TOOL: ` and the error's message.
    fn call(&mut self, tool: &str, args: Value) -> Called {
        let response = self.respond("tools/call", json!({"name": tool, "arguments": args}));
        if let Some(error) = response.get("error") {
            return Called {
                is_error: true,
                text: format!(
                    "UNKNOWN_TOOL: {}",
                    error["message"].as_str().unwrap_or_default()
                ),
            };
        }
        let result = &response["result"];
        Called {
            is_error: result["isError"] == true,
            text: result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        }
    }

    /// Calls `tool` until `done` holds of the result, for up to [`WITHIN`].
    fn call_until(
        &mut self,
        tool: &str,
        args: Value,
        what: &str,
        done: impl Fn(&Called) -> bool,
    ) -> Called {
        let deadline = Instant::now() + WITHIN;
        loop {
            let called = self.call(tool, args.clone());
            if done(&called) {
                return called;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last result: {called:?}\nstderr:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Closing stdin ends `dsh serve`.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch environment whose `dsh.toml` lives in its own directory.
struct Setup {
    env: Env,
    config: PathBuf,
}

impl Setup {
    fn new(plugins: &[(&str, &str)], config: &str) -> Setup {
        let env = Env::new();
        env.add_plugins(plugins);
        let dir = env.dir.path().join("conf");
        std::fs::create_dir_all(&dir).unwrap();
        let setup = Setup {
            config: dir.join("dsh.toml"),
            env,
        };
        std::fs::write(&setup.config, config).unwrap();
        setup
    }

    fn serve(&self, environment: &[(&str, &str)]) -> Server {
        self.serve_with(environment, &[])
    }

    /// `dsh serve ARGS...` with this setup's configuration and plugin directory.
    fn serve_with(&self, environment: &[(&str, &str)], args: &[&str]) -> Server {
        let mut command = self.env.dsh();
        command
            .arg("--config")
            .arg(&self.config)
            .arg("--plugins")
            .arg(self.env.plugins_dir())
            .arg("serve")
            .args(args)
            .envs(environment.iter().copied());
        let stderr = format!("serve-{}.stderr", unique_marker());
        Server::start(command, self.env.dir.path().join(stderr))
    }

    /// Replaces the file as atomic writers do: a new file renamed over it.
    fn write_atomically(&self, text: &str) {
        let partial = self
            .config
            .with_file_name(format!(".dsh.toml.{}", unique_marker()));
        std::fs::write(&partial, text).unwrap();
        std::fs::rename(&partial, &self.config).unwrap();
    }

    /// Rewrites the file in place: truncated and written through the same inode.
    fn write_in_place(&self, text: &str) {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&self.config)
            .unwrap();
        file.write_all(text.as_bytes()).unwrap();
    }

    /// `dsh plugins` (text) against the running server.
    fn plugins_text(&self) -> String {
        let output = self.env.dsh().arg("plugins").output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `dsh plugins --json` against the running server: the status of plugin `name`.
    fn plugin_status(&self, name: &str) -> Value {
        let output = self.env.dsh().args(["plugins", "--json"]).output().unwrap();
        let plugins: Value = serde_json::from_slice(&output.stdout).unwrap();
        plugins
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "live config test"})
}

/// Waits for `condition`, for up to [`WITHIN`].
fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn path_in(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

#[test]
fn a_guard_added_to_the_pipeline_denies_the_next_call_and_removing_it_allows_again() {
    let setup = Setup::new(&[], "");
    let mut server = setup.serve(&[]);
    let marker = unique_marker();
    // A program word starting with `mkfs.` is what deny_destructive refuses; run, it is
    // just a command that does not exist.
    let command = format!("mkfs.dshtest{marker} 2>/dev/null; echo ran-{marker}");
    let ran = server.call("bash", bash(&command));
    assert!(
        !ran.is_error && ran.text.contains(&format!("ran-{marker}")),
        "{ran:?}"
    );

    // Added by an atomic write: the embedded guard is loaded and the next call denied.
    setup.write_atomically("[pipeline]\nguards = [\"deny_destructive\"]\n");
    let denied = server.call_until("bash", bash(&command), "the guard to deny", |c| c.is_error);
    assert!(
        denied
            .text
            .starts_with("DENIED: denied by guard deny_destructive"),
        "{denied:?}"
    );
    let harmless = server.call("bash", bash("echo still fine"));
    assert!(!harmless.is_error, "{harmless:?}");
    assert!(
        setup.plugin_status("deny_destructive")["status"] == "serving",
        "{}",
        setup.plugins_text()
    );

    // Removed by a write in place: the next call runs again.
    setup.write_in_place("# no guards\n");
    let allowed = server.call_until("bash", bash(&command), "the guard to go", |c| !c.is_error);
    assert!(
        allowed.text.contains(&format!("ran-{marker}")),
        "{allowed:?}"
    );
    wait_for("deny_destructive to be unloaded", || {
        setup.plugin_status("deny_destructive").is_null()
    });
    assert!(
        server.log().contains("dsh.toml reloaded"),
        "{}",
        server.log()
    );
}

#[test]
fn a_test_guard_added_in_place_denies_and_its_order_and_settings_apply_live() {
    let setup = Setup::new(&[("echo", "echo"), ("deny_echo", "test_guard")], "");
    let mut server = setup.serve(&[]);
    let echo = json!({"text": "hi"});
    assert_eq!(server.call("echo", echo.clone()).text, "hi");

    let denying = "[pipeline]\nguards = [\"deny_echo\"]\n[plugins.deny_echo.settings]\nverdict = \"deny\"\ntools = \"echo\"\nreason = \"no echo today\"\n";
    setup.write_in_place(denying);
    let denied = server.call_until("echo", echo.clone(), "deny_echo to deny", |c| c.is_error);
    assert_eq!(
        denied.text,
        "DENIED: denied by guard deny_echo: no echo today"
    );

    // Its settings changed (a relink with the new settings): it allows.
    setup.write_atomically(&denying.replace("verdict = \"deny\"", "verdict = \"allow\""));
    let allowed = server.call_until("echo", echo, "deny_echo to allow", |c| !c.is_error);
    assert_eq!(allowed.text, "hi");
}

#[test]
fn a_syntax_error_is_refused_and_the_configuration_in_force_keeps_serving() {
    let setup = Setup::new(&[], "[pipeline]\nguards = [\"deny_destructive\"]\n");
    let mut server = setup.serve(&[]);
    let marker = unique_marker();
    let command = format!("mkfs.dshtest{marker} 2>/dev/null; echo ran-{marker}");
    let denied = server.call("bash", bash(&command));
    assert!(denied.is_error, "{denied:?}");

    // A broken file that would drop the guard if it were read at all.
    setup.write_in_place("[pipeline\nguards = []\n");
    wait_for("the refusal in `dsh plugins`", || {
        setup.plugins_text().contains("config: REFUSED")
    });
    let listing = setup.plugins_text();
    assert!(
        listing.contains(&setup.config.display().to_string()) && listing.contains("invalid"),
        "{listing}"
    );
    assert!(
        server.log().contains("dsh.toml refused"),
        "the refusal is logged: {}",
        server.log()
    );
    let still = server.call("bash", bash(&command));
    assert!(
        still.is_error && still.text.contains("deny_destructive"),
        "the old configuration keeps serving: {still:?}"
    );

    // A semantic error (a gate rule's bad regex) is refused the same way.
    setup.write_atomically(
        "[[gate.rules]]\naction = \"deny\"\narg = \"command\"\npattern = \"(\"\n",
    );
    wait_for("the regex error in `dsh plugins`", || {
        setup.plugins_text().contains("gate.rules[0].pattern")
    });
    assert!(server.call("bash", bash(&command)).is_error);

    // Fixed: it applies, and the status says it serves.
    setup.write_atomically(
        "[[gate.rules]]\naction = \"deny\"\ntool = \"bash\"\narg = \"command\"\npattern = \"forbidden-word\"\nreason = \"not that word\"\n",
    );
    let ran = server.call_until("bash", bash(&command), "the fixed file to apply", |c| {
        !c.is_error
    });
    assert!(ran.text.contains(&format!("ran-{marker}")), "{ran:?}");
    let gated = server.call("bash", bash("echo forbidden-word"));
    assert!(
        gated.is_error && gated.text.contains("not that word"),
        "the gate rule applies live: {gated:?}"
    );
    assert!(
        !setup.plugins_text().contains("REFUSED"),
        "{}",
        setup.plugins_text()
    );
}

#[test]
fn a_grant_removed_makes_the_next_call_of_that_plugin_fail_naming_it() {
    let setup = Setup::new(
        &[("prober", "prober")],
        "[plugins.prober]\nenv = [\"DSH_TEST_GRANTED\"]\n",
    );
    let granted_dir = setup.env.dir.path().join("granted");
    std::fs::create_dir_all(&granted_dir).unwrap();
    std::fs::write(granted_dir.join("note.txt"), "inside").unwrap();
    let mut server = setup.serve(&[("DSH_TEST_GRANTED", "granted-value")]);
    let env_call = json!({"key": "DSH_TEST_GRANTED"});
    let seen = server.call("env", env_call.clone());
    assert_eq!(
        (seen.is_error, seen.text.as_str()),
        (false, "granted-value")
    );

    // The env grant removed, an fs grant added (atomic write).
    setup.write_atomically(&format!(
        "[plugins.prober]\nfs = [{{ path = {:?}, mode = \"ro\" }}]\n",
        granted_dir.display().to_string()
    ));
    let hidden = server.call_until("env", env_call.clone(), "the env grant to go", |c| {
        c.is_error
    });
    assert!(
        hidden.text.starts_with("DENIED") && hidden.text.contains("DSH_TEST_GRANTED"),
        "{hidden:?}"
    );
    let note = json!({"path": path_in(&granted_dir, "note.txt")});
    let read = server.call("read_file", note.clone());
    assert_eq!((read.is_error, read.text.as_str()), (false, "inside"));

    // The fs grant removed in place: the next read fails, naming the path.
    setup.write_in_place("[plugins.prober]\n");
    let denied = server.call_until("read_file", note, "the fs grant to go", |c| c.is_error);
    assert!(
        denied.text.starts_with("DENIED")
            && denied.text.contains(&path_in(&granted_dir, "note.txt")),
        "{denied:?}"
    );
}

#[test]
fn an_interface_grant_removed_withdraws_the_plugin_until_it_is_granted_again() {
    let setup = Setup::new(&[], "");
    let mut server = setup.serve(&[]);
    assert!(!server.call("bash", bash("true")).is_error);

    setup.write_atomically("[plugins.bash]\ninterfaces = [\"log\"]\n");
    let gone = server.call_until("bash", bash("true"), "bash to be withdrawn", |c| c.is_error);
    assert!(gone.text.starts_with("UNKNOWN_TOOL"), "{gone:?}");
    let status = setup.plugin_status("bash");
    assert_eq!(status["status"], "refused", "{status}");
    assert!(
        status["reason"]
            .as_str()
            .unwrap()
            .contains("`dsh:plugin/process`"),
        "the refusal names the grant: {status}"
    );

    setup.write_in_place("[plugins.bash]\ninterfaces = [\"process\"]\n");
    let back = server.call_until("bash", bash("echo back"), "bash to serve again", |c| {
        !c.is_error
    });
    assert!(back.text.contains("back"), "{back:?}");
}

#[test]
fn settings_bound_at_start_are_named_and_wait_for_a_restart() {
    let setup = Setup::new(&[], "[limits]\nmax_retries = 1\n");
    let server = setup.serve(&[]);
    setup.write_atomically("[limits]\nmax_retries = 2\n[serve]\nowner_grace_ms = 5000\n");
    wait_for("the restart note in `dsh plugins`", || {
        setup
            .plugins_text()
            .contains("takes effect at restart: serve.owner_grace_ms")
    });
    assert!(
        server.log().contains("take effect when dsh serve restarts"),
        "{}",
        server.log()
    );
}

#[test]
fn a_call_in_flight_finishes_under_the_configuration_it_started_with() {
    let setup = Setup::new(&[], "[pipeline]\nfilters = [\"redact_secrets\"]\n");
    let mut server = setup.serve(&[]);
    let go = setup.env.dir.path().join("go");
    // The call waits (for at most 30 s) for the test to say go, then prints a key.
    let command = format!(
        "for i in $(seq 600); do [ -e {go} ] && break; sleep 0.05; done; echo aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        go = go.display()
    );
    let id = server.start_request(
        "tools/call",
        json!({"name": "bash", "arguments": bash(&command)}),
    );
    // While it runs, the filter is taken out of the configuration and unloaded.
    setup.write_atomically("# no filters\n");
    wait_for("redact_secrets to be unloaded", || {
        setup.plugin_status("redact_secrets").is_null()
    });
    std::fs::write(&go, "").unwrap();
    let response = server.response("tools/call", id);
    let text = response["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        !text.contains("AKIAIOSFODNN7EXAMPLE") && text.contains("[REDACTED:"),
        "the call that started filtered is filtered: {response}"
    );
    // The next call runs under the new configuration.
    let next = server.call(
        "bash",
        bash("echo aws_access_key_id = AKIAIOSFODNN7EXAMPLE"),
    );
    assert!(next.text.contains("AKIAIOSFODNN7EXAMPLE"), "{next:?}");
}

#[test]
fn limits_and_scopes_apply_to_the_next_call() {
    let scoped = "[scopes]\nnarrow = [\"bash\"]\n";
    let setup = Setup::new(&[], scoped);
    let mut server = setup.serve_with(&[], &["--scope", "narrow"]);
    let long = bash("head -c 5000 /dev/zero | tr '\\0' x");
    let whole = server.call("bash", long.clone());
    assert!(
        !whole.is_error && whole.text.contains(&"x".repeat(5000)),
        "{whole:?}"
    );

    setup.write_atomically(&format!("{scoped}[limits]\noutput_budget_bytes = 1000\n"));
    let cut = server.call_until("bash", long, "the smaller budget", |c| {
        c.text.contains("bytes omitted")
    });
    assert!(cut.text.len() < 1500, "{}", cut.text.len());

    setup.write_in_place("[scopes]\nnarrow = [\"job_*\"]\n");
    let hidden = server.call_until("bash", bash("true"), "bash to leave the scope", |c| {
        c.is_error
    });
    assert!(hidden.text.starts_with("UNKNOWN_TOOL"), "{hidden:?}");
    let listed = server.request("tools/list", json!({}));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"bash") && names.contains(&"job_list"),
        "{names:?}"
    );
}

#[test]
fn process_jobs_and_terminal_settings_are_named_as_waiting_for_a_restart() {
    let setup = Setup::new(&[], "");
    let server = setup.serve(&[]);
    setup.write_atomically(
        "[process]\nkill_grace_ms = 1000\n[jobs]\nmax_running_per_owner = 3\n[terminal]\nmax_sessions = 5\n",
    );
    let noted = "takes effect at restart: jobs.max_running_per_owner, process.kill_grace_ms, terminal.max_sessions";
    wait_for("the restart note naming all three", || {
        setup.plugins_text().contains(noted)
    });
    assert!(
        server.log().contains("take effect when dsh serve restarts"),
        "{}",
        server.log()
    );
}

#[test]
fn with_no_watch_a_changed_dsh_toml_is_not_applied() {
    let setup = Setup::new(&[], "");
    let mut unwatched = setup.serve_with(&[], &["--no-watch"]);
    let mut watched = setup.serve(&[]);
    let marker = unique_marker();
    let command = format!("echo ran-{marker}");
    setup.write_atomically(
        "[[gate.rules]]\naction = \"deny\"\ntool = \"bash\"\nreason = \"no bash now\"\n",
    );
    // The server that watches applies it; the one that does not, started first and
    // given the same change, still runs bash.
    let denied = watched.call_until("bash", bash(&command), "the gate to deny", |c| c.is_error);
    assert!(denied.text.contains("no bash now"), "{denied:?}");
    let ran = unwatched.call("bash", bash(&command));
    assert!(
        !ran.is_error && ran.text.contains(&format!("ran-{marker}")),
        "{ran:?}"
    );
    assert!(
        !unwatched.log().contains("dsh.toml reloaded"),
        "{}",
        unwatched.log()
    );
}
