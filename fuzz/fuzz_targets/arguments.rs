//! Fuzz target `arguments`: arbitrary JSON values against a tool's argument validation
//! (the validator [`dsh::registry::check_spec`] compiles and
//! [`dsh::registry::violations`], what `RegisteredTool::validate` reports). The values
//! (and schemas) are built from the fuzzer's bytes, so every input is JSON. As its
//! property test (`engine/src/registry/proptests.rs`) asserts: no panic; against a schema
//! like the shipped tools', a value is refused exactly when it has violations, at most
//! five, none empty, and each violation of an object's arguments names its field; a
//! schema of any keywords with any values compiles or is refused with a reason, and what
//! it compiles to checks any value the same way.

#![no_main]

use dsh::engine::plugin::ToolSpec;
use dsh::registry::{check_spec, violations};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

fn spec(schema: Value) -> ToolSpec {
    ToolSpec {
        name: "t".into(),
        description: String::new(),
        input_schema_text: schema.to_string(),
        input_schema: schema,
        idempotent: false,
        output_budget: None,
        output_schema: None,
        output_schema_text: None,
    }
}

/// A schema like the shipped tools' (required, bounds, enums, nesting, no extras).
fn tool_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "maxLength": 64},
            "timeout": {"type": "integer", "minimum": 1, "maximum": 600},
            "mode": {"enum": ["a", "b"]},
            "path": {"type": "string", "format": "path"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "opts": {
                "type": "object",
                "properties": {"depth": {"type": "integer"}},
                "additionalProperties": false
            }
        },
        "required": ["command"],
        "additionalProperties": false
    })
}

const FIELDS: &[&str] = &[
    "command", "timeout", "mode", "path", "tags", "opts", "depth", "x",
];

const KEYWORDS: &[&str] = &[
    "type",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "items",
    "enum",
    "const",
    "required",
    "additionalProperties",
    "properties",
    "format",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "propertyNames",
    "$ref",
    "if",
    "then",
    "else",
];

const WORDS: &[&str] = &[
    "a",
    "b",
    "ls",
    "",
    "object",
    "string",
    "integer",
    "array",
    "number",
    "null",
    "boolean",
    "path",
    "#",
    "#/properties/a",
    "^a+$",
    "(",
    "[",
    "\\",
];

/// A key: one the schemas name, or any string.
fn key(u: &mut Unstructured, names: &[&str]) -> Result<String> {
    if u.ratio(3, 4)? {
        Ok(u.choose(names)?.to_string())
    } else {
        u.arbitrary()
    }
}

/// A JSON value of at most `depth` levels; object keys come from `names` (or any).
fn value(u: &mut Unstructured, depth: u32, names: &[&str]) -> Result<Value> {
    let kinds = if depth == 0 { 7 } else { 9 };
    Ok(match u.choose_index(kinds)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.int_in_range(-5i64..=700)?),
        4 => json!(u.arbitrary::<f64>()?),
        5 => Value::String(u.arbitrary()?),
        6 => Value::from(*u.choose(WORDS)?),
        7 => {
            let len = u.int_in_range(0..=6)?;
            let mut items = Vec::with_capacity(len);
            for _ in 0..len {
                items.push(value(u, depth - 1, names)?);
            }
            Value::Array(items)
        }
        _ => {
            let len = u.int_in_range(0..=6)?;
            let mut fields = Map::new();
            for _ in 0..len {
                fields.insert(key(u, names)?, value(u, depth - 1, names)?);
            }
            Value::Object(fields)
        }
    })
}

/// Whether `problem` names a field of `args` (or the required `command`).
fn names_a_field(problem: &str, args: &Value) -> bool {
    problem.starts_with("at /")
        || problem.contains("\"command\"")
        || args.as_object().is_some_and(|fields| {
            fields
                .keys()
                .any(|key| problem.contains(&format!("'{key}'")))
        })
}

fn run(u: &mut Unstructured) -> Result<()> {
    if u.arbitrary::<bool>()? {
        // A value, most often an object of the schema's fields, against the tool schema.
        let args = if u.ratio(3, 4)? {
            let len = u.int_in_range(0..=6)?;
            let mut fields = Map::new();
            for _ in 0..len {
                fields.insert(key(u, FIELDS)?, value(u, 4, FIELDS)?);
            }
            Value::Object(fields)
        } else {
            value(u, 5, FIELDS)?
        };
        let validator = check_spec(&spec(tool_schema())).expect("the schema compiles");
        let problems = violations(&validator, &args);
        assert_eq!(validator.is_valid(&args), problems.is_empty(), "{args}");
        assert!(problems.len() <= 5);
        assert!(problems.iter().all(|problem| !problem.trim().is_empty()));
        if args.is_object() {
            for problem in &problems {
                assert!(names_a_field(problem, &args), "{problem:?} for {args}");
            }
        }
    } else {
        // A schema of any keywords with any values, and any value against it.
        let len = u.int_in_range(0..=4)?;
        let mut properties = Map::new();
        for _ in 0..len {
            properties.insert(key(u, &["a", "b", "c"])?, value(u, 4, KEYWORDS)?);
        }
        let schema = json!({"type": "object", "properties": properties});
        let args = value(u, 4, &["a", "b", "c"])?;
        match check_spec(&spec(schema)) {
            Ok(validator) => {
                let problems = violations(&validator, &args);
                assert_eq!(validator.is_valid(&args), problems.is_empty(), "{args}");
                assert!(problems.len() <= 5);
            }
            Err(error) => assert!(!error.to_string().trim().is_empty()),
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
