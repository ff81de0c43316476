//! The file tools never block and never lose a change (issue 50, items 5 to 7), against
//! the real `dsh serve` and the embedded `files` plugin: a FIFO named as a path or met as
//! an ignore file answers at once with `INVALID_ARGUMENTS` naming it (a writer never
//! comes); a file swapped for a FIFO while `write` and `apply_patch` run hangs nothing;
//! calls in flight on FIFOs leave the server answering others; any plugin's open of a
//! FIFO in a granted directory fails at once (dsh's wasmtime-wasi); two `edit`s of one file
//! sent at once keep both changes or refuse one with `STALE_FILE`; and with the state
//! directory inside the workspace, calling a file tool says why and how to move it.
//!
//! "At once" is a bound of [`AT_ONCE`]: before the fix these calls never answered (an
//! open of a FIFO waited for a writer), so any bound well above a call's real time shows
//! the difference without timing anything.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::mcp_stdio::{McpServer, Pending, ToolReply};
use crate::support::Env;

/// How long a call that must not wait may take (a debug build on a loaded 2-core VM
/// answers these in milliseconds).
const AT_ONCE: Duration = Duration::from_secs(10);

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    let made = unsafe { libc::mkfifo(path.as_ptr(), 0o644) };
    assert_eq!(made, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// The answer to `pending` within `within`, or a failure saying the call hung.
fn reply_within(
    mut pending: Pending,
    server: &McpServer,
    within: Duration,
    what: &str,
) -> ToolReply {
    let deadline = Instant::now() + within;
    while !pending.answered() {
        assert!(
            Instant::now() < deadline,
            "{what}: no answer within {within:?} (the call waits on something)\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    pending.reply(server)
}

/// `tool ARGS` answered within [`AT_ONCE`].
fn call_at_once(server: &McpServer, tool: &str, args: Value) -> ToolReply {
    let what = format!("{tool} {args}");
    reply_within(server.start_call(tool, args), server, AT_ONCE, &what)
}

fn assert_refused_naming(reply: &ToolReply, what: &str, starts: &str) {
    assert!(reply.is_error, "{what}: {reply:?}");
    assert_eq!(
        reply.code.as_deref(),
        Some("INVALID_ARGUMENTS"),
        "{what}: {reply:?}"
    );
    assert!(reply.text.contains(starts), "{what}: {reply:?}");
}

#[test]
fn a_fifo_named_as_a_path_answers_at_once_with_invalid_arguments_in_every_tool() {
    let env = Env::new();
    let fifo = env.workdir().join("p");
    mkfifo(&fifo);
    let server = McpServer::start(&env, "");
    let patch = |op: &str| format!("*** Begin Patch\n{op}\n*** End Patch\n");
    let cases = [
        ("grep", json!({"pattern": "x", "path": "p"})),
        ("glob", json!({"pattern": "*", "path": "p"})),
        ("read", json!({"path": "p"})),
        ("write", json!({"path": "p", "content": "x\n"})),
        (
            "edit",
            json!({"path": "p", "old_string": "a", "new_string": "b"}),
        ),
        (
            "apply_patch",
            json!({"patch": patch("*** Update File: p\n@@\n-a\n+b")}),
        ),
        (
            "apply_patch",
            json!({"patch": patch("*** Add File: p\n+b")}),
        ),
        ("apply_patch", json!({"patch": patch("*** Delete File: p")})),
    ];
    for (tool, args) in cases {
        let what = format!("{tool} {args}");
        let reply = call_at_once(&server, tool, args);
        // The host names a FIFO (`read`, `write`, ...), the plugin's walk "a FIFO or a
        // socket" (`grep`, `glob`: WASI 0.2 tells it no more).
        assert_refused_naming(&reply, &what, "p is a FIFO");
    }
    // Nothing opened it for writing, nothing replaced or removed it.
    assert!(is_fifo(&fifo));
}

#[test]
fn a_fifo_as_an_ignore_file_answers_grep_and_glob_at_once_naming_it() {
    for fifo in [
        ".gitignore",
        ".ignore",
        ".git/info/exclude",
        "sub/.gitignore",
    ] {
        let env = Env::new();
        let ws = env.workdir();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/a.txt"), "x\n").unwrap();
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        mkfifo(&ws.join(fifo));
        let server = McpServer::start(&env, "");
        let says = format!("{fifo} is a FIFO or a socket, and");
        let reply = call_at_once(&server, "grep", json!({"pattern": "x"}));
        assert_refused_naming(&reply, &format!("grep with {fifo}"), &says);
        // From a directory below it: the ignore files on the way are read too.
        let reply = call_at_once(&server, "glob", json!({"pattern": "*", "path": "sub"}));
        assert_refused_naming(&reply, &format!("glob in sub with {fifo}"), &says);
        // Without ignore files the walk never reads it.
        let listed = call_at_once(
            &server,
            "glob",
            json!({"pattern": "*", "path": "sub", "include_ignored": true}),
        );
        assert!(!listed.is_error, "{listed:?}");
        assert!(listed.text.contains("sub/a.txt"), "{listed:?}");
        assert!(is_fifo(&ws.join(fifo)));
    }
}

/// A regular file and a FIFO take turns at one name (each put in place by a rename, so
/// something is always there) while `write` and `apply_patch` run on it, 1,000 rounds:
/// a look at the path, then an open, found a FIFO between the two within 300 rounds in
/// every run before the fix, and waited for a writer.
#[test]
fn a_file_swapped_for_a_fifo_under_write_and_apply_patch_hangs_nothing_in_1000_rounds() {
    let env = Env::new();
    let ws = env.workdir();
    let target = ws.join("s.txt");
    std::fs::write(&target, "a\n").unwrap();
    let server = McpServer::start(&env, "");
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws, target) = (stop.clone(), ws.clone(), target.clone());
        std::thread::spawn(move || {
            let (fifo, file) = (ws.join(".swap-fifo"), ws.join(".swap-file"));
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                mkfifo(&fifo);
                std::fs::rename(&fifo, &target).unwrap();
                std::fs::write(&file, "a\n").unwrap();
                std::fs::rename(&file, &target).unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let mut fifo_named = 0;
    for round in 0..1000 {
        let (tool, args) = match round % 2 {
            0 => ("write", json!({"path": "s.txt", "content": "b\n"})),
            _ => (
                "apply_patch",
                json!({"patch": "*** Begin Patch\n*** Update File: s.txt\n@@\n-a\n+b\n*** End Patch\n"}),
            ),
        };
        let reply = call_at_once(&server, tool, args);
        if reply.text.contains("FIFO") {
            fifo_named += 1;
            assert_eq!(
                reply.code.as_deref(),
                Some("INVALID_ARGUMENTS"),
                "{reply:?}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    // The race was there to be lost: the calls met the FIFO, many times.
    assert!(swaps > 1000, "only {swaps} swaps");
    assert!(fifo_named > 0, "no call ever met the FIFO in {swaps} swaps");
    // And the server still answers at once.
    std::fs::write(ws.join("after.txt"), "after\n").unwrap();
    let read = call_at_once(&server, "read", json!({"path": "after.txt"}));
    assert!(!read.is_error && read.text.contains("after"), "{read:?}");
}

/// Before the fix a call on a FIFO held a runtime worker, and with as many such calls as
/// cores (two here) every other call waited too.
#[test]
fn a_server_with_two_calls_on_fifos_in_flight_answers_others_at_once() {
    let env = Env::new();
    let ws = env.workdir();
    mkfifo(&ws.join("p1"));
    mkfifo(&ws.join("p2"));
    std::fs::write(ws.join("plain.txt"), "plain text\n").unwrap();
    let server = McpServer::start(&env, "[limits]\ncall_timeout_ms = 2000\n");
    // grep opens its path in the plugin, through WASI, on the worker thread the call
    // runs on: two such calls held both workers of a 2-core machine.
    let first = server.start_call("grep", json!({"pattern": "x", "path": "p1"}));
    let second = server.start_call("grep", json!({"pattern": "x", "path": "p2"}));
    std::thread::sleep(Duration::from_millis(200));
    let read = server.start_call("read", json!({"path": "plain.txt"}));
    let read = reply_within(
        read,
        &server,
        AT_ONCE,
        "read while two FIFO calls are in flight",
    );
    assert!(
        !read.is_error && read.text.contains("plain text"),
        "{read:?}"
    );
    for (pending, what) in [(first, "grep p1"), (second, "grep p2")] {
        let reply = reply_within(pending, &server, AT_ONCE, what);
        assert_refused_naming(&reply, what, "is a FIFO");
    }
}

/// Any plugin, not only the file tools: the `prober` test plugin granted a directory
/// holding FIFOs reads one with `std::fs`, and the open fails at once (a FIFO is never
/// given to a guest), more such calls at once than the runtime has worker threads, while
/// a regular file beside them reads; wasmtime-wasi 48 waited there for a writer until the
/// call's timeout.
#[test]
fn any_plugin_opening_a_fifo_in_a_granted_directory_is_refused_at_once() {
    let env = Env::new();
    env.add_plugins(&[("prober", "prober")]);
    let granted = env.dir.path().join("granted");
    std::fs::create_dir_all(&granted).unwrap();
    std::fs::write(granted.join("note.txt"), "inside").unwrap();
    mkfifo(&granted.join("pipe"));
    let config = format!(
        "[plugins.prober]\ntimeout_ms = 60000\nfs = [{{ path = {:?}, mode = \"rw\" }}]\n",
        granted.display().to_string()
    );
    let server = McpServer::start(&env, &config);
    let pipe = granted.join("pipe").display().to_string();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let reads: Vec<Pending> = (0..workers * 2 + 1)
        .map(|_| server.start_call("read_file", json!({ "path": pipe })))
        .collect();
    let writes: Vec<Pending> = (0..workers * 2 + 1)
        .map(|_| server.start_call("write_file", json!({ "path": pipe, "text": "x" })))
        .collect();
    for (n, pending) in reads.into_iter().chain(writes).enumerate() {
        let reply = reply_within(pending, &server, AT_ONCE, &format!("call {n} on the FIFO"));
        assert!(reply.is_error, "{reply:?}");
        assert_ne!(reply.code.as_deref(), Some("TIMEOUT"), "{reply:?}");
        // A read opens the FIFO (O_NONBLOCK) and is refused by its type; a write finds no
        // reader (ENXIO) and fails.
        if n < workers * 2 + 1 {
            assert!(reply.text.contains("Not supported"), "{reply:?}");
        }
    }
    let note = json!({ "path": granted.join("note.txt").display().to_string() });
    let read = call_at_once(&server, "read_file", note);
    assert_eq!((read.is_error, read.text.as_str()), (false, "inside"));
    assert!(is_fifo(&granted.join("pipe")));
}

/// Two `edit`s of one file sent at once, 100 rounds: both answer success only if the file
/// then holds both changes; otherwise one is `STALE_FILE` and the file holds the other's.
/// Before the fix both answered success and the file held one change, 37 to 40 times in
/// 40 rounds.
#[test]
fn two_concurrent_edits_of_one_file_keep_both_or_refuse_one_in_100_rounds() {
    let env = Env::new();
    let path = env.workdir().join("conc.txt");
    let server = McpServer::start(&env, "");
    let (mut both, mut one_stale) = (0, 0);
    for round in 0..100 {
        std::fs::write(&path, format!("alpha\nmiddle {round}\nbeta\n")).unwrap();
        let read = server.call("read", json!({"path": "conc.txt"}));
        assert!(!read.is_error, "{read:?}");
        let edit = |old: &str, new: &str| {
            server.start_call(
                "edit",
                json!({"path": "conc.txt", "old_string": old, "new_string": new}),
            )
        };
        let (a, b) = (edit("alpha", "ALPHA"), edit("beta", "BETA"));
        let (a, b) = (a.reply(&server), b.reply(&server));
        let text = std::fs::read_to_string(&path).unwrap();
        let has = (text.contains("ALPHA"), text.contains("BETA"));
        match (a.is_error, b.is_error) {
            (false, false) => {
                assert_eq!(
                    has,
                    (true, true),
                    "round {round}: both applied, file: {text:?}"
                );
                both += 1;
            }
            (false, true) | (true, false) => {
                let (refused, kept) = match a.is_error {
                    true => (&a, (false, true)),
                    false => (&b, (true, false)),
                };
                assert_eq!(
                    refused.code.as_deref(),
                    Some("STALE_FILE"),
                    "round {round}: {refused:?}"
                );
                assert_eq!(has, kept, "round {round}: one refused, file: {text:?}");
                one_stale += 1;
            }
            (true, true) => panic!("round {round}: both refused: {a:?} {b:?}"),
        }
    }
    assert_eq!(both + one_stale, 100);
    eprintln!("100 rounds: both kept {both}, one refused with STALE_FILE {one_stale}");
}

/// With the state directory inside the workspace the `files` plugin cannot be given the
/// workspace (a preopen cannot hide a subdirectory): its tools stay listed, and a call
/// answers `DENIED` saying why and how to move the state directory, where it used to be
/// an unknown tool.
#[test]
fn with_the_state_directory_in_the_workspace_a_file_tool_says_why_and_how_to_move_it() {
    let env = Env::new();
    let state = env.workdir().join(".dsh-state");
    std::fs::write(env.workdir().join("a.txt"), "a\n").unwrap();
    let called = env
        .dsh()
        .env("DSH_STATE_DIR", &state)
        .args(["call", "read", r#"{"path": "a.txt"}"#, "--json"])
        .output()
        .unwrap();
    let called = crate::support::CallOutput::parse(called);
    assert_eq!(called.code.as_deref(), Some("DENIED"), "{called:?}");
    for says in [
        "the workspace contains dsh's state directory",
        "--state-dir",
        "Move the state directory out of the workspace",
    ] {
        assert!(called.message.contains(says), "{says}: {called:?}");
    }
    assert!(!called.content.contains('a'), "{called:?}");
    let mut command = env.dsh();
    command.env("DSH_STATE_DIR", &state);
    let server = McpServer::start_command(&env, command);
    let listed = server.request("tools/list", json!({})).wait(&server);
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    for tool in ["read", "write", "edit", "apply_patch", "glob", "grep"] {
        assert!(names.contains(&tool), "{tool} not listed: {names:?}");
    }
    for (tool, args) in [
        ("read", json!({"path": "a.txt"})),
        ("grep", json!({"pattern": "a"})),
        (
            "write",
            json!({"path": ".dsh-state/planted", "content": "x"}),
        ),
    ] {
        let reply = server.call(tool, args);
        assert!(reply.is_error, "{reply:?}");
        assert_eq!(reply.code.as_deref(), Some("DENIED"), "{reply:?}");
        assert!(reply.text.contains("--state-dir"), "{reply:?}");
    }
    assert!(!state.join("planted").exists());
    // `dsh plugins` still shows it refused, with the reason.
    let plugins = crate::support::plugins_listed({
        let mut command = env.dsh();
        command.env("DSH_STATE_DIR", &state);
        command
    });
    let files = plugins
        .iter()
        .find(|p| p["name"] == "files")
        .expect("files is listed");
    assert_eq!(files["status"], "refused", "{files}");
    assert!(
        files["reason"]
            .as_str()
            .unwrap_or("")
            .contains("state directory"),
        "{files}"
    );
}
