//! The tool reference page, `docs/src/reference/tools.md`: rendered from what
//! `dsh tools --json` prints for the embedded tools under the default configuration (a
//! fresh state directory, no dsh.toml) and checked against the committed file, which
//! `DSH_UPDATE_DOCS=1` rewrites.

use std::path::Path;

use serde_json::{Map, Value};

use crate::support::Env;

/// The page, relative to the repository.
const PAGE: &str = "docs/src/reference/tools.md";

/// The command that regenerates the page.
const REGENERATE: &str = "DSH_UPDATE_DOCS=1 cargo test --test e2e reference_pages";

/// `value` with every object's keys in sorted order (whatever order the JSON map keeps).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for key in keys {
                out.insert(key.clone(), sorted(&map[key]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// A tool's text as Markdown prose: outside its code spans, the characters Markdown would
/// read as emphasis, HTML or an escape are escaped; the code spans stay as they are.
fn prose(text: &str) -> String {
    text.split('`')
        .enumerate()
        .map(|(at, part)| {
            if at % 2 == 1 {
                return part.to_string();
            }
            part.chars().fold(String::new(), |mut out, c| {
                if matches!(c, '\\' | '*' | '<') {
                    out.push('\\');
                }
                out.push(c);
                out
            })
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// Text for one cell of a Markdown table: one line, its pipes escaped (code spans
/// included, as tables need).
fn cell(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A tool's full description: a paragraph, or, when it has line breaks (a format laid out
/// line by line), a text block that keeps them.
fn description_block(description: &str) -> String {
    if !description.contains('\n') {
        return prose(description);
    }
    let fence = if description.contains("```") {
        "~~~~"
    } else {
        "```"
    };
    format!("{fence}text\n{description}\n{fence}")
}

/// The description's first sentence: up to the first full stop followed by a space or
/// the line's end (not in a code span, nor one of an abbreviation such as `e.g.`), or its
/// first line.
fn first_sentence(description: &str) -> &str {
    let first_line = description.lines().next().unwrap_or("").trim();
    let bytes = first_line.as_bytes();
    let mut in_code = false;
    for (at, byte) in bytes.iter().enumerate() {
        if *byte == b'`' {
            in_code = !in_code;
        }
        if in_code || *byte != b'.' || bytes.get(at + 1).is_some_and(|next| *next != b' ') {
            continue;
        }
        let word = first_line[..at]
            .rsplit(' ')
            .next()
            .unwrap_or("")
            .trim_start_matches(|c: char| !c.is_alphanumeric());
        if ["e.g", "i.e", "etc", "vs"].contains(&word) {
            continue;
        }
        return &first_line[..=at];
    }
    first_line
}

/// A JSON value as inline code (a string without its quotes).
fn code(value: &Value) -> String {
    match value {
        Value::String(text) => format!("`{text}`"),
        other => format!("`{other}`"),
    }
}

/// An argument's type in a few words: its JSON type (an array with its items' type),
/// its values when it is an enumeration, its branches when it has several.
fn type_summary(schema: &Value) -> String {
    if let Some(values) = schema["enum"].as_array() {
        let listed: Vec<String> = values.iter().map(code).collect();
        return format!("one of {}", listed.join(", "));
    }
    if let Some(value) = schema.get("const") {
        return code(value);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema[key].as_array() {
            let consts: Option<Vec<String>> = branches
                .iter()
                .map(|branch| branch.get("const").map(code))
                .collect();
            if let Some(consts) = consts {
                return format!("one of {}", consts.join(", "));
            }
            let kinds: Vec<String> = branches.iter().map(type_summary).collect();
            return kinds.join(" or ");
        }
    }
    match &schema["type"] {
        Value::String(kind) if kind == "array" => {
            if schema["items"].is_object() {
                format!("array of {}", type_summary(&schema["items"]))
            } else {
                "array".to_string()
            }
        }
        Value::String(kind) if kind == "object" => match schema["properties"].as_object() {
            Some(properties) if !properties.is_empty() => {
                let mut keys: Vec<String> =
                    properties.keys().map(|key| format!("`{key}`")).collect();
                keys.sort();
                format!("object ({})", keys.join(", "))
            }
            _ => "object".to_string(),
        },
        Value::String(kind) => kind.clone(),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ if schema["properties"].is_object() => "object".to_string(),
        _ => "any".to_string(),
    }
}

/// One tool's section: its description, whether it is idempotent, its arguments and its
/// whole input schema.
fn tool_section(tool: &Value) -> String {
    let name = tool["name"].as_str().expect("every tool has a name");
    let description = tool["description"].as_str().unwrap_or("").trim();
    let schema = &tool["inputSchema"];
    let mut section = format!("## {name}\n\n{}\n\n", description_block(description));
    let idempotent = if tool["idempotent"].as_bool() == Some(true) {
        "yes (calling it twice with the same arguments has the effect of calling it once, \
         so the host may retry it)"
    } else {
        "no"
    };
    section.push_str(&format!("Idempotent: {idempotent}.\n\n### Arguments\n\n"));
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match schema["properties"].as_object().filter(|p| !p.is_empty()) {
        None => section.push_str("None.\n\n"),
        Some(properties) => {
            section.push_str("| Argument | Type | Required | Description |\n");
            section.push_str("|---|---|---|---|\n");
            let mut names: Vec<&String> = properties.keys().collect();
            names.sort();
            for argument in names {
                let property = &properties[argument];
                let mut text = property["description"].as_str().unwrap_or("").to_string();
                if let Some(default) = property.get("default") {
                    text = format!("{text} Default: {}.", code(default));
                }
                section.push_str(&format!(
                    "| `{argument}` | {} | {} | {} |\n",
                    cell(&type_summary(property)),
                    if required.contains(&argument.as_str()) {
                        "yes"
                    } else {
                        "no"
                    },
                    cell(&prose(&text))
                ));
            }
            section.push('\n');
        }
    }
    let schema_text = serde_json::to_string_pretty(&sorted(schema)).unwrap();
    section.push_str(&format!(
        "### Input schema\n\n```json\n{schema_text}\n```\n\n"
    ));
    section
}

/// The page for the tools `dsh tools --json` listed.
fn render(tools: &[Value]) -> String {
    let mut page = format!(
        "<!-- Generated from `dsh tools --json` by tests/e2e/reference_pages.rs: change the \
         tool, then run {REGENERATE} -->\n\n"
    );
    page.push_str(
        "# Tools\n\n\
         The tools of dsh's embedded plugins under the default configuration (no dsh.toml), \
         as a model finds them in MCP `tools/list` and as `dsh tools --json` prints them: \
         each tool's name, its description, whether it is idempotent and the JSON Schema \
         its arguments are checked against before anything runs. A configuration's scopes, \
         plugins and settings change what a host serves: `dsh tools` shows that host's.\n\n\
         | Tool | What it does |\n|---|---|\n",
    );
    for tool in tools {
        let name = tool["name"].as_str().unwrap_or("");
        let description = tool["description"].as_str().unwrap_or("");
        page.push_str(&format!(
            "| [`{name}`](#{}) | {} |\n",
            name.to_lowercase(),
            cell(&prose(first_sentence(description)))
        ));
    }
    page.push('\n');
    for tool in tools {
        page.push_str(&tool_section(tool));
    }
    // One newline at the end, as an editor leaves it.
    format!("{}\n", page.trim_end())
}

/// What `dsh tools --json` prints in a fresh environment, with the environment's own
/// paths written as placeholders.
fn listed_tools(env: &Env) -> Vec<Value> {
    let output = env.dsh().args(["tools", "--json"]).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut text = String::from_utf8(output.stdout).unwrap();
    for (path, placeholder) in [
        (env.workdir(), "<workspace>"),
        (env.state_dir(), "<state dir>"),
        (env.dir.path().to_path_buf(), "<dir>"),
    ] {
        text = text.replace(path.to_str().unwrap(), placeholder);
    }
    let tools: Value = serde_json::from_str(&text).unwrap();
    tools.as_array().expect("a list of tools").clone()
}

#[test]
fn the_tool_reference_page_matches_dsh_tools_json() {
    let env = Env::new();
    let tools = listed_tools(&env);
    assert!(!tools.is_empty(), "dsh tools --json listed no tool");
    dsh_capabilities::generated_page::check_or_write(
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")),
        PAGE,
        &render(&tools),
        "`dsh tools --json`",
        REGENERATE,
    );
}

#[test]
fn the_page_renders_types_and_first_sentences() {
    assert_eq!(
        first_sentence("Runs a command (e.g. ls). Then more."),
        "Runs a command (e.g. ls)."
    );
    assert_eq!(
        first_sentence("Match `a. b` here. Then"),
        "Match `a. b` here."
    );
    assert_eq!(first_sentence("No full stop\nsecond line"), "No full stop");
    let schema: Value = serde_json::json!({
        "type": "array",
        "items": {"enum": ["a", "b"]}
    });
    assert_eq!(type_summary(&schema), "array of one of `a`, `b`");
    assert_eq!(
        type_summary(&serde_json::json!({"type": ["string", "integer"]})),
        "string or integer"
    );
    assert_eq!(cell("a | b\nc"), "a \\| b c");
    assert_eq!(prose("a*b <x> `a*b <x>`"), "a\\*b \\<x> `a*b <x>`");
    let wait = serde_json::json!({"type": "object", "properties": {"b": {}, "a": {}}});
    assert_eq!(type_summary(&wait), "object (`a`, `b`)");
}
