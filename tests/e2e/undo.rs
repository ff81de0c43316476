//! Undo through the real binary: what a call changed in the workspace (by `bash` under
//! each executor, a background job, a terminal's `git checkout` and `npm install`, an
//! `apply_patch` across five files, a subagent's steps) is put back byte for byte (every
//! file's bytes and mode, every link's target), an undo is undone again, a conflict
//! changes nothing, the records outlive a SIGKILL of dsh, and the bounds (a byte cap, a
//! full disk) never fail a call.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::mcp_stdio::McpServer;
use crate::support::Env;

/// Every path under `root` (but `.git/` and `node_modules/`) with what it is: a file's
/// bytes and mode, a link's target, a directory's mode.
fn fingerprint(root: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" || rel == "node_modules" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let what = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                pending.push(path.clone());
                format!("dir {mode:o}")
            } else {
                let bytes = std::fs::read(&path).unwrap();
                format!("file {mode:o} {}", String::from_utf8_lossy(&bytes))
            };
            found.insert(rel, what);
        }
    }
    found
}

/// A small project: sources, a README, files to move and chmod, a link.
fn project(root: &Path) {
    std::fs::create_dir_all(root.join("src/nested")).unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(root.join("src/nested/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(root.join("README.md"), "hello, project\n").unwrap();
    std::fs::write(root.join("a"), "to be moved\n").unwrap();
    std::fs::write(root.join("c"), "to be private\n").unwrap();
    std::os::unix::fs::symlink("README.md", root.join("link")).unwrap();
}

/// The id an `undo with undo {call_id: "…"}` line names.
fn undo_id(text: &str) -> String {
    let at = text
        .find("undo with undo {call_id: \"")
        .unwrap_or_else(|| panic!("no undo line in: {text}"));
    let rest = &text[at + "undo with undo {call_id: \"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// The destructive command of the issue: a tree removed, a file edited in place, one
/// moved, one's mode changed, a link pointed elsewhere.
const DESTRUCTIVE: &str =
    "rm -rf src && sed -i s/hello/goodbye/ README.md && mv a b && chmod 600 c && ln -sfn c link";

fn bash(server: &McpServer, command: &str) -> String {
    server.call_ok(
        "bash",
        json!({"command": command, "description": "undo test"}),
    )
}

fn undo(server: &McpServer, id: &str) -> String {
    server.call_ok("undo", json!({"call_id": id}))
}

/// Checks one executor: the destructive command is undone byte for byte, and the undo
/// is undone again (the command's changes come back).
fn destructive_command_round_trip(executor: &str) {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let server = McpServer::start(&env, &executor_config(executor));
    let ran = bash(&server, DESTRUCTIVE);
    assert!(ran.contains("[changed: "), "{executor}: {ran}");
    assert_eq!(
        ran.contains("[sandbox: "),
        executor != "local",
        "ran under {executor}: {ran}"
    );
    let after = fingerprint(&env.workdir());
    assert_ne!(after, before, "{executor}: the command changed nothing");
    let undone = undo(&server, &undo_id(&ran));
    assert_eq!(fingerprint(&env.workdir()), before, "{executor}: {undone}");
    // The undo is a call with its own record: undoing it redoes the command.
    let redone = undo(&server, &undo_id(&undone));
    assert_eq!(fingerprint(&env.workdir()), after, "{executor}: {redone}");
}

/// Under `local`, nothing confines the command, and inotify still sees every change.
#[test]
fn a_destructive_bash_command_is_undone_byte_for_byte_under_local() {
    destructive_command_round_trip("local");
}

/// Under `sandbox`, the command writes the workspace through the sandbox's view of it.
#[test]
fn a_destructive_bash_command_is_undone_byte_for_byte_under_sandbox() {
    destructive_command_round_trip("sandbox");
}

/// Under `container`, the command writes through a bind mount in its own namespaces.
#[test]
fn a_destructive_bash_command_is_undone_byte_for_byte_under_container() {
    if !crate::container_executor::can_run() {
        return;
    }
    destructive_command_round_trip("container");
}

/// The newest record of `tool`'s calls the command line lists (`dsh checkpoints --json`).
fn newest_record_of(env: &Env, tool: &str) -> Value {
    let output = env.dsh().args(["checkpoints", "--json"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let list: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    list.into_iter()
        .find(|record| record["tool"] == tool)
        .unwrap_or_else(|| {
            panic!(
                "no record of {tool}: {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
}

fn executor_config(executor: &str) -> String {
    format!("[process.executor]\ndefault = \"{executor}\"\n")
}

/// The executors a test runs under here: `container` only where it can run (as root).
fn executors() -> Vec<&'static str> {
    let mut all = vec!["local", "sandbox"];
    if rustix::process::geteuid().is_root() {
        all.push("container");
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs the container executor as root"
        );
    }
    all
}

/// What a background job changes after its call returned is recorded under that call
/// and undone with it, under each executor.
#[test]
fn a_background_job_s_rewrites_are_undone_with_the_call_that_started_it() {
    for executor in executors() {
        background_job_round_trip(executor);
    }
}

fn background_job_round_trip(executor: &str) {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let server = McpServer::start(&env, &executor_config(executor));
    let started = server.call_ok(
        "bash",
        json!({"command": "sleep 0.3; echo rewritten > README.md; rm a; mkdir -p out && echo x > out/y",
               "description": "rewrite in the background", "run_in_background": true}),
    );
    let job = started
        .split_whitespace()
        .find(|word| word.starts_with("bash-"))
        .unwrap_or_else(|| panic!("no job id in {started}"))
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
        .to_string();
    // job_output answers at new output too (the sandbox's marker line): until the end.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let read = server.call_ok("job_output", json!({"id": job, "wait_ms": 5000}));
        if read.contains("exit") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{executor}: the job never ended: {read}"
        );
    }
    let changed = fingerprint(&env.workdir());
    assert_ne!(changed, before);
    // The job's changes are the `bash` call's (and, as they were made while it waited,
    // the `job_output` call's too).
    let record = newest_record_of(&env, "bash");
    let paths: Vec<&str> = record["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|change| change["path"].as_str())
        .collect();
    for path in ["README.md", "a", "out", "out/y"] {
        assert!(paths.contains(&path), "{path} not in {record}");
    }
    undo(&server, record["call_id"].as_str().unwrap());
    assert_eq!(fingerprint(&env.workdir()), before, "under {executor}");
}

fn git(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(status.status.success(), "git {args:?}: {status:?}");
}

/// A terminal session's `git checkout -- .` is undone (the working tree's edits come
/// back; `.git/` is never rewritten), and its `npm install` too, with `node_modules/`
/// left out and said to be.
#[test]
fn a_terminal_s_git_checkout_and_npm_install_are_undone_and_node_modules_is_said_ignored() {
    for executor in executors() {
        terminal_round_trip(executor);
    }
}

/// Under `executor`: the checkout, and under `local` the install (npm needs its cache in
/// `$HOME`, which the confining executors keep read-only).
fn terminal_round_trip(executor: &str) {
    let env = Env::new();
    let work = env.workdir();
    project(&work);
    std::fs::write(work.join(".gitignore"), "node_modules/\n").unwrap();
    git(&work, &["init", "-q"]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "init"]);
    // Uncommitted edits the checkout throws away.
    std::fs::write(work.join("README.md"), "edited, not committed\n").unwrap();
    std::fs::write(work.join("src/main.rs"), "fn main() { edited() }\n").unwrap();
    let edited = fingerprint(&work);
    let server = McpServer::start(&env, &executor_config(executor));
    let opened = server.call_ok("terminal_open", json!({}));
    let term = opened
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .find(|word| word.starts_with("term-"))
        .unwrap_or_else(|| panic!("no session id in {opened}"))
        .to_string();
    let sent = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "git checkout -- . && echo CHECKED-$((6*7))", "wait": {"pattern": "CHECKED-42", "timeout_ms": 20000}}),
    );
    assert!(sent.contains("[changed: "), "{executor}: {sent}");
    assert_eq!(
        std::fs::read_to_string(work.join("README.md")).unwrap(),
        "hello, project\n"
    );
    let head = git_head(&work);
    let undone = undo(&server, &undo_id(&sent));
    assert_eq!(
        fingerprint(&work),
        edited,
        "{executor}: the checkout's edits are back"
    );
    // Undo never rewrites the repository: no path under .git/ is recorded or restored.
    assert!(!undone.contains(".git/"), "{undone}");
    assert!(!sent.contains(".git/"), "{sent}");
    assert_eq!(git_head(&work), head);

    if executor != "local" {
        return;
    }
    let Some(_) = dsh_launch_find("npm") else {
        assert!(std::env::var_os("CI").is_none(), "npm is missing under CI");
        crate::support::skipped("npm is not installed");
        return;
    };
    std::fs::create_dir_all(work.join("pkg")).unwrap();
    std::fs::write(
        work.join("pkg/package.json"),
        r#"{"name": "pkg", "version": "1.0.0"}"#,
    )
    .unwrap();
    let before_npm = fingerprint(&work);
    let installed = server.call_ok(
        "terminal_send",
        json!({"id": term, "input": "npm install --offline --no-audit --no-fund ./pkg >/dev/null 2>&1; echo INSTALLED-$((6*7))", "wait": {"pattern": "INSTALLED-42", "timeout_ms": 60000}}),
    );
    assert!(work.join("node_modules").exists(), "{installed}");
    assert!(
        installed.contains("node_modules/ (ignored)"),
        "the result says node_modules/ is not recorded: {installed}"
    );
    undo(&server, &undo_id(&installed));
    assert_eq!(fingerprint(&work), before_npm);
    assert!(
        work.join("node_modules").exists(),
        "what is ignored is left as it is"
    );
}

fn git_head(dir: &Path) -> String {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn dsh_launch_find(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
    })
}

/// One `apply_patch` adding, updating and deleting across five files is one record,
/// undone whole.
#[test]
fn an_apply_patch_across_five_files_is_undone_whole() {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let server = McpServer::start(&env, "");
    for path in ["README.md", "src/main.rs", "c"] {
        server.call_ok("read", json!({"path": path}));
    }
    let patch = "*** Begin Patch\n\
                 *** Add File: new/one.txt\n+one\n\
                 *** Add File: two.txt\n+two\n\
                 *** Update File: README.md\n@@\n-hello, project\n+hello, patched\n\
                 *** Update File: src/main.rs\n@@\n-fn main() {}\n+fn main() { patched() }\n\
                 *** Delete File: c\n\
                 *** End Patch\n";
    let patched = server.call_ok("apply_patch", json!({"patch": patch}));
    assert!(patched.contains("[changed: "), "{patched}");
    assert!(!env.workdir().join("c").exists());
    undo(&server, &undo_id(&patched));
    assert_eq!(fingerprint(&env.workdir()), before);
}

/// A subagent's steps (here a `bash` step its operator model asks for) are undone with
/// the `subagent` call.
#[test]
fn a_subagent_s_edits_are_undone_with_its_call() {
    for executor in executors() {
        subagent_round_trip(executor);
    }
}

fn subagent_round_trip(executor: &str) {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let operator = crate::agent_clients::ChatEndpoint::start(|n| match n {
        1 => crate::agent_clients::completion(json!({
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "bash",
                "arguments": "{\"command\": \"echo by-the-subagent > README.md && rm -r src\", \"description\": \"edit\"}"}}]
        })),
        _ => crate::agent_clients::completion(json!({"role": "assistant", "content": "edited"})),
    });
    let server = McpServer::start(
        &env,
        &format!(
            "{}{}",
            executor_config(executor),
            crate::agent_clients::operator_model_config(operator.port)
        ),
    );
    let ran = server.call_ok("subagent", json!({"prompt": "edit the readme"}));
    assert_ne!(fingerprint(&env.workdir()), before, "{executor}: {ran}");
    assert!(ran.contains("[changed: "), "{executor}: {ran}");
    undo(&server, &undo_id(&ran));
    assert_eq!(fingerprint(&env.workdir()), before, "under {executor}");
}

