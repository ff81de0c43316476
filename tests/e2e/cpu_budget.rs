//! The CPU budget counts guest CPU only: calls that share two cores (dsh is pinned to two
//! CPUs, whatever the machine has) each get their full budget of guest CPU, a call past
//! its budget stops close to it and says what it used, and sleeping or waiting on a host
//! call never counts.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::mcp_stdio::McpServer;
use crate::support::Env;

/// The budget of the `hostile` plugin in these tests.
const BUDGET_MS: u64 = 1000;

/// CPU (user + system) the process `pid` has used so far, from /proc/PID/stat.
fn process_cpu(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (in parentheses): state is field 3, utime 14, stime 15.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// The first two CPUs this process may run on: the tests pin `dsh serve` to them, so
/// "four calls on two cores" holds on a machine with more.
fn two_cpus() -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut allowed) }, 0);
    let mut two: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut taken = 0;
    for cpu in 0..libc::CPU_SETSIZE as usize {
        if taken < 2 && unsafe { libc::CPU_ISSET(cpu, &allowed) } {
            unsafe { libc::CPU_SET(cpu, &mut two) };
            taken += 1;
        }
    }
    assert_eq!(taken, 2, "these tests need two CPUs");
    two
}

/// `dsh serve` pinned to two CPUs with the `hostile` plugin under a `BUDGET_MS` budget,
/// warmed up (its component compiled) so later calls measure only themselves.
fn hostile_server(env: &Env) -> McpServer {
    use std::os::unix::process::CommandExt;
    env.add_plugins(&[("hostile", "hostile")]);
    let mut command = env.dsh_configured(&format!(
        "[plugins.hostile]\ncpu_ms = {BUDGET_MS}\nmemory_mb = 32\n"
    ));
    let cpus = two_cpus();
    // SAFETY: sched_setaffinity is a plain system call, safe between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_setaffinity(0, size, &cpus) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let server = McpServer::start_command(env, command);
    server.call_ok("burn", json!({"iterations": 1}));
    server
}

/// The process CPU one `burn` of `iterations` takes, with nothing else running in the
/// server: the guest CPU of that call, plus a little host work.
fn cpu_of_one_burn(server: &McpServer, iterations: u64) -> Duration {
    let before = process_cpu(server.pid());
    server.call_ok("burn", json!({"iterations": iterations}));
    process_cpu(server.pid()) - before
}

/// Iterations of `burn` that take about `target` of guest CPU, measured on this machine.
fn burn_iterations_for(server: &McpServer, target: Duration) -> u64 {
    let probe = 50_000_000;
    let probe_cpu = cpu_of_one_burn(server, probe);
    assert!(
        probe_cpu >= Duration::from_millis(50),
        "the probe burn is long enough to measure: {probe_cpu:?}"
    );
    (probe as f64 * target.as_secs_f64() / probe_cpu.as_secs_f64()) as u64
}

/// The guest CPU the `PLUGIN_CPU_LIMIT` message reports ("used N ms of guest CPU").
fn reported_cpu_ms(message: &str) -> u64 {
    let used = message
        .split("used ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .unwrap_or_else(|| panic!("no CPU figure in {message:?}"));
    used.parse().unwrap()
}

#[test]
fn four_concurrent_calls_on_two_cores_each_get_their_full_guest_cpu_budget() {
    let env = Env::new();
    let server = hostile_server(&env);
    let iterations = burn_iterations_for(&server, Duration::from_millis(BUDGET_MS * 6 / 10));
    let alone = cpu_of_one_burn(&server, iterations);
    assert!(
        alone < Duration::from_millis(BUDGET_MS * 8 / 10),
        "one burn uses about 60 % of the budget: {alone:?}"
    );

    let before = process_cpu(server.pid());
    let started = Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|_| server.start_call("burn", json!({"iterations": iterations})))
        .collect();
    let replies: Vec<_> = calls.into_iter().map(|call| call.reply(&server)).collect();
    let wall = started.elapsed();
    let cpu = process_cpu(server.pid()) - before;
    for reply in &replies {
        assert!(!reply.is_error, "{reply:?} (one burn alone: {alone:?})");
    }
    // They shared the cores: each took longer in wall time than its whole budget, so a
    // budget that counted waiting for a core would have stopped them.
    assert!(
        wall > Duration::from_millis(BUDGET_MS),
        "4 burns of {alone:?} each on 2 cores took only {wall:?}"
    );
    assert!(cpu >= alone * 3, "they all burned: {cpu:?} of CPU");
}

#[test]
fn a_call_that_needs_twice_its_budget_stops_within_three_ticks_over_it() {
    let env = Env::new();
    let server = hostile_server(&env);
    let iterations = burn_iterations_for(&server, Duration::from_millis(BUDGET_MS * 2));

    let before = process_cpu(server.pid());
    let reply = server.call("burn", json!({"iterations": iterations}));
    let cpu = process_cpu(server.pid()) - before;
    assert_eq!(reply.code.as_deref(), Some("PLUGIN_CPU_LIMIT"), "{reply:?}");
    assert!(
        reply
            .text
            .contains(&format!("CPU budget of {BUDGET_MS} ms")),
        "{reply:?}"
    );
    // The guest CPU it used: at most three ticks of the epoch (the check's period) past
    // its budget.
    let reported = reported_cpu_ms(&reply.text);
    eprintln!("budget {BUDGET_MS} ms, guest CPU reported {reported} ms");
    let ticks = 3 * dsh::engine::EPOCH_TICK.as_millis() as u64;
    assert!(
        (BUDGET_MS..=BUDGET_MS + ticks).contains(&reported),
        "reported {reported} ms: {reply:?}"
    );
    // The whole process, measured apart from the budget: the guest's CPU (checked above),
    // the host's work for the call and at each of its hundred ticks (the check, a yield
    // to the runtime and the poll that resumes it), and /proc's 10 ms granularity. Alone
    // on the 2-core VMs that came to 1.05 to 1.09 s; under the whole suite on a slower
    // one, 1.11 and 1.12 s. A budget that did not hold would show twice the budget.
    assert!(
        cpu <= Duration::from_millis(BUDGET_MS * 12 / 10),
        "the process used {cpu:?} of CPU for the call"
    );
}

#[test]
fn sleeping_or_waiting_on_a_host_call_past_the_budget_does_not_count() {
    let env = Env::new();
    env.add_plugins(&[("hostile", "hostile")]);
    let config = "[plugins.hostile]\ncpu_ms = 200\n[plugins.bash]\ncpu_ms = 200\n";
    let slept = env.call_configured(config, "sleep", &json!({"ms": 1500}), &[]);
    assert_eq!(slept.code, None, "{slept:?}");
    assert!(slept.content.contains("slept"), "{slept:?}");
    let waited = env.call_configured(
        config,
        "bash",
        &json!({"command": "sleep 1.5; echo waited", "description": "wait"}),
        &[],
    );
    assert_eq!(waited.code, None, "{waited:?}");
    assert!(waited.content.contains("waited"), "{waited:?}");
}
