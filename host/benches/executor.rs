//! `bash -c true` through the process service under the `sandbox` and `container`
//! executors against the `local` one, samples interleaved (so load from elsewhere moves
//! all alike), with the ratios of their medians; then the container's cost per run,
//! broken down (its prepare: a ruleset of its own and the idmapped workspace tree; each
//! namespace `clone` makes, by what unsharing it costs a `bash -c true`), and the
//! sandbox's setup cost per run, broken down: the
//! private temporary directory (made and removed), the Landlock ruleset (created, rules
//! added: paid once per slot and workspace, since slots keep theirs), a run's prepare
//! and release as served (a kept ruleset), the seccomp program (built once per host,
//! shown for scale), the child's own steps (no_new_privs, `landlock_restrict_self`,
//! loading the filter, measured on a throwaway thread), and what each step costs the
//! command itself (`bash -c true` by fork + exec with each applied).
//!
//! Run with `cargo bench --bench executor` (or `--profile dev` to reuse a debug build).

mod support;

use support::{percentile, us};

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh::own_files::OwnFiles;
use dsh::services::process::config::SandboxConfig;
use dsh::services::process::executor::container::Container;
use dsh::services::process::executor::Sandbox;
use dsh::services::process::seccomp;
use dsh::services::process::{
    ExecutorKind, HostPlaces, Launch, ProcessConfig, ProcessService, RunSpec,
};

const RUNS: usize = 200;

fn spec(dir: &std::path::Path, executor: ExecutorKind) -> RunSpec {
    RunSpec {
        owner: "bench".into(),
        command: "true".into(),
        cwd: dir.to_path_buf(),
        timeout: Duration::from_secs(10),
        capture_bytes: 1000,
        spill_path: dir.join("spill.txt"),
        spill_cap: dsh::output::DEFAULT_SPILL_CAP,
        env: Vec::new(),
        executor,
        network: None,
    }
}

fn median(samples: &mut [Duration]) -> Duration {
    percentile(samples, 0.5)
}