/// An undo never overwrites what it did not make: a later call's change, or one made
/// outside dsh, refuses it whole.
#[test]
fn an_undo_over_a_later_change_refuses_and_changes_nothing_and_in_order_it_works() {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let server = McpServer::start(&env, "");
    let first = bash(&server, "echo one > f && echo first >> README.md");
    let after_first = fingerprint(&env.workdir());
    let second = bash(&server, "echo two > f");
    let after_second = fingerprint(&env.workdir());
    let refused = server.call("undo", json!({"call_id": undo_id(&first)}));
    assert!(refused.is_error, "{refused:?}");
    assert_eq!(
        refused.code.as_deref(),
        Some("UNDO_CONFLICT"),
        "{refused:?}"
    );
    assert!(
        refused.text.contains("f: changed since") && refused.text.contains(&undo_id(&second)),
        "names the path and the call: {}",
        refused.text
    );
    assert_eq!(fingerprint(&env.workdir()), after_second, "nothing changed");
    // A change outside dsh is named too, and never overwritten.
    std::fs::write(env.workdir().join("f"), "outside\n").unwrap();
    let outside = server.call("undo", json!({"call_id": undo_id(&second)}));
    assert_eq!(
        outside.code.as_deref(),
        Some("UNDO_CONFLICT"),
        "{outside:?}"
    );
    assert_eq!(
        std::fs::read_to_string(env.workdir().join("f")).unwrap(),
        "outside\n"
    );
    std::fs::write(env.workdir().join("f"), "two\n").unwrap();
    // In order: the second, then the first.
    undo(&server, &undo_id(&second));
    assert_eq!(fingerprint(&env.workdir()), after_first);
    let undone_first = undo(&server, &undo_id(&first));
    assert_eq!(fingerprint(&env.workdir()), before);
    // The undo of the undo puts the first call's changes back.
    undo(&server, &undo_id(&undone_first));
    assert_eq!(fingerprint(&env.workdir()), after_first);
}

