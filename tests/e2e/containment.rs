//! Attacks on process containment: every run (a foreground `bash` call, a background job,
//! a terminal session) is contained, in `cgroup` and in `subreaper` mode, so what it
//! started dies with it, escapees included (`setsid cmd &`, `setsid -f`, a double-forking
//! daemon, `nohup … & disown`, `( cmd & )`), when the call returns, on `job_kill`, on
//! `terminal_close` and when the host dies (SIGKILL, SIGTERM, SIGHUP, SIGINT, stdin EOF);
//! runs end one by one without touching each other; in cgroup mode an escapee without
//! the run's environment dies too, a fork bomb is held by the run's pids limit and ends
//! with it, a run past its memory limit is killed, and dsh's cgroup nodes go with the
//! host. An owner gone past its grace period is tested over HTTP in
//! `tests/mcp/test_containment.py`.
//!
//! A process counts as alive when /proc/PID/stat says it is not a zombie (PID 1 here does
//! not reap, so killed orphans can stay zombies). Every check polls /proc with a deadline.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::mcp_stdio::McpServer;
use crate::support::{unique_marker, Env};

/// "Within a second": how long a kill may take to show in /proc.
const GONE_WITHIN: Duration = Duration::from_millis(1000);
/// How long the escapees of a command may take to appear.
const PRESENT_WITHIN: Duration = Duration::from_secs(20);

const CGROUP: &str = "cgroup";
const SUBREAPER: &str = "subreaper";

/// A `dsh.toml` forcing the containment `mode`.
fn config(mode: &str) -> String {
    format!("[process]\ncontainment = \"{mode}\"\n")
}

/// A unique marker for one test's processes: `sleep 3<marker>K` (a valid duration).
/// Dropping it SIGKILLs whatever still carries it, so a failing test leaves nothing.
struct Marker(String);

impl Marker {
    fn new() -> Marker {
        Marker(unique_marker())
    }

