//! A tool's JSON Schema, derived from its argument (or output) type with `schemars`.
//!
//! The schema is JSON Schema 2020-12 (what the host's `jsonschema` validator assumes
//! when `$schema` is absent) written as a hand-written one would be: every subschema
//! inline (no `$defs` or `$ref`), no `$schema` and no `title`, doc comments as
//! `description`s, and an optional field simply not required (its value may not be
//! `null`, as serde reads a missing field and `null` alike but the model should send
//! neither by mistake). The integer `format`s schemars adds (`uint32`, ...) are dropped:
//! they are not JSON Schema formats, and the `minimum` it adds for unsigned types stays.

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// The JSON Schema of `T`, as the host receives it.
pub fn schema_for<T: JsonSchema>() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .into_generator();
    // The type's own schema, not a root one: no `$schema`, `title` or `$defs`.
    let mut schema = T::json_schema(&mut generator).to_value();
    tidy(&mut schema);
    schema
}

/// [`schema_for`] as JSON text.
pub fn schema_text<T: JsonSchema>() -> String {
    schema_for::<T>().to_string()
}

/// Keywords whose value is one subschema.
const ONE: &[&str] = &[
    "items",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "contains",
    "not",
    "if",
    "then",
    "else",
];
/// Keywords whose value is a list of subschemas.
const LIST: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems"];
/// Keywords whose value maps names to subschemas.
const MAP: &[&str] = &["properties", "patternProperties", "$defs", "definitions"];

/// Drops `null` from the schema and its subschemas (what schemars writes for `Option`)
/// and the integer formats.
fn tidy(schema: &mut Value) {
    let Value::Object(map) = schema else {
        return;
    };
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::String(description)) = map.get_mut("description") {
        *description = unwrap_lines(description);
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    let integer_format = map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"));
    if integer_format {
        map.remove("format");
    }
    for key in ["anyOf", "oneOf"] {
        drop_null_branch(map, key);
    }
    for key in ONE {
        if let Some(sub) = map.get_mut(*key) {
            tidy(sub);
        }
    }
    for key in LIST {
        if let Some(Value::Array(subs)) = map.get_mut(*key) {
            subs.iter_mut().for_each(tidy);
        }
    }
    for key in MAP {
        if let Some(Value::Object(subs)) = map.get_mut(*key) {
            subs.values_mut().for_each(tidy);
        }
    }
}

/// A doc comment's text as one line per paragraph: the line breaks inside a
/// paragraph become spaces, as rustdoc renders them; blank lines stay.
fn unwrap_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| paragraph.replace('\n', " "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Removes a `{"type": "null"}` branch of `key` (`anyOf` / `oneOf`); when one branch is
/// left, its keywords move into `map` (those `map` already has win).
fn drop_null_branch(map: &mut Map<String, Value>, key: &str) {
    let Some(Value::Array(branches)) = map.get_mut(key) else {
        return;
    };
    branches.retain(|branch| branch.get("type").and_then(Value::as_str) != Some("null"));
    if branches.len() != 1 {
        return;
    }
    if let Some(Value::Object(only)) = branches.pop() {
        map.remove(key);
        for (keyword, value) in only {
            map.entry(keyword).or_insert(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema, Default)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Wait {
        /// Settle after this much quiet.
        #[schemars(range(min = 1, max = 600000))]
        quiet_ms: Option<u32>,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "UPPERCASE")]
    #[allow(dead_code)]
    enum Signal {
        Term,
        Kill,
    }

    // A plain comment, not a doc comment: the schema's root gets no description.
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Args {
        /// The job id, e.g. bash-3.
        #[schemars(regex(pattern = r"^[a-z]+-[0-9]+$"))]
        id: String,
        /// The command,
        /// run with `bash -c`.
        ///
        /// A second paragraph.
        #[schemars(length(min = 1))]
        command: String,
        #[serde(rename = "timeoutMs")]
        #[schemars(range(min = 1))]
        timeout_ms: Option<u64>,
        signal: Option<Signal>,
        #[serde(default)]
        wait: Wait,
        #[serde(default)]
        background: bool,
        #[serde(default)]
        env: std::collections::BTreeMap<String, String>,
        lines: Option<Vec<u32>>,
    }

    #[test]
    fn the_schema_is_inline_with_descriptions_and_constraints() {
        let schema = schema_for::<Args>();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], json!(["id", "command"]));
        let properties = &schema["properties"];
        assert_eq!(
            properties["id"],
            json!({"type": "string", "pattern": "^[a-z]+-[0-9]+$", "description": "The job id, e.g. bash-3."})
        );
        assert_eq!(
            properties["command"],
            json!({"type": "string", "minLength": 1, "description": "The command, run with `bash -c`.\n\nA second paragraph."})
        );
        assert_eq!(
            properties["timeoutMs"],
            json!({"type": "integer", "minimum": 1})
        );
        assert_eq!(
            properties["signal"],
            json!({"type": "string", "enum": ["TERM", "KILL"]})
        );
        assert_eq!(
            properties["wait"]["properties"]["quiet_ms"],
            json!({"type": "integer", "minimum": 1, "maximum": 600000, "description": "Settle after this much quiet."})
        );
        assert_eq!(properties["wait"]["additionalProperties"], false);
        assert_eq!(properties["background"]["type"], "boolean");
        assert_eq!(
            properties["env"]["additionalProperties"],
            json!({"type": "string"})
        );
        assert_eq!(
            properties["lines"],
            json!({"type": "array", "items": {"type": "integer", "minimum": 0}})
        );
    }

    #[test]
    fn the_schema_has_no_meta_schema_title_references_or_null() {
        let text = schema_text::<Args>();
        for absent in [
            "$schema",
            "title",
            "$defs",
            "$ref",
            "null",
            "uint",
            "description\":\"A plain",
        ] {
            assert!(!text.contains(absent), "{absent} in {text}");
        }
    }

    #[test]
    fn no_arguments_is_an_empty_closed_object() {
        #[derive(Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        struct NoArgs {}
        assert_eq!(
            schema_for::<NoArgs>(),
            json!({"type": "object", "additionalProperties": false})
        );
    }

    #[test]
    fn a_property_named_like_a_keyword_is_kept() {
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Tricky {
            format: String,
            r#type: Option<String>,
        }
        let schema = schema_for::<Tricky>();
        assert_eq!(schema["properties"]["format"], json!({"type": "string"}));
        assert_eq!(schema["properties"]["type"], json!({"type": "string"}));
    }
}
