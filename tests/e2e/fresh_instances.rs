//! Every call runs in an instance no call has touched, including the instances dsh makes
//! ahead of their calls (after a call ends, the next one's instance is made in the
//! background): a tool that counts the calls its instance served answers 1 every time,
//! whether its calls come apart (served by instances made ahead, which the server's
//! debug log shows) or back to back.

use std::time::Duration;

use serde_json::json;

use crate::mcp_stdio::McpServer;
use crate::support::Env;

#[test]
fn every_call_gets_an_untouched_instance_also_one_made_ahead() {
    let env = Env::new();
    env.add_plugins(&[("fresh_state", "fresh_state")]);
    let mut command = env.dsh_configured("");
    command.env("RUST_LOG", "dsh=debug");
    let server = McpServer::start_command(&env, command);
    for _ in 0..5 {
        // Calls apart, as an agent makes them: each finds an instance made ahead.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(server.call_ok("calls_seen", json!({})), "1");
    }
    for _ in 0..20 {
        assert_eq!(server.call_ok("calls_seen", json!({})), "1");
    }
    let log = server.stderr();
    let made_ahead = log
        .lines()
        .filter(|line| {
            line.contains("the call takes an instance made ahead") && line.contains("fresh_state")
        })
        .count();
    assert!(
        made_ahead >= 3,
        "calls apart took instances made ahead ({made_ahead} did):\n{log}"
    );
}

/// A reused pool slot is reset page by page: the pages the last call dirtied are copied
/// back from the memory image (up to a budget, found with the kernel's page-map scan,
/// which may need several passes) and the rest are dropped. A call that marks hundreds
/// of scattered pages, in a zeroed buffer and in the image's initialised data, is
/// followed by calls that must find none of the marks: with the marks well inside the
/// budget, past the scan's 64 runs a pass, and past the budget.
#[test]
fn no_call_finds_the_pages_an_earlier_call_dirtied() {
    let env = Env::new();
    env.add_plugins(&[("fresh_state", "fresh_state")]);
    let server = McpServer::start(&env, "");
    for pages in [8, 200, 512] {
        for pause in [None, Some(Duration::from_millis(50))] {
            for _ in 0..4 {
                if let Some(pause) = pause {
                    std::thread::sleep(pause);
                }
                assert_eq!(
                    server.call_ok("scribble", json!({ "pages": pages })),
                    "0",
                    "pages marked by an earlier call of {pages} pages (pause {pause:?})"
                );
            }
        }
    }
    let refused = server.call("scribble", json!({ "pages": 513 }));
    assert!(refused.is_error, "{refused:?}");
}

/// Memory a call grows at run time starts zeroed in the next call's instance too, after
/// a call of the same plugin marked it and after another plugin (`hostile`, filling its
/// memory to its limit with marked pages) had the pool's slots: a reused slot's pages past
/// the memory's initial size are dropped, never handed on.
#[test]
fn memory_grown_at_run_time_starts_zeroed_after_this_plugin_or_another_used_the_slot() {
    let env = Env::new();
    env.add_plugins(&[("fresh_state", "fresh_state"), ("hostile", "hostile")]);
    let server = McpServer::start(&env, "[plugins.hostile]\nmemory_mb = 32\n");
    for round in 0..6 {
        assert_eq!(
            server.call_ok("scribble", json!({ "pages": 8, "grow": 64 })),
            "0",
            "round {round}: grown pages held an earlier call's marks"
        );
        if round % 2 == 1 {
            let filled = server.call("grow_memory", json!({}));
            assert!(filled.is_error, "{filled:?}");
        }
    }
    let refused = server.call("scribble", json!({ "pages": 8, "grow": 65 }));
    assert!(refused.is_error, "{refused:?}");
}