    /// The argument of the `k`th `sleep` of this test.
    fn sleep(&self, k: u32) -> String {
        format!("3{}{k}", self.0)
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        for (pid, _) in alive_with(&self.0) {
            // SAFETY: kill(2) on a pid whose command line carries this test's marker.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Live (not zombie) processes, other than this test process, whose command line
/// contains `marker`.
fn alive_with(marker: &str) -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let (Ok(cmdline), Ok(stat)) = (
            std::fs::read(entry.path().join("cmdline")),
            std::fs::read_to_string(entry.path().join("stat")),
        ) else {
            continue;
        };
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?");
        if state == "Z" {
            continue;
        }
        let text = String::from_utf8_lossy(&cmdline)
            .replace('\0', " ")
            .trim()
            .to_string();
        if text.contains(marker) {
            found.push((pid, text));
        }
    }
    found
}

/// Waits until a live `sleep ARG` runs for every `ARG` in `args`.
fn wait_until_running(marker: &Marker, args: &[String], what: &str) {
    let deadline = Instant::now() + PRESENT_WITHIN;
    loop {
        let alive = alive_with(&marker.0);
        let missing: Vec<&String> = args
            .iter()
            .filter(|arg| {
                let want = format!("sleep {arg}");
                !alive.iter().any(|(_, cmdline)| *cmdline == want)
            })
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: `sleep` {missing:?} never started within {PRESENT_WITHIN:?}; alive: {alive:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that within `GONE_WITHIN` no live process carries the marker.
fn assert_nothing_left(marker: &Marker, what: &str) {
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let alive = alive_with(&marker.0);
        if alive.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still alive {GONE_WITHIN:?} later: {alive:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One line of shell that starts five escapees, each a `sleep` of its own:
/// `setsid cmd &`, `setsid -f cmd`, a double-forking daemon (fork, setsid, fork),
/// `nohup cmd & disown` and `( cmd & )`. Returns the line and the five sleep arguments.
fn escapes(marker: &Marker, first: u32) -> (String, Vec<String>) {
    let args: Vec<String> = (first..first + 5).map(|k| marker.sleep(k)).collect();
    let line = format!(
        "setsid sleep {a} >/dev/null 2>&1 & \
         setsid -f sleep {b} >/dev/null 2>&1; \
         python3 -c 'import os; os.fork()==0 and (os.setsid(), os.fork()==0 and os.execvp(\"sleep\", [\"sleep\", \"{c}\"]))' >/dev/null 2>&1; \
         nohup sleep {d} >/dev/null 2>&1 & disown; \
         ( sleep {e} >/dev/null 2>&1 & )",
        a = args[0],
        b = args[1],
        c = args[2],
        d = args[3],
        e = args[4],
    );
    (line, args)
}

/// The `N` of the `started background job bash-N` a background `bash` answers.
fn job_id(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c == ',' || c == ':')
        .find(|word| word.starts_with("bash-"))
        .unwrap_or_else(|| panic!("no job id in {text:?}"))
        .to_string()
}

/// The `term-N` a `terminal_open` answers.
fn terminal_id(text: &str) -> String {
    text.split_whitespace()
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no terminal id in {text:?}"))
        .to_string()
}

/// Types `line` into terminal `id` and returns once it has printed `launched` (spelled
/// apart in the input, so the echo of the typed line does not match).
fn send_to_terminal(server: &McpServer, id: &str, line: &str) {
    server.call_ok(
        "terminal_send",
        json!({
            "id": id,
            "input": format!("{line}; echo laun\"\"ched"),
            "wait": {"pattern": "launched", "timeout_ms": 20000},
        }),
    );
}

// --------------------------------------------------------------------------- foreground

fn escapes_from_a_foreground_call_die_when_it_returns(mode: &str) {
    let env = Env::new();
    let marker = Marker::new();
    let (line, _) = escapes(&marker, 1);
    // The command waits until all five escapees run, so the call returns with them alive.
    let command = format!(
        "{line}; for i in $(seq 400); do \
         [ \"$(pgrep -fc '^sleep 3{m}')\" -ge 5 ] && break; sleep 0.05; done; \
         echo \"escaped: $(pgrep -fc '^sleep 3{m}')\"",
        m = marker.0
    );
    let out = env.call_configured(
        &config(mode),
        "bash",
        &json!({"command": command, "description": "escape"}),
        &[],
    );
    assert_eq!(out.code, None, "{out:?}");
    assert!(
        out.content.contains("escaped: 5"),
        "the escapees did not all start: {out:?}"
    );
    assert_nothing_left(
        &marker,
        &format!("{mode}: after the foreground call returned"),
    );
}

#[test]
fn escapes_from_a_foreground_call_die_when_it_returns_in_cgroup_mode() {
    escapes_from_a_foreground_call_die_when_it_returns(CGROUP);
}

#[test]
fn escapes_from_a_foreground_call_die_when_it_returns_in_subreaper_mode() {
    escapes_from_a_foreground_call_die_when_it_returns(SUBREAPER);
}

// --------------------------------------------------------------------------- background job

fn escapes_from_a_killed_job_die_with_it(mode: &str) {
    let env = Env::new();
    let marker = Marker::new();
    let server = McpServer::start(&env, &config(mode));
    let (line, mut args) = escapes(&marker, 1);
    args.push(marker.sleep(0));
    let started = server.call_ok(
        "bash",
        json!({
            "command": format!("{line}; sleep {}", marker.sleep(0)),
            "description": "escape from a job",
            "run_in_background": true,
        }),
    );
    let id = job_id(&started);
    wait_until_running(&marker, &args, "the job");
    server.call_ok("job_kill", json!({"id": id}));
    assert_nothing_left(&marker, &format!("{mode}: after job_kill {id}"));
}

#[test]
fn escapes_from_a_killed_job_die_with_it_in_cgroup_mode() {
    escapes_from_a_killed_job_die_with_it(CGROUP);
}

#[test]
fn escapes_from_a_killed_job_die_with_it_in_subreaper_mode() {
    escapes_from_a_killed_job_die_with_it(SUBREAPER);
}

// --------------------------------------------------------------------------- terminal

fn escapes_from_a_closed_terminal_die_with_it(mode: &str) {
    let env = Env::new();
    let marker = Marker::new();
    let server = McpServer::start(&env, &config(mode));
    let id = terminal_id(&server.call_ok("terminal_open", json!({})));
    let (line, args) = escapes(&marker, 1);
    send_to_terminal(&server, &id, &line);
    wait_until_running(&marker, &args, "the terminal");
    server.call_ok("terminal_close", json!({"id": id}));
    assert_nothing_left(&marker, &format!("{mode}: after terminal_close {id}"));
}

#[test]
fn escapes_from_a_closed_terminal_die_with_it_in_cgroup_mode() {
    escapes_from_a_closed_terminal_die_with_it(CGROUP);
}

#[test]
fn escapes_from_a_closed_terminal_die_with_it_in_subreaper_mode() {
    escapes_from_a_closed_terminal_die_with_it(SUBREAPER);
}

// --------------------------------------------------------------------------- host death

/// How the host dies.
#[derive(Clone, Copy, Debug)]
enum Death {
    Signal(i32),
    StdinEof,
}

/// `dsh serve` with a foreground call in flight, a background job and a terminal, each
/// having started a `setsid` escapee; then the host dies: nothing of theirs is alive a
/// second later.
fn everything_dies_with_the_host(mode: &str, death: Death) {
    everything_under_an_executor_dies_with_the_host(mode, death, "");
}

/// [`everything_dies_with_the_host`] with `executor_config` added to the configuration.
fn everything_under_an_executor_dies_with_the_host(
    mode: &str,
    death: Death,
    executor_config: &str,
) {
    let env = Env::new();
    let marker = Marker::new();
    let mut server = McpServer::start(&env, &format!("{}{executor_config}", config(mode)));
    let running: Vec<String> = (1..=5).map(|k| marker.sleep(k)).collect();

    let _in_flight = server.start_call(
        "bash",
        json!({
            "command": format!("(setsid sleep {} >/dev/null 2>&1 &); sleep {}", running[0], running[1]),
            "description": "left running",
        }),
    );
    server.call_ok(
        "bash",
        json!({
            "command": format!("setsid sleep {} >/dev/null 2>&1 & sleep {}", running[2], running[3]),
            "description": "a job",
            "run_in_background": true,
        }),
    );
    let terminal = terminal_id(&server.call_ok("terminal_open", json!({})));
    send_to_terminal(
        &server,
        &terminal,
        &format!("setsid -f sleep {} >/dev/null 2>&1", running[4]),
    );
    wait_until_running(&marker, &running, "before the host died");

    if mode == CGROUP {
        let nodes = own_cgroup_nodes(server.pid());
        assert!(
            nodes.iter().any(|node| node.exists()),
            "dsh serve made none of the cgroup nodes {nodes:?}"
        );
    }
    match death {
        Death::Signal(signal) => server.signal(signal),
        Death::StdinEof => server.close_stdin(),
    }
    assert_nothing_left(&marker, &format!("{mode}: after {death:?} of dsh serve"));
    if mode == CGROUP {
        assert_no_cgroup_node_left(server.pid(), death);
    }
    if !matches!(death, Death::Signal(libc::SIGKILL)) {
        assert!(
            server.wait_exit(Duration::from_secs(10)).is_some(),
            "dsh serve did not exit after {death:?}\n{}",
            server.stderr()
        );
    }
}

/// The cgroup nodes dsh (a child of this test, so in this test's cgroups) would make for
/// itself: `MOUNT/OWN/dsh-PID` in the v2 hierarchy and in the v1 `pids` and `memory` ones.
fn own_cgroup_nodes(dsh: i32) -> Vec<std::path::PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mut nodes = Vec::new();
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let mounts: &[&str] = match controllers {
            "" => &["/sys/fs/cgroup/unified", "/sys/fs/cgroup"],
            "pids" => &["/sys/fs/cgroup/pids"],
            "memory" => &["/sys/fs/cgroup/memory"],
            _ => &[],
        };
        for mount in mounts {
            let base = format!("{mount}{}", path.trim_end_matches('/'));
            if std::path::Path::new(&base).join("cgroup.procs").exists() {
                nodes.push(std::path::PathBuf::from(format!("{base}/dsh-{dsh}")));
            }
        }
    }
    nodes
}

/// Asserts that within `GONE_WITHIN` dsh's cgroup nodes are removed.
fn assert_no_cgroup_node_left(dsh: i32, death: Death) {
    let nodes = own_cgroup_nodes(dsh);
    assert!(!nodes.is_empty(), "no cgroup hierarchy found for this test");
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let left: Vec<_> = nodes.iter().filter(|node| node.exists()).collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {death:?} of dsh serve its cgroup nodes are still there: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn everything_dies_with_the_host_on_sigkill_in_cgroup_mode() {
    everything_dies_with_the_host(CGROUP, Death::Signal(libc::SIGKILL));
}

#[test]
fn everything_in_containers_dies_with_the_host_on_sigkill() {
    if !crate::container_executor::can_run() {
        return;
    }
    everything_under_an_executor_dies_with_the_host(
        CGROUP,
        Death::Signal(libc::SIGKILL),
        "[process.executor]\ndefault = \"container\"\n",
    );
}

#[test]
fn everything_dies_with_the_host_on_sigkill_in_subreaper_mode() {
    everything_dies_with_the_host(SUBREAPER, Death::Signal(libc::SIGKILL));
}

#[test]
fn everything_dies_with_the_host_on_sigterm() {
    everything_dies_with_the_host(CGROUP, Death::Signal(libc::SIGTERM));
}

#[test]
fn everything_dies_with_the_host_on_sighup() {
    everything_dies_with_the_host(CGROUP, Death::Signal(libc::SIGHUP));
}

#[test]
fn everything_dies_with_the_host_on_sigint() {
    everything_dies_with_the_host(CGROUP, Death::Signal(libc::SIGINT));
}

#[test]
fn everything_dies_with_the_host_on_stdin_eof() {
    everything_dies_with_the_host(CGROUP, Death::StdinEof);
}

#[test]
fn everything_dies_with_the_host_on_sigterm_in_subreaper_mode() {
    everything_dies_with_the_host(SUBREAPER, Death::Signal(libc::SIGTERM));
}

#[test]
fn everything_dies_with_the_host_on_stdin_eof_in_subreaper_mode() {
    everything_dies_with_the_host(SUBREAPER, Death::StdinEof);
}

#[test]
fn everything_dies_with_the_host_on_sighup_in_subreaper_mode() {
    everything_dies_with_the_host(SUBREAPER, Death::Signal(libc::SIGHUP));
}

#[test]
fn everything_dies_with_the_host_on_sigint_in_subreaper_mode() {
    everything_dies_with_the_host(SUBREAPER, Death::Signal(libc::SIGINT));
}

// --------------------------------------------------------------------------- runs apart

/// Runs are killed one by one: a job killed, a foreground call returning and a terminal
/// closed each take their own escapees and nothing of the runs still going.
fn one_runs_end_leaves_the_other_runs_alone(mode: &str) {
    let env = Env::new();
    let server = McpServer::start(&env, &config(mode));
    let (kept, killed, foreground, terminal) =
        (Marker::new(), Marker::new(), Marker::new(), Marker::new());

    let kept_sleeps = vec![kept.sleep(0), kept.sleep(1)];
    let kept_job = job_id(&server.call_ok(
        "bash",
        json!({
            "command": format!("setsid sleep {} >/dev/null 2>&1 & sleep {}", kept_sleeps[1], kept_sleeps[0]),
            "description": "the job that stays",
            "run_in_background": true,
        }),
    ));
    let term = terminal_id(&server.call_ok("terminal_open", json!({})));
    send_to_terminal(
        &server,
        &term,
        &format!("setsid -f sleep {} >/dev/null 2>&1", terminal.sleep(1)),
    );
    wait_until_running(&kept, &kept_sleeps, "the job that stays");
    wait_until_running(&terminal, &[terminal.sleep(1)], "the terminal");

    let (line, mut killed_sleeps) = escapes(&killed, 1);
    killed_sleeps.push(killed.sleep(0));
    let killed_job = job_id(&server.call_ok(
        "bash",
        json!({
            "command": format!("{line}; sleep {}", killed.sleep(0)),
            "description": "the job that is killed",
            "run_in_background": true,
        }),
    ));
    wait_until_running(&killed, &killed_sleeps, "the job that is killed");
    server.call_ok("job_kill", json!({"id": killed_job}));
    assert_nothing_left(&killed, &format!("{mode}: after job_kill {killed_job}"));

    let (line, _) = escapes(&foreground, 1);
    let out = server.call_ok(
        "bash",
        json!({
            "command": format!(
                "{line}; for i in $(seq 400); do \
                 [ \"$(pgrep -fc '^sleep 3{m}')\" -ge 5 ] && break; sleep 0.05; done; \
                 echo \"escaped: $(pgrep -fc '^sleep 3{m}')\"",
                m = foreground.0
            ),
            "description": "escape and return",
        }),
    );
    assert!(out.contains("escaped: 5"), "{out:?}");
    assert_nothing_left(&foreground, &format!("{mode}: after the foreground call"));

    server.call_ok("terminal_close", json!({"id": term}));
    assert_nothing_left(&terminal, &format!("{mode}: after terminal_close {term}"));

    // The first job and its escapee saw all of it and are still running.
    let alive = alive_with(&kept.0);
    for sleep in &kept_sleeps {
        assert!(
            alive
                .iter()
                .any(|(_, cmdline)| *cmdline == format!("sleep {sleep}")),
            "{mode}: `sleep {sleep}` of {kept_job} died with another run; alive: {alive:?}"
        );
    }
    server.call_ok("job_kill", json!({"id": kept_job}));
    assert_nothing_left(&kept, &format!("{mode}: after job_kill {kept_job}"));
}

#[test]
fn one_runs_end_leaves_the_other_runs_alone_in_cgroup_mode() {
    one_runs_end_leaves_the_other_runs_alone(CGROUP);
}

#[test]
fn one_runs_end_leaves_the_other_runs_alone_in_subreaper_mode() {
    one_runs_end_leaves_the_other_runs_alone(SUBREAPER);
}

/// The subreaper mode follows a run by a variable in its environment; the cgroup mode
/// does not need it: an escapee that drops the variable, or its whole environment, dies
/// with its run all the same.
#[test]
fn an_escapee_without_the_runs_environment_dies_with_it_in_cgroup_mode() {
    let env = Env::new();
    let marker = Marker::new();
    let command = format!(
        "env -i setsid -f sleep {a} >/dev/null 2>&1; \
         env -u DSH_RUN setsid -f sleep {b} >/dev/null 2>&1; \
         for i in $(seq 400); do \
         [ \"$(pgrep -fc '^sleep 3{m}')\" -ge 2 ] && break; sleep 0.05; done; \
         echo \"escaped: $(pgrep -fc '^sleep 3{m}')\"",
        a = marker.sleep(1),
        b = marker.sleep(2),
        m = marker.0
    );
    let out = env.call_configured(
        &config(CGROUP),
        "bash",
        &json!({"command": command, "description": "escape without the environment"}),
        &[],
    );
    assert!(out.content.contains("escaped: 2"), "{out:?}");
    assert_nothing_left(&marker, "cgroup: after the foreground call returned");
}

// --------------------------------------------------------------------------- memory

/// Prints `PATH=VALUE` for the memory limit of the command's own cgroup: v2 `memory.max`
/// (at /sys/fs/cgroup/unified or /sys/fs/cgroup) and v1 `memory.limit_in_bytes`.
const READ_OWN_MEMORY_MAX: &str = r#"v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
v1=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
for f in "/sys/fs/cgroup/unified$v2/memory.max" "/sys/fs/cgroup$v2/memory.max" "/sys/fs/cgroup/memory$v1/memory.limit_in_bytes"; do
  [ -f "$f" ] && echo "$f=$(cat "$f")"
done
true"#;

#[test]
fn a_run_past_its_memory_limit_is_killed_and_the_host_answers_the_next_call() {
    let env = Env::new();
    let server = McpServer::start(
        &env,
        "[process]\ncontainment = \"cgroup\"\nmemory_max_mb = 32\n",
    );
    let seen = server.call_ok(
        "bash",
        json!({"command": READ_OWN_MEMORY_MAX, "description": "read own memory limit"}),
    );
    assert!(
        seen.lines()
            .any(|line| line.contains("/dsh-") && line.ends_with("=33554432")),
        "the run's own cgroup has no 32 MiB memory limit: {seen:?}"
    );

    // 100 MiB, every page written.
    let out = server.call_ok(
        "bash",
        json!({
            "command": "python3 -c 'x = b\"x\" * (100 << 20); print(len(x))'; echo \"python: $?\"",
            "description": "allocate 100 MiB",
        }),
    );
    assert!(
        out.contains("python: 137"),
        "the 100 MiB allocation was not killed (SIGKILL, 137): {out:?}"
    );
    assert_eq!(
        server.call_ok(
            "bash",
            json!({"command": "echo alive", "description": "after"})
        ),
        "alive\n[exit code: 0]"
    );
}

// --------------------------------------------------------------------------- fork bomb

/// Prints `PATH=VALUE` for the pids.max of the command's own cgroup, in the v2 hierarchy
/// (at /sys/fs/cgroup/unified or /sys/fs/cgroup) and in a v1 `pids` hierarchy.
const READ_OWN_PIDS_MAX: &str = r#"v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
v1=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup)
for f in "/sys/fs/cgroup/unified$v2/pids.max" "/sys/fs/cgroup$v2/pids.max" "/sys/fs/cgroup/pids$v1/pids.max"; do
  [ -f "$f" ] && echo "$f=$(cat "$f")"
done
true"#;

/// A fork bomb (its forks' complaints go to /dev/null) after which the shell uses only
/// builtins, as forks are refused: it waits 2 s on a FIFO of its own, prints its cgroup's
/// `pids.events` (`events: max N`, N forks refused) and `pids.peak` (`peak: N`), then
/// becomes `sleep` until its timeout.
const FORK_BOMB: &str = r#": MARKER
v2=$(sed -n 's/^0:://p' /proc/self/cgroup)
v1=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup)
d="/sys/fs/cgroup/pids$v1"
[ -f "/sys/fs/cgroup$v2/pids.max" ] && d="/sys/fs/cgroup$v2"
[ -f "/sys/fs/cgroup/unified$v2/pids.max" ] && d="/sys/fs/cgroup/unified$v2"
mkfifo held; exec 3<>held; rm held
b(){ b|b& }; b 2>/dev/null
read -t 2 -u 3
while read -r line; do echo "events: $line"; done < "$d/pids.events"
[ -f "$d/pids.peak" ] && while read -r line; do echo "peak: $line"; done < "$d/pids.peak"
exec sleep SLEEP"#;

#[test]
fn a_fork_bomb_is_held_by_the_pids_limit_and_ends_with_its_run() {
    let env = Env::new();
    let marker = Marker::new();
    let server = McpServer::start(&env, "[process]\ncontainment = \"cgroup\"\npids_max = 64\n");

    // First prove the limit is in force, from inside a run; without it the bomb is not run.
    let seen = server.call_ok(
        "bash",
        json!({"command": READ_OWN_PIDS_MAX, "description": "read own pids.max"}),
    );
    let proven = seen
        .lines()
        .any(|line| line.contains("/dsh-") && line.ends_with("/pids.max=64"));
    assert!(
        proven,
        "the run's own cgroup has no pids.max of 64, so the fork bomb was not run: {seen:?}"
    );

    let started = Instant::now();
    let command = FORK_BOMB
        .replace("MARKER", &marker.0)
        .replace("SLEEP", &marker.sleep(9));
    let bomb = server.call(
        "bash",
        json!({"command": command, "description": "fork bomb", "timeoutMs": 3000}),
    );
    let took = started.elapsed();
    // Its shell ends as `sleep`, so only the timeout ends the call.
    assert_eq!(bomb.code.as_deref(), Some("TIMEOUT"), "{bomb:?}");
    assert!(
        took < Duration::from_secs(30),
        "the fork bomb's call took {took:?}"
    );
    // The bomb ran into the limit (forks were refused) and never had more than 64 tasks.
    let refused = bomb
        .text
        .lines()
        .find_map(|line| line.strip_prefix("events: max "))
        .and_then(|count| count.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no pids.events line from the bomb's run: {bomb:?}"));
    assert!(refused > 0, "the bomb never hit pids.max: {bomb:?}");
    // pids.peak (Linux 6.1 and later, v1 and v2) is the proof that the limit held.
    let peak: u64 = bomb
        .text
        .lines()
        .find_map(|line| line.strip_prefix("peak: "))
        .unwrap_or_else(|| panic!("no pids.peak from the bomb's run: {bomb:?}"))
        .trim()
        .parse()
        .unwrap();
    assert!(
        (2..=64).contains(&peak),
        "the bomb's run had {peak} tasks: {bomb:?}"
    );

    let answered = Instant::now();
    let alive = server.call_ok(
        "bash",
        json!({"command": "echo alive", "description": "after the bomb"}),
    );
    assert_eq!(alive, "alive\n[exit code: 0]");
    assert!(
        answered.elapsed() < Duration::from_secs(10),
        "the next call took {:?}",
        answered.elapsed()
    );
    assert_nothing_left(&marker, "after the fork bomb's call ended");
}

// --------------------------------------------------------------------------- the run's view

fn cgroup_lines(mode: &str) -> String {
    let env = Env::new();
    let out = env.call_configured(
        &config(mode),
        "bash",
        &json!({"command": "cat /proc/self/cgroup", "description": "own cgroup"}),
        &[],
    );
    assert_eq!(out.code, None, "{out:?}");
    out.content
}

#[test]
fn a_command_runs_in_its_own_cgroup_in_cgroup_mode() {
    let seen = cgroup_lines(CGROUP);
    let unified = seen
        .lines()
        .find(|line| line.starts_with("0::"))
        .unwrap_or_else(|| panic!("no cgroup v2 line: {seen:?}"));
    assert!(
        unified.contains("/dsh-"),
        "the run's cgroup is not a dsh one: {seen:?}"
    );
}

#[test]
fn a_command_runs_in_no_dsh_cgroup_in_subreaper_mode() {
    let seen = cgroup_lines(SUBREAPER);
    assert!(
        !seen.contains("dsh-"),
        "subreaper mode put the run in a cgroup: {seen:?}"
    );
}

/// `dsh` run with cgroupfs hidden: in a private mount namespace with an empty tmpfs over
/// `/sys/fs/cgroup` (`unshare -m`, root only). `None` when that cannot be done, which
/// fails the test under `CI=true` and skips it otherwise, saying so.
fn without_cgroups(env: &Env, config: &str, args: &[&str]) -> Option<std::process::Output> {
    let dsh = env.dsh_configured(config);
    let mut script = String::from("mount -t tmpfs none /sys/fs/cgroup && exec");
    script.push_str(&format!(" {:?}", dsh.get_program()));
    for arg in dsh.get_args().chain(args.iter().map(std::ffi::OsStr::new)) {
        script.push_str(&format!(
            " '{}'",
            arg.to_string_lossy().replace('\'', "'\\''")
        ));
    }
    let mut command = std::process::Command::new("unshare");
    command.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    for (name, value) in dsh.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command
        .env("RUST_LOG", "dsh=info")
        .current_dir(env.dir.path());
    let output = command.output().ok()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if stderr.contains("unshare failed")
        || stderr.contains("mount: ") && stderr.contains("permission")
    {
        let why = format!("cannot hide cgroupfs here (needs root and unshare): {stderr}");
        crate::support::skipped(&why);
        return None;
    }
    Some(output)
}

#[test]
fn without_cgroups_auto_falls_back_with_a_warning_and_cgroup_refuses_to_start() {
    let env = Env::new();
    let echo = [
        "call",
        "bash",
        r#"{"command":"echo contained","description":"d"}"#,
    ];
    let Some(auto) = without_cgroups(&env, "", &echo) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&auto.stderr);
    assert!(auto.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&auto.stdout),
        "contained\n[exit code: 0]\n"
    );
    assert!(
        stderr.contains("falling back to subreaper containment"),
        "the fallback is warned of: {stderr}"
    );
    assert!(
        stderr.contains("containment ready containment=subreaper"),
        "the mode in force is logged: {stderr}"
    );

    let Some(forced) = without_cgroups(&env, &config(CGROUP), &echo) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&forced.stderr);
    assert!(!forced.status.success(), "{stderr}");
    assert!(forced.stdout.is_empty(), "nothing ran: {stderr}");
    assert!(stderr.contains("cgroup"), "the refusal says why: {stderr}");

