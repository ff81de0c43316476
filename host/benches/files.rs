//! The file tools against native baselines run in the same process run:
//!
//! 1. `grep` (the `files` plugin, through the whole pipeline) for a literal and
//!    for a regex over a generated tree of 10,000 files (about 100 MB), against ripgrep
//!    run single-threaded (`rg -j1`, Debian's `ripgrep`) on the same tree, runs
//!    interleaved. Target: ratio <= 1.5 for the literal, <= 2 for the regex. Then where the plugin's time goes: the same
//!    search with a pattern that matches nothing (walking and reading only) and a
//!    `glob` of every file (walking only).
//! 2. `read` of a 1 MB file and a one-line `edit` of it through the whole pipeline,
//!    against a native read (`std::fs::read`) and a native read + write + fsync +
//!    rename + fsync of the directory (what dsh's commit does). Target: at most 1 ms
//!    added. Then where a read's time goes: an `echo` call (the pipeline and a fresh
//!    instance) and a one-line `read` (the whole file read and its lines counted by the
//!    host, which sends the plugin only the page: `files.read-lines`), and
//!    where an edit's goes: a `write` of the same megabyte (the commit without the read
//!    and the search), and the same edit on a host with `[undo]` off (undo's record of
//!    every call is a rule, not a choice: that line is the rule's cost alone).
//!
//! Run with `cargo bench --profile dev --bench files` (the tree is made once under the
//! target directory and kept: `target/tmp/files-bench-tree`).

mod support;

use support::{ms, percentile};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use dsh::call::CallRequest;
use dsh::config::Config;
use dsh::host::{Host, HostOptions};
use serde_json::{json, Value};

const FILES: usize = 10_000;
const FILE_BYTES: usize = 10_000;

/// A tree of `FILES` text files in 100 directories, each about `FILE_BYTES`: source-like
/// lines, one file in 50 holding `needle_marker`. Made once; kept.
fn tree() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tmp/files-bench-tree");
    let done = root.join(".complete");
    if done.exists() {
        return root;
    }
    let _ = std::fs::remove_dir_all(&root);
    let words = [
        "let", "value", "return", "struct", "impl", "self", "match", "Some", "None", "error",
        "config", "path", "buffer", "index", "count", "result", "handle", "stream",
    ];
    let mut seed: u64 = 7;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for n in 0..FILES {
        let dir = root.join(format!("d{:02}", n % 100));
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::with_capacity(FILE_BYTES + 100);
        while text.len() < FILE_BYTES {
            let len = 4 + next() % 8;
            for _ in 0..len {
                text.push_str(words[(next() % words.len() as u64) as usize]);
                text.push(' ');
            }
            text.push_str(&format!("{};\n", next() % 100_000));
        }
        if n % 50 == 0 {
            text.push_str("    let needle_marker = find(haystack_42);\n");
        }
        std::fs::write(dir.join(format!("f{n:05}.rs")), text).unwrap();
    }
    std::fs::write(&done, "").unwrap();
    root
}

fn report(name: &str, samples: &mut [Duration]) -> Duration {
    let p50 = percentile(samples, 0.5);
    println!(
        "{name:<52} p50 {:>9.2} ms   p90 {:>9.2} ms   (n={})",
        ms(p50),
        ms(percentile(samples, 0.9)),
        samples.len()
    );
    p50
}

/// A host serving the embedded file tools, and `echo` (the smallest tool: the floor of a
/// call through the pipeline) from a plugin directory.
async fn start(workdir: &Path, state: &Path) -> Host {
    start_with(workdir, state, true).await
}

/// [`start`], with undo's recording of every call on or off.
async fn start_with(workdir: &Path, state: &Path, undo: bool) -> Host {
    let plugins = support::plugin_dir(state.parent().unwrap(), &[("echo", "echo")]);
    let mut config = Config::default();
    // Room for a whole search's answer, and time for a slow machine.
    config.limits.output_budget_bytes = 1 << 20;
    config.undo.enabled = undo;
    let host = Host::start(HostOptions {
        config,
        plugins_dir: Some(plugins),
        state_dir: state.to_path_buf(),
        workdir: workdir.to_path_buf(),
        config_file: None,
        resume: None,
    })
    .await
    .expect("the host starts");
    host.loaded().await;
    host
}

