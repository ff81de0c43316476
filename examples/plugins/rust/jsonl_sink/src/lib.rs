//! `jsonl_sink`: an observer that appends every record of the event log it sees (calls,
//! results, approvals, jobs) to the file at `path` (a setting), one JSON object a line,
//! for another program to follow (`tail -f`, a log shipper). The file's directory must
//! be granted read-write:
//!
//! ```toml
//! [pipeline]
//! observers = ["jsonl_sink"]
//! [plugins.jsonl_sink]
//! interfaces = ["log"]
//! fs = [{ path = "/var/log/dsh", mode = "rw" }]
//! [plugins.jsonl_sink.settings]
//! path = "/var/log/dsh/events.jsonl"
//! ```
//!
//! An observer cannot fail a call: when it cannot write, it logs a warning and the
//! record is not kept.

use std::fs::OpenOptions;
use std::io::Write;

use dsh_plugin::observer::log::{self, Level};
use dsh_plugin::observer::settings;
use dsh_plugin::{ObservedEvent, Observer};
use serde::Deserialize;

/// `[plugins.jsonl_sink.settings]`.
#[derive(Deserialize, Default)]
struct Settings {
    /// The file the records are appended to.
    path: Option<String>,
}

struct JsonlSink;

impl Observer for JsonlSink {
    fn observe(event: ObservedEvent) {
        let Settings { path } = settings(&event);
        let Some(path) = path else {
            log::write(Level::Warn, "jsonl_sink: no `path` setting");
            return;
        };
        // One write per record, to a file opened for appending: records from observers
        // running side by side never interleave.
        let line = format!("{}\n", event.json);
        let written = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = written {
            log::write(
                Level::Warn,
                &format!("jsonl_sink: cannot write {path}: {e}"),
            );
        }
    }
}

dsh_plugin::export!(observer: JsonlSink);
