//! `audit`: an observer that writes every call's outcome (the event log's `tool/result`
//! records; it ignores the others) to a file as one JSON line each, an OCSF 1.3.0 "API
//! Activity" record (class 6003): who called (`actor.user.uid`, the owner, and
//! `actor.session.uid`), what (`api.operation`, the tool; `api.request.uid`, the call
//! id), when (`time`, ms since the epoch) and for how long (`duration`, ms), and how it
//! went (`status`; `status_code` and `status_detail`, the error's code and message, when
//! it failed). What OCSF has no field for is under `unmapped`: the scope, the attempts,
//! the content's size in bytes and, when a middleware answered the call, its name
//! (`answered_by`).
//!
//! Settings: `path`, the file (required; made when missing, appended to). Its directory
//! must be granted read-write, e.g.
//! `[plugins.audit] fs = [{ path = "/var/log/dsh", mode = "rw" }]` and
//! `[plugins.audit.settings] path = "/var/log/dsh/audit.jsonl"`. Each record is one
//! write to the file opened for appending, so records never interleave. An observer
//! cannot fail a call: without `path`, or when a write fails, it logs a warning and
//! the record is lost.

use std::fs::OpenOptions;
use std::io::Write;

use dsh_plugin::observer::log::{self, Level};
use dsh_plugin::observer::settings;
use dsh_plugin::{ObservedEvent, Observer};
use serde_json::{json, Map, Value};

struct Audit;

impl Observer for Audit {
    fn observe(event: ObservedEvent) {
        if event.kind != "tool/result" {
            return;
        }
        let settings: Value = settings(&event);
        let Some(path) = settings.get("path").and_then(Value::as_str) else {
            warn("audit: [plugins.audit.settings] path is not set: the record is not kept");
            return;
        };
        let record = match serde_json::from_str::<Value>(&event.json) {
            Ok(record @ Value::Object(_)) => record,
            _ => {
                warn("audit: a tool/result record is not a JSON object: it is not kept");
                return;
            }
        };
        let line = format!("{}\n", api_activity(&record));
        let written = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = written {
            warn(&format!("audit: cannot write {path}: {e}"));
        }
    }
}

fn warn(message: &str) {
    log::write(Level::Warn, message);
}

/// The OCSF API Activity record of a `tool/result` record.
fn api_activity(record: &Value) -> Value {
    let field = |name: &str| record.get(name).cloned().unwrap_or(Value::Null);
    let failed = record.get("is_error").and_then(Value::as_bool) == Some(true);
    let mut activity = json!({
        "class_uid": 6003,
        "class_name": "API Activity",
        "category_uid": 6,
        "category_name": "Application Activity",
        "activity_id": 99,
        "activity_name": "Other",
        "type_uid": 600399,
        "type_name": "API Activity: Other",
        "severity_id": 1,
        "severity": "Informational",
        "status_id": if failed { 2 } else { 1 },
        "status": if failed { "Failure" } else { "Success" },
        "time": field("ts_ms"),
        "actor": {
            "user": {"uid": field("owner")},
            "session": {"uid": field("session")},
        },
        "api": {
            "operation": field("tool"),
            "request": {"uid": field("call_id")},
            "service": {"name": "dsh"},
        },
        "metadata": {
            "version": "1.3.0",
            "product": {"name": "dsh", "vendor_name": "dsh"},
            "log_name": "dsh audit",
        },
    });
    let mut unmapped = Map::new();
    for name in ["scope", "attempts", "answered_by", "content_bytes"] {
        if let Some(value) = record.get(name).filter(|value| !value.is_null()) {
            unmapped.insert(name.into(), value.clone());
        }
    }
    let fields = activity.as_object_mut().expect("an object");
    fields.insert("unmapped".into(), unmapped.into());
    if let Some(us) = record.get("duration_us").and_then(Value::as_u64) {
        fields.insert("duration".into(), (us / 1000).into());
    }
    if failed {
        for (from, to) in [("code", "status_code"), ("message", "status_detail")] {
            if let Some(value) = record.get(from).filter(|value| value.is_string()) {
                fields.insert(to.into(), value.clone());
            }
        }
    }
    activity
}

dsh_plugin::export!(observer: Audit);

#[cfg(test)]
mod tests {
    use super::api_activity;
    use serde_json::json;

    #[test]
    fn a_failed_call_is_a_failure_with_its_code_and_message() {
        let activity = api_activity(&json!({
            "ts_ms": 1_700_000_000_123u64, "event": "tool/result", "call_id": "call-7",
            "session": "s1", "owner": "agent", "scope": "default", "tool": "bash",
            "is_error": true, "code": "TIMEOUT", "message": "ran past 30 s",
            "content_bytes": 12, "full_output_path": null, "duration_us": 30_000_999u64,
            "attempts": 1,
        }));
        assert_eq!(
            activity,
            json!({
                "class_uid": 6003, "class_name": "API Activity",
                "category_uid": 6, "category_name": "Application Activity",
                "activity_id": 99, "activity_name": "Other",
                "type_uid": 600399, "type_name": "API Activity: Other",
                "severity_id": 1, "severity": "Informational",
                "status_id": 2, "status": "Failure",
                "status_code": "TIMEOUT", "status_detail": "ran past 30 s",
                "time": 1_700_000_000_123u64, "duration": 30_000,
                "actor": {"user": {"uid": "agent"}, "session": {"uid": "s1"}},
                "api": {
                    "operation": "bash",
                    "request": {"uid": "call-7"},
                    "service": {"name": "dsh"},
                },
                "metadata": {
                    "version": "1.3.0",
                    "product": {"name": "dsh", "vendor_name": "dsh"},
                    "log_name": "dsh audit",
                },
                "unmapped": {"scope": "default", "attempts": 1, "content_bytes": 12},
            })
        );
    }

    #[test]
    fn a_successful_call_has_no_status_code_and_names_the_middleware_that_answered() {
        let activity = api_activity(&json!({
            "ts_ms": 5, "event": "tool/result", "call_id": "call-1", "session": "s",
            "owner": "o", "scope": "default", "tool": "echo", "is_error": false,
            "code": null, "message": null, "content_bytes": 2, "full_output_path": null,
            "duration_us": 999, "attempts": 1, "answered_by": "cache",
        }));
        assert_eq!(activity["status_id"], 1);
        assert_eq!(activity["status"], "Success");
        assert!(activity.get("status_code").is_none() && activity.get("status_detail").is_none());
        assert_eq!(activity["duration"], 0);
        assert_eq!(activity["unmapped"]["answered_by"], "cache");
    }
}