async fn call(host: &Host, tool: &str, args: &Value) -> String {
    let never = tokio_util::sync::CancellationToken::new();
    let result = host
        .pipeline
        .call(
            CallRequest::new(tool, args.clone(), "bench", "default"),
            &never,
        )
        .await;
    assert!(result.error.is_none(), "{tool} {args}: {:?}", result.error);
    result.content_text()
}

fn rg(root: &Path, pattern: &str, fixed: bool) -> usize {
    let mut command = Command::new("rg");
    command.args(["-j1", "-l", "--no-messages"]);
    if fixed {
        command.arg("-F");
    }
    let out = command
        .arg(pattern)
        .arg(root)
        .output()
        .expect("rg (Debian's ripgrep) runs");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::main]
async fn main() {
    let root = tree();
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    let host = start(&root, &state).await;

    println!(
        "== grep over {FILES} files (~{} MB), pipeline + files plugin vs rg -j1",
        FILES * FILE_BYTES / 1_000_000
    );
    let runs = 7;
    for (label, pattern, fixed, target) in [
        ("literal", "needle_marker", true, 1.5),
        ("regex", r"needle_\w+ = find\(haystack_\d+\)", false, 2.0),
    ] {
        // Warm both (and the page cache), and check they agree.
        let found = call(
            &host,
            "grep",
            &json!({"pattern": pattern, "head_limit": 100000}),
        )
        .await;
        let listed = found.lines().filter(|l| l.ends_with(".rs")).count();
        assert_eq!(
            listed,
            rg(&root, pattern, fixed),
            "dsh and rg disagree:\n{found}"
        );
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let started = Instant::now();
            call(
                &host,
                "grep",
                &json!({"pattern": pattern, "head_limit": 100000}),
            )
            .await;
            ours.push(started.elapsed());
            let started = Instant::now();
            rg(&root, pattern, fixed);
            theirs.push(started.elapsed());
        }
        let base = report(&format!("rg -j1 -l ({label})"), &mut theirs);
        let full = report(&format!("dsh grep files_with_matches ({label})"), &mut ours);
        println!(
            "grep {label}: ratio {:.2} (target <= {target})",
            ms(full) / ms(base)
        );
    }
    // Where the time goes: walking and reading every file with no match, then walking only.
    let mut nothing = Vec::new();
    let mut walk = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        call(&host, "grep", &json!({"pattern": "zq_never_here_zq"})).await;
        nothing.push(started.elapsed());
        let started = Instant::now();
        call(&host, "glob", &json!({"pattern": "**/*.rs"})).await;
        walk.push(started.elapsed());
    }
    report("dsh grep, no match (walk + read every file)", &mut nothing);
    report("dsh glob **/*.rs (walk + stat only)", &mut walk);

    println!("== read of a 1 MB file and a one-line edit, pipeline vs native");
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let edits = start(&work, &scratch.path().join("state2")).await;
    let file = work.join("big.txt");
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 1_000_000 {
        text.push_str(&format!("line {n} of the file that is being edited\n"));
        n += 1;
    }
    std::fs::write(&file, &text).unwrap();
    // The same file on its own workspace, for a host that records no undo.
    let plain_work = scratch.path().join("plain");
    std::fs::create_dir_all(&plain_work).unwrap();
    std::fs::write(plain_work.join("big.txt"), &text).unwrap();
    let plain = start_with(&plain_work, &scratch.path().join("state3"), false).await;
    call(&plain, "read", &json!({"path": "big.txt", "limit": 1})).await;
    let runs = 60;
    let (mut read_dsh, mut read_native, mut edit_dsh, mut edit_native) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut edit_plain = Vec::new();
    let (mut floor, mut read_one, mut write_dsh) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let started = Instant::now();
        call(&edits, "echo", &json!({"text": "x"})).await;
        floor.push(started.elapsed());

        let started = Instant::now();
        call(&edits, "read", &json!({"path": "big.txt", "limit": 1})).await;
        read_one.push(started.elapsed());

        let started = Instant::now();
        call(&edits, "read", &json!({"path": "big.txt", "limit": 2000})).await;
        read_dsh.push(started.elapsed());

        let started = Instant::now();
        let bytes = std::fs::read(&file).unwrap();
        std::hint::black_box(&bytes);
        read_native.push(started.elapsed());

        let (old, new) = (format!("line {} of", i + 1), format!("LINE {} of", i + 1));
        let started = Instant::now();
        call(&edits, "edit", &json!({"path": "big.txt", "old_string": format!("\n{old} "), "new_string": format!("\n{new} ")})).await;
        edit_dsh.push(started.elapsed());

        let started = Instant::now();
        call(&plain, "edit", &json!({"path": "big.txt", "old_string": format!("\n{old} "), "new_string": format!("\n{new} ")})).await;
        edit_plain.push(started.elapsed());

        let started = Instant::now();
        let contents = std::fs::read_to_string(&file).unwrap();
        let changed = contents.replacen(&new, &old, 1);
        let temp = work.join(".big.txt.native");
        std::fs::write(&temp, changed).unwrap();
        std::fs::File::open(&temp).unwrap().sync_all().unwrap();
        std::fs::rename(&temp, &file).unwrap();
        // As dsh's commit does: the rename is on disk when the call returns.
        std::fs::File::open(&work).unwrap().sync_all().unwrap();
        edit_native.push(started.elapsed());
        // The native edit changed the file behind dsh's read: read it again.
        call(&edits, "read", &json!({"path": "big.txt", "limit": 1})).await;

        // The commit alone: a whole-file write of what is there (no read, no search).
        let contents = std::fs::read_to_string(&file).unwrap();
        let started = Instant::now();
        call(
            &edits,
            "write",
            &json!({"path": "big.txt", "content": contents}),
        )
        .await;
        write_dsh.push(started.elapsed());
    }
    let base = report("native std::fs::read (1 MB)", &mut read_native);
    let full = report("dsh read (1 MB file, first 2000 lines)", &mut read_dsh);
    println!("read: {:.2} ms added (target <= 1 ms)", ms(full) - ms(base));
    println!("where a read's time goes:");
    let echo = report("  dsh echo (the pipeline and a fresh instance)", &mut floor);
    let one = report(
        "  dsh read, 1 line (+ the 1 MB read and counted by the host)",
        &mut read_one,
    );
    println!(
        "  the pipeline {:.2} ms, the file read and counted {:.2} ms, 2000 numbered lines out {:.2} ms",
        ms(echo),
        ms(one) - ms(echo),
        ms(full) - ms(one)
    );
    let base = report(
        "native read + write + fsync + rename + fsync dir",
        &mut edit_native,
    );
    let full = report("dsh edit (one line of a 1 MB file)", &mut edit_dsh);
    println!("edit: {:.2} ms added (target <= 1 ms)", ms(full) - ms(base));
    println!("where an edit's time goes:");
    let write = report(
        "  dsh write of the same 1 MB (the argument in, the commit)",
        &mut write_dsh,
    );
    println!(
        "  the write path {:.2} ms over native; the edit's own read and search {:.2} ms",
        ms(write) - ms(base),
        ms(full) - ms(write)
    );
    let unrecorded = report("  dsh edit with [undo] off", &mut edit_plain);
    println!(
        "  undo's record {:.2} ms; without it the edit adds {:.2} ms (target <= 1 ms)",
        ms(full) - ms(unrecorded),
        ms(unrecorded) - ms(base)
    );
}
