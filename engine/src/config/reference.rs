//! The configuration reference, `docs/src/reference/configuration.md`: every key of
//! `dsh.toml` with its type, default, description and whether a change applies live,
//! rendered from the configuration types themselves (their JSON Schema, derived with
//! schemars: the fields' doc comments, and the defaults their `Default` impls give) and
//! from [`LIVE_SECTIONS`]. Its test keeps the committed page equal to what the code
//! renders (`DSH_UPDATE_DOCS=1` rewrites the page instead).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::{Config, LIVE_SECTIONS};

/// The page, from the workspace's root.
const PAGE: &str = "docs/src/reference/configuration.md";

/// What regenerates the page.
const REGENERATE: &str = "DSH_UPDATE_DOCS=1 cargo test -p dsh-engine --lib reference";

/// Keys whose default depends on the machine (a CPU count, a path), with the fixed
/// words the page shows for it instead, so the page is the same wherever it is made.
/// No default depends on the machine today; a key added here is shown this way.
const MACHINE_DEFAULTS: &[(&str, &str)] = &[];

/// One key of a section.
struct Key {
    /// Dotted, `*` for a name of the user's (`plugins.*.cpu_ms`).
    name: String,
    kind: String,
    default: String,
    description: String,
}

/// One table of `dsh.toml`: `[limits]`, `[process.sandbox]`, `[plugins.*]`,
/// `[[gate.rules]]`.
struct Section {
    /// Whether it is an array of tables (`[[gate.rules]]`).
    array: bool,
    description: String,
    keys: Vec<Key>,
}

/// Walks the schema of [`Config`] into its sections.
struct Walk<'a> {
    defs: &'a Map<String, Value>,
    /// By dotted name (sorted: a section's subsections follow it).
    sections: BTreeMap<String, Section>,
}

impl<'a> Walk<'a> {
    /// `schema` with a `$ref` followed (to `$defs`).
    fn resolve(&self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let name = reference
                    .strip_prefix("#/$defs/")
                    .unwrap_or_else(|| panic!("a $ref outside $defs: {reference}"));
                self.resolve(&self.defs[name])
            }
            None => schema,
        }
    }

    /// `schema` without its `null` alternative (an `Option`'s), resolved.
    fn present(&self, schema: &'a Value) -> &'a Value {
        let schema = self.resolve(schema);
        if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
            let not_null: Vec<&Value> = options
                .iter()
                .filter(|option| option.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if let [only] = not_null[..] {
                return self.present(only);
            }
        }
        schema
    }

    /// Whether `schema` is of a struct (a table of known keys).
    fn is_struct(&self, schema: &Value) -> bool {
        schema.get("properties").is_some()
            || schema.get("additionalProperties") == Some(&Value::Bool(false))
    }

    /// Adds the section at `path` whose schema is `schema` (a struct's), and every
    /// section beneath it; `path` empty: the whole configuration.
    fn section(&mut self, path: &str, array: bool, description: String, schema: &'a Value) {
        let schema = self.present(schema);
        let description = [description, text(schema)]
            .into_iter()
            .filter(|d| !d.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        let mut keys = Vec::new();
        let properties = schema.get("properties").and_then(Value::as_object);
        for (field, property) in properties.into_iter().flatten() {
            let name = if path.is_empty() {
                field.clone()
            } else {
                format!("{path}.{field}")
            };
            let value = self.present(property);
            let items = value.get("items").map(|items| self.present(items));
            let entries = value
                .get("additionalProperties")
                .filter(|entries| entries.is_object())
                .map(|entries| self.present(entries));
            if self.is_struct(value) {
                self.section(&name, false, text(property), value);
            } else if let Some(items) = items.filter(|items| self.is_struct(items)) {
                self.section(&name, true, text(property), items);
            } else if let Some(entries) = entries.filter(|entries| self.is_struct(entries)) {
                self.section(&format!("{name}.*"), false, text(property), entries);
            } else {
                let key = Key {
                    kind: self.kind(value),
                    default: default(&name, property),
                    description: [text(property), values(value)]
                        .into_iter()
                        .filter(|d| !d.is_empty())
                        .collect::<Vec<_>>()
                        .join(" "),
                    name: name.clone(),
                };
                if path.is_empty() {
                    // A top-level key that is no table of known keys (`scopes`): a
                    // section of its own, with itself as its one key.
                    let section = Section {
                        array: false,
                        description: String::new(),
                        keys: vec![key],
                    };
                    self.sections.insert(name, section);
                } else {
                    keys.push(key);
                }
            }
        }
        if keys.is_empty() {
            // The root, only subsections (`[plugins]`), or nothing to set yet (`[log]`).
            return;
        }
        self.sections.insert(
            path.to_string(),
            Section {
                array,
                description,
                keys,
            },
        );
    }

    /// A value's type, in words.
    fn kind(&self, schema: &Value) -> String {
        let schema = self.present(schema);
        if schema == &Value::Bool(true) {
            return "any value".into();
        }
        let choices: Vec<String> = schema
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .or_else(|| {
                schema
                    .get("oneOf")
                    .and_then(Value::as_array)
                    .map(|options| {
                        options
                            .iter()
                            .filter_map(|option| option.get("const").cloned())
                            .collect()
                    })
            })
            .unwrap_or_default()
            .iter()
            .map(|choice| format!("`{choice}`"))
            .collect();
        if !choices.is_empty() {
            return format!("one of {}", choices.join(", "));
        }
        // `["string", "null"]`: an `Option` of a plain type.
        let kind = match schema.get("type") {
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|kind| *kind != "null"),
            kind => kind.and_then(Value::as_str),
        };
        match kind {
            Some("array") => format!("list of {}", self.kind(&schema["items"])),
            Some("object") => match schema.get("additionalProperties") {
                Some(entries @ Value::Object(_)) => format!("table of {}", self.kind(entries)),
                _ => "table".into(),
            },
            Some(kind @ ("integer" | "string" | "boolean")) => kind.into(),
            // No type at all: any value (an `Option<serde_json::Value>`'s schema).
            None if schema.get("type").is_none() => "any value".into(),
            _ => panic!("no words for the type of this schema: {schema}"),
        }
    }
}