/// `and_later` undoes the caller's later calls on the same paths too, newest first.
#[test]
fn and_later_undoes_the_later_calls_on_the_same_paths_too() {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let server = McpServer::start(&env, "");
    let first = bash(&server, "echo one > f");
    bash(&server, "echo two > f && echo more > g");
    let undone = server.call_ok(
        "undo",
        json!({"call_id": undo_id(&first), "and_later": true}),
    );
    assert_eq!(fingerprint(&env.workdir()), before, "{undone}");
}

/// A SIGKILL leaves the journal as it was; the next start finds the records, and what
/// changed while no dsh ran.
#[test]
fn the_records_survive_a_sigkill_of_dsh_and_a_restart() {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let mut server = McpServer::start(&env, "");
    let ran = bash(&server, DESTRUCTIVE);
    let id = undo_id(&ran);
    server.signal(libc::SIGKILL);
    server.wait_exit(Duration::from_secs(10)).expect("dsh died");
    // While no dsh runs, a file changes: the next start records it as made outside.
    std::fs::write(
        env.workdir().join("outside.txt"),
        "made while dsh was down\n",
    )
    .unwrap();
    let server = McpServer::start(&env, "");
    let listed = server.call_ok("checkpoints", json!({}));
    assert!(listed.contains(&id), "{listed}");
    undo(&server, &id);
    let mut expected = before.clone();
    expected.insert(
        "outside.txt".into(),
        "file 644 made while dsh was down\n".into(),
    );
    assert_eq!(fingerprint(&env.workdir()), expected);
    let everyone = env.dsh().args(["checkpoints", "--json"]).output().unwrap();
    let everyone = String::from_utf8_lossy(&everyone.stdout);
    assert!(
        everyone.contains("changed while no dsh watched"),
        "{everyone}"
    );
}

