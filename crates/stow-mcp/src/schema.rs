//! The object tools' definitions (`object_tools.json`, verbatim) and input validation.
//!
//! The names, descriptions and input/output JSON Schemas come from
//! `object_tools.json`, the product documents' definitions verbatim; a test compares
//! them to the seed. rmcp validates tool arguments only on its HTTP
//! transport, so this module validates them itself, after the admission
//! checks (which must run on the raw arguments first). The validator
//! covers the JSON Schema keywords the seed uses: `type` (a name or a list),
//! `properties`, `required`, `additionalProperties` (a boolean or a schema),
//! `items`, `minimum` and `maximum`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

/// The tool definitions file, verbatim from the product documents.
const OBJECT_TOOLS: &str = include_str!("object_tools.json");

/// One tool as the definitions file has it.
#[derive(Debug, Clone, Deserialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    #[serde(rename = "inputSchema")]
    pub input_schema: Arc<Map<String, Value>>,
    #[serde(rename = "outputSchema")]
    pub output_schema: Arc<Map<String, Value>>,
    /// Tool annotations (hints for the host: read-only, destructive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// The workspace tools definitions file, verbatim from the product documents.
const WORKSPACE_TOOLS: &str = include_str!("workspace_tools.json");

/// The tools of rewinding (issue 27), beyond the product documents' seven:
/// status, list, rewind.
const REWIND_TOOLS: &str = include_str!("workspace/rewind_tools.json");

/// The workspace tools: inspect, create, resolve, checkpoint inspect, diff,
/// export and adopt (verbatim), then status, list and rewind.
pub fn workspace_tools() -> Result<Vec<ToolDef>, serde_json::Error> {
    let mut tools: Vec<ToolDef> = serde_json::from_str(WORKSPACE_TOOLS)?;
    tools.extend(serde_json::from_str::<Vec<ToolDef>>(REWIND_TOOLS)?);
    Ok(tools)
}

/// The object tools: the five core tools, then the two browser tools.
pub fn object_tools() -> Result<Vec<ToolDef>, serde_json::Error> {
    serde_json::from_str(OBJECT_TOOLS)
}

/// Whether `name` is one of the two browser tools (present with `--browser`).
pub fn is_browser_tool(name: &str) -> bool {
    matches!(name, "stow_browser" | "stow_object_mentions")
}

/// Checks tool arguments against an input schema. The error text is what
/// the caller sees (prefixed `validating "arguments": `).
pub fn validate_arguments(
    schema: &Map<String, Value>,
    args: &Map<String, Value>,
) -> Result<(), String> {
    let mut errors = Vec::new();
    check_object(schema, args, "", &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("validating \"arguments\": {}", errors.join("; ")))
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(want: &str, v: &Value) -> bool {
    let got = type_name(v);
    got == want || (want == "number" && got == "integer")
}

fn at(path: &str) -> String {
    if path.is_empty() {
        "root".to_string()
    } else {
        format!("property {path}")
    }
}

fn check(schema: &Map<String, Value>, v: &Value, path: &str, errors: &mut Vec<String>) {
    if let Some(t) = schema.get("type") {
        let ok = match t {
            Value::String(s) => type_matches(s, v),
            Value::Array(list) => list
                .iter()
                .filter_map(Value::as_str)
                .any(|s| type_matches(s, v)),
            _ => true,
        };
        if !ok {
            errors.push(format!(
                "{}: has type {:?}, want {}",
                at(path),
                type_name(v),
                t
            ));
            return;
        }
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            if n < min {
                errors.push(format!("{}: {n} is less than {min}", at(path)));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            if n > max {
                errors.push(format!("{}: {n} is greater than {max}", at(path)));
            }
        }
    }
    match v {
        Value::Object(obj) => check_object(schema, obj, path, errors),
        Value::Array(items) => {
            if let Some(Value::Object(item_schema)) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}/{i}"), errors);
                }
            }
        }
        _ => {}
    }
}