fn main() {
    // The state directory's place sets how many read rules a run gets (the siblings of
    // each directory on its way from /): DSH_BENCH_DIR picks it (default: the temp dir).
    let scratch = match std::env::var_os("DSH_BENCH_DIR") {
        Some(dir) => {
            std::fs::create_dir_all(&dir).unwrap();
            tempfile::tempdir_in(dir).unwrap()
        }
        None => tempfile::tempdir().unwrap(),
    };
    let work = scratch.path().join("work");
    let state = scratch.path().join("state");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let config = ProcessConfig {
        drain_ms: 0,
        ..ProcessConfig::default()
    };
    let own = OwnFiles::new(&state, None, None);
    let places = HostPlaces {
        workspace: Some(work.clone()),
        own: own.clone(),
    };
    let launch = Arc::new(Launch::for_host(&config, places).unwrap());
    let service = ProcessService::new(config, launch);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    // The container needs root; elsewhere it is left out.
    let root = unsafe { libc::geteuid() } == 0;
    let (mut local, mut sandboxed, mut contained) = (Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        // Warm-up (and the sandbox's and container's one-time preparation).
        for executor in [
            ExecutorKind::Local,
            ExecutorKind::Sandbox,
            ExecutorKind::Container,
        ] {
            if executor == ExecutorKind::Container && !root {
                continue;
            }
            let out = service.run(spec(&work, executor)).await.unwrap();
            assert_eq!(out.exit_code, Some(0), "{executor:?}: {:?}", out.output);
        }
        for _ in 0..RUNS {
            for (executor, samples) in [
                (ExecutorKind::Local, &mut local),
                (ExecutorKind::Sandbox, &mut sandboxed),
                (ExecutorKind::Container, &mut contained),
            ] {
                if executor == ExecutorKind::Container && !root {
                    continue;
                }
                let started = Instant::now();
                let out = service.run(spec(&work, executor)).await.unwrap();
                samples.push(started.elapsed());
                assert_eq!(out.exit_code, Some(0));
            }
        }
    });
    let (l, s) = (median(&mut local), median(&mut sandboxed));
    println!("bash -c true, {RUNS} runs each, interleaved:");
    println!(
        "  local    median {:8.1} µs  p90 {:8.1} µs",
        us(l),
        us(percentile(&mut local, 0.9))
    );
    println!(
        "  sandbox  median {:8.1} µs  p90 {:8.1} µs",
        us(s),
        us(percentile(&mut sandboxed, 0.9))
    );
    println!("  ratio sandbox/local (medians): {:.2}", us(s) / us(l));
    if root {
        let c = median(&mut contained);
        println!(
            "  container median {:8.1} µs  p90 {:8.1} µs",
            us(c),
            us(percentile(&mut contained, 0.9))
        );
        println!("  ratio container/local (medians): {:.2}", us(c) / us(l));
        println!("  ratio container/sandbox (medians): {:.2}", us(c) / us(s));
        container_breakdown(&work, &own);
    }

    // The setup, step by step.
    let started = Instant::now();
    let sandbox = Sandbox::new(&SandboxConfig::default(), &work, &own).unwrap();
    let once = started.elapsed();
    let (mut tmp, mut ruleset, mut program, mut child, mut prepare, mut filter_load) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for _ in 0..RUNS {
        let started = Instant::now();
        drop(sandbox.prepare_run(None, None).unwrap());
        prepare.push(started.elapsed());
    }
    for _ in 0..RUNS {
        let started = Instant::now();
        let dir = sandbox.private_tmp().unwrap();
        let made = started.elapsed();
        let started = Instant::now();
        let fd = sandbox
            .ruleset(dir.path(), None)
            .unwrap()
            .expect("this kernel has Landlock");
        ruleset.push(started.elapsed());
        let started = Instant::now();
        let _ = seccomp::program(false, false).unwrap();
        program.push(started.elapsed());
        let (restricted, filtered) = restrict_on_a_thread(&fd, sandbox.filter());
        child.push(restricted);
        filter_load.push(filtered);
        let started = Instant::now();
        drop(dir);
        tmp.push(made + started.elapsed());
    }
    println!(
        "sandbox setup ({RUNS} runs, medians; state dir {}, {} base rules):",
        state.display(),
        sandbox.base_rules()
    );
    println!(
        "  per host: Sandbox::new (read rules, devices, program) {:8.1} µs",
        us(once)
    );
    println!(
        "  per run:  private TMPDIR made + removed              {:8.1} µs",
        us(median(&mut tmp))
    );
    println!(
        "  per run:  Landlock ruleset created + rules added     {:8.1} µs",
        us(median(&mut ruleset))
    );
    println!(
        "  per run as served: prepare (slot's kept ruleset, TMPDIR) + release {:8.1} µs",
        us(median(&mut prepare))
    );
    println!(
        "  in child: no_new_privs + restrict_self               {:8.1} µs",
        us(median(&mut child))
    );
    println!(
        "  in child: seccomp filter loaded ({} instructions)   {:8.1} µs",
        sandbox.filter().len(),
        us(median(&mut filter_load))
    );
    let dir = sandbox.private_tmp().unwrap();
    let fd = sandbox
        .ruleset(dir.path(), None)
        .unwrap()
        .expect("this kernel has Landlock");
    println!(
        "bash -c true by fork + exec (100 runs each, medians), what each step costs the command:"
    );
    let medians = confined_true(&fd, sandbox.filter());
    for (median, what) in medians.iter().zip([
        "unconfined",
        "no_new_privs",
        "+ Landlock",
        "+ seccomp",
        "+ mount/IPC ns",
    ]) {
        println!("  {what:<14} {:8.1} µs", us(*median));
    }
    println!(
        "  (per host, for scale: seccomp program built          {:8.1} µs)",
        us(median(&mut program))
    );
}

/// `bash -c true` spawned by `Command` (fork + exec) with the first `steps` of the
/// child's confinement applied before exec (0: none, 1: no_new_privs, 2: + Landlock,
/// 3: + seccomp, 4: + the mount and IPC namespaces, unshared first); the five interleaved, 100 runs each: their medians.
fn confined_true(ruleset: &std::os::fd::OwnedFd, filter: &[libc::sock_filter]) -> [Duration; 5] {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = ruleset.as_raw_fd();
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    let program = &program as *const libc::sock_fprog as usize;
    let mut samples: [Vec<Duration>; 5] = Default::default();
    for _ in 0..100 {
        for steps in 0..5u8 {
            let mut command = std::process::Command::new("bash");
            command.args(["-c", "true"]);
            // SAFETY: raw system calls only, between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    if steps >= 4 {
                        // What a run's namespaces cost it (made and, at its exit, torn
                        // down); the mount steps are a few more system calls.
                        libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWIPC);
                    }
                    if steps >= 1 {
                        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                    }
                    if steps >= 2 {
                        libc::syscall(libc::SYS_landlock_restrict_self, fd, 0);
                    }
                    if steps >= 3 {
                        libc::syscall(
                            libc::SYS_seccomp,
                            libc::SECCOMP_SET_MODE_FILTER,
                            0,
                            program as *const libc::sock_fprog,
                        );
                    }
                    Ok(())
                });
            }
            let started = Instant::now();
            assert!(command.status().unwrap().success());
            samples[steps as usize].push(started.elapsed());
        }
    }
    samples.map(|mut s| median(&mut s))
}