/// The operator's `dsh undo --session S --call N`, with no server running.
#[test]
fn the_operator_undoes_a_call_from_the_command_line() {
    let env = Env::new();
    project(&env.workdir());
    let before = fingerprint(&env.workdir());
    let ran = env.call(
        "bash",
        &json!({"command": DESTRUCTIVE, "description": "t"}).to_string(),
    );
    let id = undo_id(&ran.content);
    let (session, call) = id.split_once('/').unwrap();
    let call = call.trim_start_matches("call-");
    let output = env
        .dsh()
        .args(["undo", "--session", session, "--call", call])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(fingerprint(&env.workdir()), before);
    // Again: it is undone already, and the answer says what changed it since.
    let again = env.dsh().args(["undo", &id]).output().unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("UNDO_CONFLICT"),
        "{again:?}"
    );
}

/// Past `[undo] max_call_bytes`, the call runs and its result names what was not kept.
#[test]
fn a_call_past_the_byte_cap_runs_and_says_what_was_not_recorded() {
    let env = Env::new();
    project(&env.workdir());
    let config = "[undo]\nmax_call_bytes = 4096\n";
    let server = McpServer::start(&env, config);
    let ran = bash(
        &server,
        "head -c 10000 /dev/zero > big.bin && echo small > small.txt && echo done",
    );
    assert!(ran.contains("done"), "the call ran: {ran}");
    assert!(
        ran.contains("not recorded: big.bin (9.8 KiB): past [undo] max_call_bytes"),
        "{ran}"
    );
    let undone = undo(&server, &undo_id(&ran));
    assert!(!env.workdir().join("small.txt").exists(), "{undone}");
    assert!(
        undone.contains("big.bin"),
        "says big.bin is not restored: {undone}"
    );
}