    // With cgroups, the default mode is cgroup, and the log says so.
    let output = env
        .dsh()
        .env("RUST_LOG", "dsh=info")
        .args(echo)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("containment ready containment=cgroup"),
        "{stderr}"
    );
}

#[test]
fn without_clone3_a_run_joins_its_cgroup_itself_and_its_escapees_still_die() {
    let env = Env::new();
    let marker = Marker::new();
    let mut dsh = env.dsh_configured(&config(CGROUP));
    crate::support::without_syscalls(&mut dsh, &[libc::SYS_clone3]);
    // The escapee writes its pid before the command goes on: it is proven to have run.
    let command = format!(
        "setsid sh -c 'echo $$ > escapee.pid; exec sleep {}' >/dev/null 2>&1 & \
         while [ ! -s escapee.pid ]; do sleep 0.01; done; grep ^0:: /proc/self/cgroup",
        marker.sleep(1)
    );
    let output = dsh
        .env("RUST_LOG", "dsh=info")
        .args([
            "call",
            "bash",
            &json!({"command": command, "description": "no clone3"}).to_string(),
        ])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The fallback was taken, and the run is in a cgroup of its own all the same.
    assert!(
        log.contains("clone3 cannot start a process in its cgroup"),
        "{log}"
    );
    let ours = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let run_cgroup = stdout.lines().next().unwrap_or_default();
    assert!(
        run_cgroup.starts_with("0::/") && !ours.contains(run_cgroup),
        "the run's cgroup {run_cgroup:?} (ours {ours:?})\n{log}"
    );
    let pid = std::fs::read_to_string(env.workdir().join("escapee.pid")).unwrap();
    assert!(!pid.trim().is_empty(), "the escapee never ran");
    assert_nothing_left(&marker, "the escapee of a run started without clone3");
}
