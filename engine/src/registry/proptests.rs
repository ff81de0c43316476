//! Property tests of argument validation (the validator [`check_spec`] compiles and
//! [`violations`], what [`RegisteredTool::validate`] reports): any JSON value, of any
//! shape up to a bounded depth, is checked without a panic; a value is refused exactly
//! when it has violations, at most five, and each violation of an object's arguments
//! names the field it is about. Schemas made of any keywords with any values compile or
//! are refused with a reason, and never panic either.
//!
//! Each property runs 512 cases by default; set `PROPTEST_CASES` for a longer local
//! run, e.g. `PROPTEST_CASES=50000 cargo test -p dsh --lib registry::proptests`.

use super::*;
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{json, Value};

/// `default` cases, or `PROPTEST_CASES` when it is set.
fn config(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        // A failure is kept as a plain #[test], not in a file beside the source.
        failure_persistence: None,
        ..Config::default()
    }
}

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

const FIELDS: &[&str] = &["command", "timeout", "mode", "path", "tags", "opts"];

/// A JSON value of bounded depth and size.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-5i64..700).prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        prop::sample::select(&["a", "b", "ls", ""][..]).prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        let key = prop_oneof![
            prop::sample::select(&["depth", "x", "command"][..]).prop_map(String::from),
            any::<String>(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// Arguments: an object of the schema's fields (and maybe others) with any values.
fn arguments() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        4 => prop::sample::select(FIELDS).prop_map(String::from),
        1 => "[a-z_]{1,8}",
    ];
    prop::collection::btree_map(key, json_value(), 0..6)
        .prop_map(|fields| Value::Object(fields.into_iter().collect()))
}

/// Schema keywords with values of any type, nested.
fn schema_like() -> impl Strategy<Value = Value> {
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
    ];
    let leaf = prop_oneof![
        json_value(),
        prop::sample::select(&["object", "string", "integer", "array", "number", "null"][..])
            .prop_map(Value::from),
        "[\\[\\]()a-z*+?\\\\^$.{}0-9]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::btree_map(prop::sample::select(KEYWORDS), inner.clone(), 0..5)
                .prop_map(|fields| {
                    Value::Object(
                        fields
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect(),
                    )
                }),
            prop::collection::vec(inner, 0..4).prop_map(Value::Array),
        ]
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

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn any_value_is_valid_exactly_when_it_has_no_violations(value in json_value()) {
        let validator = check_spec(&spec(tool_schema())).expect("the schema compiles");
        let problems = violations(&validator, &value);
        prop_assert_eq!(validator.is_valid(&value), problems.is_empty());
        prop_assert!(problems.len() <= 5);
        prop_assert!(problems.iter().all(|problem| !problem.trim().is_empty()));
    }

    #[test]
    fn each_violation_of_arguments_names_its_field(args in arguments()) {
        let validator = check_spec(&spec(tool_schema())).expect("the schema compiles");
        let problems = violations(&validator, &args);
        prop_assert_eq!(validator.is_valid(&args), problems.is_empty());
        for problem in &problems {
            prop_assert!(names_a_field(problem, &args), "{:?} for {}", problem, args);
        }
    }

    #[test]
    fn any_schema_compiles_or_is_refused_with_a_reason(
        properties in prop::collection::btree_map("[a-z]{1,4}", schema_like(), 0..4),
        value in json_value(),
    ) {
        let schema = json!({"type": "object", "properties": properties});
        match check_spec(&spec(schema)) {
            Ok(validator) => {
                let problems = violations(&validator, &value);
                prop_assert_eq!(validator.is_valid(&value), problems.is_empty());
            }
            Err(error) => prop_assert!(!error.to_string().trim().is_empty()),
        }
    }
}