/// The child's three steps, on a new thread (they confine only that thread): the time of
/// no_new_privs and `landlock_restrict_self`, and that of loading the seccomp filter
/// (the kernel checks and compiles it for each run).
fn restrict_on_a_thread(
    ruleset: &std::os::fd::OwnedFd,
    filter: &[libc::sock_filter],
) -> (Duration, Duration) {
    use std::os::fd::AsRawFd;
    let fd = ruleset.as_raw_fd();
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    let program = &program as *const libc::sock_fprog as usize;
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                let started = Instant::now();
                // SAFETY: raw system calls on a descriptor and program that outlive them;
                // they confine this thread only, which ends right after.
                unsafe {
                    assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
                    assert_eq!(libc::syscall(libc::SYS_landlock_restrict_self, fd, 0), 0);
                }
                let restricted = started.elapsed();
                let started = Instant::now();
                // SAFETY: as above.
                unsafe {
                    assert_eq!(
                        libc::syscall(
                            libc::SYS_seccomp,
                            libc::SECCOMP_SET_MODE_FILTER,
                            0,
                            program as *const libc::sock_fprog,
                        ),
                        0
                    );
                }
                (restricted, started.elapsed())
            })
            .join()
            .unwrap()
    })
}

/// Where a container run's time goes beyond the sandbox's: its prepare and release (a
/// ruleset of its own, the idmapped workspace tree, the TMPDIR's owner), and what each
/// namespace its `clone` makes costs a `bash -c true` (made by `unshare` before exec
/// and torn down at its exit, fork + exec; the PID namespace by `unshare` takes effect
/// for children only, so it is shown with a fork of `true` by the shell).
fn container_breakdown(work: &std::path::Path, own: &OwnFiles) {
    let sandbox = Sandbox::new(&SandboxConfig::default(), work, own).unwrap();
    let started = Instant::now();
    let container = Container::new(&SandboxConfig::default(), work, own).unwrap();
    let once = started.elapsed();
    let mut prepare = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        drop(container.prepare_run(None, None).unwrap());
        prepare.push(started.elapsed());
    }
    let mut sandbox_prepare = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        drop(sandbox.prepare_run(None, None).unwrap());
        sandbox_prepare.push(started.elapsed());
    }
    println!("container setup ({RUNS} runs, medians):");
    println!(
        "  per host: Container::new (its sandbox, two user namespaces)   {:8.1} µs",
        us(once)
    );
    println!(
        "  per run:  prepare + release (own ruleset, idmapped tree; never attached here, so its\n            release unmounts it, which a run's attach spares) {:8.1} µs  (sandbox's: {:.1} µs)",
        us(median(&mut prepare)),
        us(median(&mut sandbox_prepare))
    );
    let cases: [(&str, libc::c_int, &str); 7] = [
        ("no namespace", 0, "true"),
        ("mount", libc::CLONE_NEWNS, "true"),
        ("ipc", libc::CLONE_NEWIPC, "true"),
        ("uts", libc::CLONE_NEWUTS, "true"),
        ("net", libc::CLONE_NEWNET, "true"),
        ("pid (+ a child)", libc::CLONE_NEWPID, "/bin/true"),
        (
            "all five",
            libc::CLONE_NEWNS
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWPID,
            "/bin/true",
        ),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
    for _ in 0..100 {
        for (index, (_, flags, command)) in cases.iter().enumerate() {
            use std::os::unix::process::CommandExt;
            let flags = *flags;
            let mut child = std::process::Command::new("bash");
            child.args(["-c", command]);
            // SAFETY: one raw system call between fork and exec.
            unsafe {
                child.pre_exec(move || {
                    if flags != 0 && libc::unshare(flags) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let started = Instant::now();
            assert!(child.status().unwrap().success());
            samples[index].push(started.elapsed());
        }
    }
    println!("bash -c true by fork + exec with each namespace unshared (100 runs each, medians):");
    for ((what, _, _), mut samples) in cases.iter().zip(samples) {
        println!("  {what:<16} {:8.1} µs", us(median(&mut samples)));
    }
}
