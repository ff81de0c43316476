//! Admission and bounded pools: more calls than the instance pool holds wait their turn
//! instead of failing (and guards never fail closed for want of an instance); past the
//! queue a call gets `BUSY` naming the limits; a component that declares more memories or
//! bigger tables than a plugin may have is refused at load with the reason.

use std::time::{Duration, Instant};

use serde_json::json;
use wasm_encoder::{
    Component, InstanceSection, MemorySection, MemoryType, Module, ModuleArg, ModuleSection,
    RefType, TableSection, TableType,
};

use crate::mcp_stdio::McpServer;
use crate::support::{processes_with, unique_marker, Env};

/// More than the engine's instance pool (512): before admission, the calls past it
/// found no instance for their guards, and were denied.
const CALLS: usize = 600;

/// The most calls in flight the configuration allows: the pool (512) less the load
/// reserve (32) and the instances made ahead (64).
const MOST_IN_FLIGHT: usize = 416;

#[test]
fn at_the_most_calls_in_flight_six_hundred_sleeps_with_two_guards_all_return_and_none_is_denied() {
    let env = Env::new();
    let server = McpServer::start(
        &env,
        &format!(
            "[limits]\nmax_calls_in_flight = {MOST_IN_FLIGHT}\n\
             [pipeline]\nguards = [\"deny_destructive\", \"workspace_only\"]\n"
        ),
    );
    let marker = unique_marker();
    let started = Instant::now();
    let pending: Vec<_> = (0..CALLS)
        .map(|i| {
            server.start_call(
                "bash",
                json!({"command": format!("sleep 4.{marker}; echo done-{i}"), "description": "wait"}),
            )
        })
        .collect();
    // Every slot is taken at once: 416 sleeps run together (each call holding its plugin
    // instance while two guards get fresh ones), and never more.
    let sleeping = || {
        processes_with(&marker)
            .iter()
            .filter(|p| {
                p.split_once(": ")
                    .is_some_and(|(_, c)| c.starts_with("sleep "))
            })
            .count()
    };
    let mut most = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while most < MOST_IN_FLIGHT && Instant::now() < deadline {
        most = most.max(sleeping());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Watched a second longer: the queue behind them does not start a 417th.
    let full_since = Instant::now();
    while full_since.elapsed() < Duration::from_secs(1) {
        most = most.max(sleeping());
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut failed = Vec::new();
    for (i, call) in pending.into_iter().enumerate() {
        let reply = call.reply(&server);
        if reply.is_error || !reply.text.starts_with(&format!("done-{i}\n")) {
            failed.push(format!("{i}: {reply:?}"));
        }
    }
    println!(
        "{CALLS} calls of `sleep 4` in {:?}, {most} at once",
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "{} of {CALLS} failed, e.g. {:?}\n{}",
        failed.len(),
        &failed[..failed.len().min(3)],
        server.stderr()
    );
    assert_eq!(most, MOST_IN_FLIGHT, "calls in flight at once");
}

#[test]
fn past_the_queue_a_call_gets_busy_naming_the_limits_and_the_queued_one_runs() {
    let env = Env::new();
    let server = McpServer::start(
        &env,
        "[limits]\nmax_calls_in_flight = 1\nmax_queued_calls = 1\n",
    );
    let marker = unique_marker();
    let holder = server.start_call(
        "bash",
        json!({"command": format!("sleep 3; echo {marker}"), "description": "hold the slot"}),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while processes_with(&marker).is_empty() {
        assert!(Instant::now() < deadline, "the first call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The one slot is taken: one of these two waits in the queue, the other finds it
    // full (which one is up to the order the server takes them in).
    let second = server.start_call(
        "bash",
        json!({"command": "echo second", "description": "queued or busy"}),
    );
    let third = server.start_call(
        "bash",
        json!({"command": "echo third", "description": "queued or busy"}),
    );
    let replies = [second.reply(&server), third.reply(&server)];
    let busy: Vec<_> = replies.iter().filter(|r| r.is_error).collect();
    assert_eq!(busy.len(), 1, "{replies:?}");
    let busy = busy[0];
    assert_eq!(busy.code.as_deref(), Some("BUSY"), "{busy:?}");
    for named in ["max_calls_in_flight = 1", "max_queued_calls = 1"] {
        assert!(busy.text.contains(named), "{busy:?}");
    }
    let ran = replies.iter().find(|r| !r.is_error).unwrap();
    assert!(
        ran.text.starts_with("second\n") || ran.text.starts_with("third\n"),
        "{ran:?}"
    );
    let first = holder.reply(&server);
    assert!(!first.is_error && first.text.contains(&marker), "{first:?}");
}

/// A component that instantiates each of `modules` once.
fn component_of(modules: &[Module]) -> Vec<u8> {
    let mut component = Component::new();
    for module in modules {
        component.section(&ModuleSection(module));
    }
    let mut instances = InstanceSection::new();
    for index in 0..modules.len() as u32 {
        instances.instantiate(index, Vec::<(&str, ModuleArg)>::new());
    }
    component.section(&instances);
    component.finish()
}

fn module_with_memory() -> Module {
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut module = Module::new();
    module.section(&memories);
    module
}

fn module_with_table(minimum: u64) -> Module {
    let mut tables = TableSection::new();
    tables.table(TableType {
        element_type: RefType::FUNCREF,
        table64: false,
        minimum,
        maximum: None,
        shared: false,
    });
    let mut module = Module::new();
    module.section(&tables);
    module
}

#[test]
fn components_with_two_memories_or_oversized_tables_are_refused_at_load_with_the_reason() {
    let env = Env::new();
    let dir = env.plugins_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let write =
        |name: &str, bytes: Vec<u8>| std::fs::write(dir.join(format!("{name}.wasm")), bytes);
    write(
        "two_memories",
        component_of(&[module_with_memory(), module_with_memory()]),
    )
    .unwrap();
    write("huge_table", component_of(&[module_with_table(10_001)])).unwrap();
    write(
        "many_instances",
        component_of(&(0..33).map(|_| Module::new()).collect::<Vec<_>>()),
    )
    .unwrap();
    write(
        "many_tables",
        component_of(&(0..5).map(|_| module_with_table(1)).collect::<Vec<_>>()),
    )
    .unwrap();
    // Within the bounds: one memory, one small table. It exports no world dsh runs,
    // so it is refused too, but for that, not for its size.
    write(
        "small",
        component_of(&[module_with_memory(), module_with_table(16)]),
    )
    .unwrap();

    let plugins = env.plugins_configured("");
    let reason = |name: &str| {
        let status = plugins
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed: {plugins:?}"));
        assert_eq!(status["status"], "refused", "{status}");
        status["reason"].as_str().unwrap().to_owned()
    };
    for (name, found) in [
        ("two_memories", "2 Wasm linear memories"),
        ("huge_table", "minimum element size of 10001"),
        ("many_tables", "5 tables"),
        ("many_instances", "33 core module instances"),
    ] {
        let reason = reason(name);
        assert!(
            reason.contains("declares more than a plugin may have (one linear memory"),
            "{name}: {reason}"
        );
        assert!(reason.contains(found), "{name}: {reason}");
    }
    let small = reason("small");
    assert!(!small.contains("declares more"), "{small}");
    assert!(small.contains("exports none of the worlds"), "{small}");
}