/// Undo stays on the workspace's filesystem: another one mounted inside the workspace is
/// neither read into a record nor put back, and the call's changes beside it are.
#[test]
fn another_filesystem_mounted_in_the_workspace_is_left_out() {
    let env = Env::new();
    project(&env.workdir());
    let disk = env.workdir().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let Some(_tmpfs) = crate::full_disk::Tmpfs::at(disk.clone(), "1m", "inside the workspace")
    else {
        return;
    };
    std::fs::write(disk.join("kept.txt"), "on the other filesystem\n").unwrap();
    let server = McpServer::start(&env, &executor_config("local"));
    let ran = bash(
        &server,
        "rm disk/kept.txt && mkdir disk/sub && echo made > disk/sub/made.txt \
         && echo edited > README.md && echo ran-beside-it",
    );
    assert!(ran.contains("ran-beside-it"), "{ran}");
    assert!(
        ran.contains("[changed: 1 path ("),
        "only README.md is recorded: {ran}"
    );
    let undone = undo(&server, &undo_id(&ran));
    assert_eq!(
        std::fs::read_to_string(env.workdir().join("README.md")).unwrap(),
        "hello, project\n",
        "{undone}"
    );
    assert!(!disk.join("kept.txt").exists(), "{undone}");
    assert_eq!(
        std::fs::read_to_string(disk.join("sub/made.txt")).unwrap(),
        "made\n",
        "{undone}"
    );
}

/// A full state directory: the call runs to its end, and its result says the record was lost.
#[test]
fn a_full_disk_fails_no_call_and_the_result_says_the_record_was_lost() {
    let env = Env::new();
    project(&env.workdir());
    let Some(tmpfs) = crate::full_disk::Tmpfs::over_state_dir(&env, "2m") else {
        return;
    };
    let server = McpServer::start(&env, "");
    // Full, but for room enough for the event log's lines.
    tmpfs.fill();
    tmpfs.free_some(48 << 10);
    let ran = bash(
        &server,
        "head -c 300000 /dev/urandom > big.bin && echo ran-to-the-end",
    );
    assert!(ran.contains("ran-to-the-end"), "{ran}");
    assert!(ran.contains("record was lost"), "{ran}");
    drop(server);
    drop(tmpfs);
}