/// A schema's description, on one line, rustdoc's link brackets dropped.
fn text(schema: &Value) -> String {
    let description = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    description
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("[`", "`")
        .replace("`]", "`")
}

/// An enum's values with their own descriptions, where they have some.
fn values(schema: &Value) -> String {
    let described: Vec<String> = schema
        .get("oneOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|option| {
            let description = text(option);
            let value = option.get("const")?;
            let description = description.trim_end_matches('.');
            (!description.is_empty()).then(|| format!("`{value}`: {description}"))
        })
        .collect();
    if described.is_empty() {
        String::new()
    } else {
        format!("Values: {}.", described.join("; "))
    }
}

/// The default of key `name` whose schema is `property`, as TOML: `unset` for an
/// `Option` left out, `required` for a key with no default (schemars gives a field's
/// default only when its type implements `Serialize`: one that does not shows as
/// required, which the tests refuse outside a table of the user's).
fn default(name: &str, property: &Value) -> String {
    if let Some((_, words)) = MACHINE_DEFAULTS.iter().find(|(key, _)| *key == name) {
        return (*words).into();
    }
    let nullable = property.get("anyOf").is_some()
        || property
            .get("type")
            .and_then(Value::as_array)
            .is_some_and(|types| types.contains(&Value::String("null".into())));
    match property.get("default") {
        Some(Value::Null) => "unset".into(),
        Some(value) => format!("`{}`", toml_value(value)),
        None if nullable => "unset".into(),
        None => REQUIRED.into(),
    }
}

/// What the page says of a key with no default.
const REQUIRED: &str = "required";