fn check_object(
    schema: &Map<String, Value>,
    obj: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<String>,
) {
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        let missing: Vec<&str> = required
            .iter()
            .filter_map(Value::as_str)
            .filter(|r| !obj.contains_key(*r))
            .collect();
        if !missing.is_empty() {
            errors.push(format!(
                "{}: missing required properties {}",
                at(path),
                quoted_list(missing.iter().copied())
            ));
        }
    }
    let mut unexpected = Vec::new();
    for (name, value) in obj {
        let child = format!("{path}/{}", quote(name));
        match props.get(name) {
            Some(Value::Object(s)) => check(s, value, &child, errors),
            Some(_) => {}
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => unexpected.push(name.as_str()),
                Some(Value::Object(s)) => check(s, value, &child, errors),
                _ => {}
            },
        }
    }
    if !unexpected.is_empty() {
        errors.push(format!(
            "{}: unexpected additional properties {}",
            at(path),
            quoted_list(unexpected.into_iter())
        ));
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn quoted_list<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let parts: Vec<String> = items.map(quote).collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> ToolDef {
        object_tools()
            .unwrap()
            .into_iter()
            .find(|t| t.name == name)
            .unwrap()
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn seven_tools_in_order() {
        let names: Vec<String> = object_tools()
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(
            names,
            [
                "stow_object_read_for_save",
                "stow_object_save",
                "stow_object_resolve_save",
                "stow_object_release_observation",
                "stow_object_capabilities",
                "stow_browser",
                "stow_object_mentions"
            ]
        );
    }

    #[test]
    fn matches_the_seed_when_it_is_beside_the_repo() {
        // The repository root is two levels up from this crate; the seeds
        // live in ../shared beside it (as in CI). Skip when absent.
        let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/seeds/000_9ddffa47345bc962.txt");
        let Ok(text) = std::fs::read_to_string(&seed) else {
            eprintln!("seed not found at {}; skipping", seed.display());
            return;
        };
        for t in object_tools().unwrap() {
            let at = text
                .find(&format!("\n{}\n\n", t.name))
                .expect("tool in seed");
            let rest = &text[at + t.name.len() + 3..];
            let desc = rest.lines().next().unwrap();
            assert_eq!(desc, t.description, "{}", t.name);
            let input_at = rest.find("Input\n\n").unwrap() + 7;
            let mut de = serde_json::Deserializer::from_str(&rest[input_at..]).into_iter::<Value>();
            let input = de.next().unwrap().unwrap();
            assert_eq!(
                input,
                Value::Object((*t.input_schema).clone()),
                "{}",
                t.name
            );
            let result_at = rest.find("Result\n\n").unwrap() + 8;
            let mut de =
                serde_json::Deserializer::from_str(&rest[result_at..]).into_iter::<Value>();
            let output = de.next().unwrap().unwrap();
            assert_eq!(
                output,
                Value::Object((*t.output_schema).clone()),
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn unknown_properties_are_refused() {
        let t = tool("stow_object_save");
        let err = validate_arguments(
            &t.input_schema,
            &args(json!({"key": "k", "data_base64": "", "request_key": "r", "bucket": "x"})),
        )
        .unwrap_err();
        assert!(err.starts_with("validating \"arguments\": "), "{err}");
        assert!(
            err.contains("unexpected additional properties [\"bucket\"]"),
            "{err}"
        );
        let caps = tool("stow_object_capabilities");
        assert!(validate_arguments(&caps.input_schema, &args(json!({}))).is_ok());
        assert!(validate_arguments(&caps.input_schema, &args(json!({"x": 1}))).is_err());
    }

    #[test]
    fn types_and_required_are_checked() {
        let t = tool("stow_object_save");
        let ok = json!({"key": "k", "data_base64": "", "request_key": "r",
                        "metadata": {"a": "b"}, "replace": true});
        assert!(validate_arguments(&t.input_schema, &args(ok)).is_ok());
        let err = validate_arguments(&t.input_schema, &args(json!({"key": "k"}))).unwrap_err();
        assert!(err.contains("missing required properties"), "{err}");
        let err = validate_arguments(
            &t.input_schema,
            &args(json!({"key": 5, "data_base64": "", "request_key": "r"})),
        )
        .unwrap_err();
        assert!(err.contains("want \"string\""), "{err}");
        let err = validate_arguments(
            &t.input_schema,
            &args(json!({"key": "k", "data_base64": "", "request_key": "r", "metadata": {"a": 1}})),
        )
        .unwrap_err();
        assert!(err.contains("metadata"), "{err}");
        let err = validate_arguments(
            &t.input_schema,
            &args(json!({"key": "k", "data_base64": "", "request_key": "r", "replace": "yes"})),
        )
        .unwrap_err();
        assert!(err.contains("boolean"), "{err}");
    }
}
