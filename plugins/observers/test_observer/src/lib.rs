//! `test_observer`: a test observer whose behaviour comes from its settings (read with
//! `dsh_plugin::observer::settings`), so the host tests can see what an observer is
//! given and what a slow, failing or overreaching one does.
//!
//! Settings: `mode` is
//! - `record` (the default): appends each event's JSON and a newline to the file at
//!   `path` (in a directory the test grants read-write); traps when there is no `path`
//!   or the write fails;
//! - `sleep`: sleeps `sleep_ms` (default 1000) and returns;
//! - `trap`: panics;
//! - `escape`: tries to append to the file at `path` (outside every grant) and logs
//!   what happened: a warning `test_observer: cannot write PATH: ERROR`, or
//!   `test_observer: wrote PATH` (info) when it could.
//!
//! An unknown `mode` traps, naming it.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Duration;

use dsh_plugin::observer::log::{self, Level};
use dsh_plugin::observer::settings;
use dsh_plugin::{ObservedEvent, Observer};
use serde_json::Value;

struct TestObserver;

impl Observer for TestObserver {
    fn observe(event: ObservedEvent) {
        let settings: Value = settings(&event);
        let path = settings.get("path").and_then(Value::as_str);
        match settings
            .get("mode")
            .and_then(Value::as_str)
            .unwrap_or("record")
        {
            "record" => {
                let path = path.expect("test_observer: no `path` setting");
                if let Err(e) = append(path, &event.json) {
                    panic!("test_observer: cannot write {path}: {e}");
                }
            }
            "sleep" => {
                let sleep_ms = settings
                    .get("sleep_ms")
                    .and_then(Value::as_u64)
                    .unwrap_or(1000);
                std::thread::sleep(Duration::from_millis(sleep_ms));
            }
            "trap" => panic!("test_observer: trap on {}", event.kind),
            "escape" => {
                let path = path.expect("test_observer: no `path` setting");
                match append(path, &event.json) {
                    Ok(()) => log::write(Level::Info, &format!("test_observer: wrote {path}")),
                    Err(e) => log::write(
                        Level::Warn,
                        &format!("test_observer: cannot write {path}: {e}"),
                    ),
                }
            }
            other => panic!("test_observer: unknown mode `{other}`"),
        }
    }
}

/// Appends `json` and a newline to the file at `path` (made when missing), in one write.
fn append(path: &str, json: &str) -> std::io::Result<()> {
    let mut file = OpenOptions::new().append(true).create(true).open(path)?;
    file.write_all(format!("{json}\n").as_bytes())
}

dsh_plugin::export!(observer: TestObserver);
