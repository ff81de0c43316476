//! Test plugin `prober`: tries to reach files, environment variables and the network
//! through the WASI std APIs and reports what happened, so the host's end-to-end tests
//! can prove a plugin gets only what it was granted. It imports no dsh host interface;
//! every failure comes back as `capability-denied` with the I/O error.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use dsh::plugin::types::ErrorCode;
use serde_json::Value;

wit_bindgen::generate!({ path: "../../wit", world: "tool" });
include!("../../shared/results.rs");

struct Prober;

/// A tool spec whose arguments are all required strings.
fn spec(name: &str, description: &str, keys: &[&str]) -> ToolSpec {
    let properties: Vec<String> = keys
        .iter()
        .map(|k| format!(r#""{k}":{{"type":"string"}}"#))
        .collect();
    let required: Vec<String> = keys.iter().map(|k| format!(r#""{k}""#)).collect();
    ToolSpec {
        name: name.into(),
        description: format!("Test fixture probing the plugin sandbox: {description}"),
        input_schema: format!(
            r#"{{"type":"object","properties":{{{}}},"required":[{}],"additionalProperties":false}}"#,
            properties.join(","),
            required.join(",")
        ),
        idempotent: false,
        output_budget: None,
    }
}

impl Guest for Prober {
    fn describe() -> Vec<ToolSpec> {
        vec![
            spec(
                "read_file",
                "read the file at `path` and return its text.",
                &["path"],
            ),
            spec(
                "write_file",
                "write `text` to the file at `path`.",
                &["path", "text"],
            ),
            spec(
                "list_dir",
                "list the entries of the directory at `path`, sorted.",
                &["path"],
            ),
            spec(
                "env",
                "return the value of the environment variable `key`.",
                &["key"],
            ),
            spec(
                "connect",
                "open a TCP connection to `addr` (host:port), send a ping and return any reply.",
                &["addr"],
            ),
        ]
    }

    fn call(_context: CallContext, name: String, args_json: String) -> ToolResult {
        let args: Value = serde_json::from_str(&args_json).unwrap_or(Value::Null);
        let arg = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let outcome = match name.as_str() {
            "read_file" => {
                let path = arg("path");
                std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))
            }
            "write_file" => {
                let (path, text) = (arg("path"), arg("text"));
                std::fs::write(&path, &text)
                    .map(|()| format!("wrote {} bytes to {path}", text.len()))
                    .map_err(|e| format!("cannot write {path}: {e}"))
            }
            "list_dir" => {
                let path = arg("path");
                list_dir(&path).map_err(|e| format!("cannot list {path}: {e}"))
            }
            "env" => {
                let key = arg("key");
                std::env::var(&key)
                    .map_err(|e| format!("environment variable {key} is not visible: {e}"))
            }
            "connect" => {
                let addr = arg("addr");
                connect(&addr).map_err(|e| format!("cannot connect to {addr}: {e}"))
            }
            _ => {
                return failure(
                    ErrorCode::UnknownTool,
                    format!("prober has no tool `{name}`"),
                );
            }
        };
        match outcome {
            Ok(content) => ToolResult {
                content,
                error: None,
                full_output_path: None,
            },
            Err(message) => failure(ErrorCode::CapabilityDenied, message),
        }
    }
}

/// The names of the directory's entries, sorted, one per line.
fn list_dir(path: &str) -> std::io::Result<String> {
    let mut names = std::fs::read_dir(path)?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names.join("\n"))
}

/// Connects, sends `ping\n` and reads up to 64 bytes of reply (2 s read timeout where
/// the platform supports one; a failed or timed-out read just leaves the reply empty).
fn connect(addr: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.write_all(b"ping\n")?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reply = [0u8; 64];
    let read = stream.read(&mut reply).unwrap_or(0);
    Ok(format!(
        "connected to {addr}\n{}",
        String::from_utf8_lossy(&reply[..read])
    ))
}

export!(Prober);