/// A JSON value as TOML writes it inline.
fn toml_value(value: &Value) -> String {
    match value {
        Value::Null => "unset".into(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(toml_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(entries) if entries.is_empty() => "{}".into(),
        Value::Object(entries) => format!(
            "{{ {} }}",
            entries
                .iter()
                .map(|(key, value)| format!("{key} = {}", toml_value(value)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Text for a Markdown table's cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The sections of `dsh.toml`, from [`Config`]'s schema.
fn sections() -> BTreeMap<String, Section> {
    // The serialize contract: the types' own fields, where schemars would otherwise read
    // a `from` type's (`ProcessConfig` is read from `ProcessToml`, `LspConfig` from
    // `RawLspConfig`: the same keys, but the docs are on the types read into).
    // `ServeConfig`'s schema is `ServeKeys`' (its file form) either way.
    let schema = schemars::generate::SchemaSettings::default()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<Config>();
    let schema = serde_json::to_value(schema).unwrap();
    let empty = Map::new();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut walk = Walk {
        defs,
        sections: BTreeMap::new(),
    };
    walk.section("", false, String::new(), &schema);
    walk.sections
}

/// Whether changes to the section (or key) `name` apply live.
fn live(name: &str) -> bool {
    let top = name.split('.').next().unwrap_or_default();
    LIVE_SECTIONS.contains(&top)
}

/// The page.
fn render() -> String {
    let mut page = format!(
        "<!-- Generated from the configuration types by engine/src/config/reference.rs: edit the code, then run {REGENERATE} -->\n\
         # Configuration reference\n\n\
         Every key `dsh.toml` accepts, by section: its type, its default (what the key is \
         when the file leaves it out), whether a change to it applies live or needs a \
         restart, and what it does. `*` in a name stands for a name of yours (a plugin's, a \
         scope's, a server's). A key the file does not know is an error.\n\n\
         This page is generated from the configuration types (their doc comments and \
         their `Default` impls) by `engine/src/config/reference.rs`, and a test fails when \
         it differs from them: edit the code, then regenerate it with \
         `{REGENERATE}`.\n\n\
         **Applies**: `live` means `dsh serve` applies a change to the file at the next \
         call (sections {}); `restart` means the change is named in a warning and takes \
         effect at the next start (or `dsh upgrade`).\n",
        LIVE_SECTIONS
            .iter()
            .map(|section| format!("`[{section}]`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (name, section) in sections() {
        let heading = if section.array {
            format!("[[{name}]]")
        } else {
            format!("[{name}]")
        };
        page.push_str(&format!("\n## {heading}\n\n"));
        if !section.description.is_empty() {
            page.push_str(&format!("{}\n\n", section.description));
        }
        page.push_str("| Key | Type | Default | Applies | Description |\n");
        page.push_str("| --- | --- | --- | --- | --- |\n");
        for key in &section.keys {
            page.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                key.name,
                cell(&key.kind),
                cell(&key.default),
                if live(&key.name) { "live" } else { "restart" },
                cell(&key.description),
            ));
        }
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed page is what the configuration types render; with
    /// `DSH_UPDATE_DOCS=1` the page is written instead.
    #[test]
    fn the_configuration_reference_matches_the_configuration_types() {
        dsh_capabilities::generated_page::check_or_write(
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")),
            PAGE,
            &render(),
            "the configuration types",
            REGENERATE,
        );
    }

    /// Every key has a description (a doc comment on its field).
    #[test]
    fn every_key_in_the_reference_is_described() {
        let undescribed: Vec<String> = sections()
            .into_values()
            .flat_map(|section| section.keys)
            .filter(|key| key.description.is_empty())
            .map(|key| key.name)
            .collect();
        assert!(
            undescribed.is_empty(),
            "keys without a doc comment: {undescribed:?}"
        );
    }

    /// A key with no default is one of a table the user adds (`[plugins.*]`,
    /// `[[gate.rules]]`): every other has a default (else its type lacks `Serialize`,
    /// and schemars gave none).
    #[test]
    fn only_keys_of_the_users_tables_are_required() {
        let wrongly_required: Vec<String> = sections()
            .into_iter()
            .filter(|(name, section)| !section.array && !name.ends_with(".*"))
            .flat_map(|(_, section)| section.keys)
            .filter(|key| key.default == REQUIRED)
            .map(|key| key.name)
            .collect();
        assert!(
            wrongly_required.is_empty(),
            "keys with no default: {wrongly_required:?}"
        );
    }

    /// The sections that change live are sections of the configuration.
    #[test]
    fn the_live_sections_are_sections() {
        let mut config = Config::default();
        for section in LIVE_SECTIONS {
            assert!(config.reset_section(section), "{section}");
        }
        assert!(!config.reset_section("nonesuch"));
    }

    /// The reference shows exactly the keys the loader accepts (found by asking it,
    /// `super::super::tests::walk`): the schema describes the types `dsh.toml` is read
    /// into.
    #[test]
    fn the_reference_has_every_key_the_loader_accepts() {
        let (mut accepted, mut tables) = (Vec::new(), Vec::new());
        super::super::tests::walk(&[], "", false, &mut accepted, &mut tables);
        // serde lists an alias among the fields; the schema has the field only.
        accepted.retain(|key| key != "plugins.*.connect");
        accepted.sort();
        let mut shown: Vec<String> = Vec::new();
        for (name, section) in sections() {
            // A section is a key of the table around it (`plugins` for `plugins.*`).
            shown.push(name.trim_end_matches(".*").to_string());
            shown.extend(section.keys.into_iter().map(|key| key.name));
        }
        // A section holding only subsections (`[plugins]` holds `[plugins.*]`) is a key
        // too; the walk lists both.
        let parents: Vec<String> = shown
            .iter()
            .filter_map(|name| name.rsplit_once('.').map(|(parent, _)| parent))
            .map(|parent| parent.trim_end_matches(".*").to_string())
            .collect();
        shown.extend(parents);
        shown.sort();
        shown.dedup();
        accepted.dedup();
        assert_eq!(shown, accepted);
    }
}
