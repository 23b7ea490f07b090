//! An OpenAPI v3 schema of the API server's, made a structural schema a
//! CustomResourceDefinition accepts: every `$ref` inlined, the keywords a
//! CRD does not know dropped, and the zero-value defaults Go's OpenAPI
//! generator writes for every non-pointer field taken out (they are not API
//! defaults: `schedule: ""` on a required field would make it optional).
//!
//! Pure: the document in, the schema out; an unknown keyword is an error,
//! not silently copied, so a newer Kubernetes that publishes one is noticed.

use serde_json::{Map, Value};
use thiserror::Error;

/// Why a schema could not be made structural.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum StructuralError {
    #[error("the OpenAPI document has no schema {0:?} under components.schemas")]
    Missing(String),
    #[error("schema {0:?} contains itself; a CRD schema cannot be recursive")]
    Recursive(String),
    #[error("{at}: $ref {reference:?} is not of the form #/components/schemas/NAME")]
    BadReference { at: String, reference: String },
    #[error("{at}: unsupported keyword {keyword:?}")]
    UnsupportedKeyword { at: String, keyword: String },
    #[error("{at}: a schema must be a JSON object")]
    NotAnObject { at: String },
}

/// The two Kubernetes scalars that are written as a number or a string.
/// A CRD says so with `x-kubernetes-int-or-string` (a Quantity written as a
/// fractional number, `cpu: 0.5`, is therefore refused: write `"500m"`).
const INT_OR_STRING: [&str; 2] = [
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
];

/// Keywords copied as they are.
const COPIED: [&str; 17] = [
    "description",
    "type",
    "format",
    "enum",
    "required",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "nullable",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
];

/// Keywords a CRD schema has no field for; they only steer clients
/// (strategic merge patch, kind lookup, union hints).
const DROPPED: [&str; 4] = [
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-group-version-kind",
    "x-kubernetes-unions",
];

const PREFIX: &str = "#/components/schemas/";

/// The schema `name` of `schemas` (an OpenAPI v3 `components.schemas`),
/// structural.
pub fn schema(schemas: &Map<String, Value>, name: &str) -> Result<Value, StructuralError> {
    let mut inlined = Inliner {
        schemas,
        path: Vec::new(),
    }
    .named(name, name)?;
    drop_zero_defaults(&mut inlined, &[]);
    Ok(Value::Object(inlined))
}

struct Inliner<'a> {
    schemas: &'a Map<String, Value>,
    /// The named schemas being inlined, outermost first (recursion guard).
    path: Vec<&'a str>,
}

impl<'a> Inliner<'a> {
    fn named(&mut self, name: &str, at: &str) -> Result<Map<String, Value>, StructuralError> {
        let (key, schema) = self
            .schemas
            .get_key_value(name)
            .ok_or_else(|| StructuralError::Missing(name.to_owned()))?;
        if self.path.contains(&key.as_str()) {
            return Err(StructuralError::Recursive(name.to_owned()));
        }
        if INT_OR_STRING.contains(&name) {
            let mut out = Map::new();
            if let Some(description) = schema.get("description") {
                out.insert("description".into(), description.clone());
            }
            out.insert("x-kubernetes-int-or-string".into(), Value::Bool(true));
            return Ok(out);
        }
        self.path.push(key);
        let out = self.schema(schema, at);
        self.path.pop();
        out
    }

    fn schema(&mut self, schema: &Value, at: &str) -> Result<Map<String, Value>, StructuralError> {
        let fields = schema
            .as_object()
            .ok_or_else(|| StructuralError::NotAnObject { at: at.to_owned() })?;
        // `{"$ref": X}` or `{"allOf": [{"$ref": X}], "description": ...}`:
        // X's schema, under this one's own keywords.
        let mut out = match reference(fields, at)? {
            Some(name) => self.named(name, at)?,
            None => Map::new(),
        };
        for (keyword, value) in fields {
            match keyword.as_str() {
                "$ref" | "allOf" => {}
                "properties" => {
                    let mut properties = Map::new();
                    for (name, property) in value.as_object().into_iter().flatten() {
                        let at = format!("{at}.{name}");
                        properties.insert(name.clone(), Value::Object(self.schema(property, &at)?));
                    }
                    out.insert(keyword.clone(), Value::Object(properties));
                }
                "items" | "additionalProperties" if value.is_object() => {
                    let at = format!("{at}.{keyword}");
                    out.insert(keyword.clone(), Value::Object(self.schema(value, &at)?));
                }
                "additionalProperties" => {
                    out.insert(keyword.clone(), value.clone());
                }
                k if COPIED.contains(&k) => {
                    out.insert(keyword.clone(), value.clone());
                }
                k if DROPPED.contains(&k) => {}
                _ => {
                    return Err(StructuralError::UnsupportedKeyword {
                        at: at.to_owned(),
                        keyword: keyword.clone(),
                    });
                }
            }
        }
        Ok(out)
    }
}

/// The schema name a `$ref` (direct, or the single member of `allOf`) names.
fn reference<'v>(
    fields: &'v Map<String, Value>,
    at: &str,
) -> Result<Option<&'v str>, StructuralError> {
    let reference = match (fields.get("$ref"), fields.get("allOf")) {
        (Some(reference), _) => reference,
        (None, Some(Value::Array(all))) if all.len() == 1 => match all[0].get("$ref") {
            Some(reference) => reference,
            None => return unsupported(at, "allOf"),
        },
        (None, Some(_)) => return unsupported(at, "allOf"),
        (None, None) => return Ok(None),
    };
    let text = reference.as_str().unwrap_or_default();
    text.strip_prefix(PREFIX)
        .map(Some)
        .ok_or_else(|| StructuralError::BadReference {
            at: at.to_owned(),
            reference: text.to_owned(),
        })
}

fn unsupported<T>(at: &str, keyword: &str) -> Result<T, StructuralError> {
    Err(StructuralError::UnsupportedKeyword {
        at: at.to_owned(),
        keyword: keyword.to_owned(),
    })
}

/// Takes out the defaults Go's generator writes for non-pointer fields: on
/// a required property (the default would make it optional), an empty
/// object (a struct), and a zero scalar, except on a key of the enclosing
/// list-map (a CRD needs those keys required or defaulted, and
/// `imagePullSecrets[].name` is neither without it). Defaults of `items`
/// and `additionalProperties` go too: they never apply. Real defaults
/// (`protocol: TCP`) stay.
fn drop_zero_defaults(schema: &mut Map<String, Value>, list_map_keys: &[String]) {
    let required: Vec<String> = strings(schema.get("required"));
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            let Value::Object(property) = property else {
                continue;
            };
            let zero = property.get("default").is_some_and(is_zero);
            if required.contains(name) || (zero && !list_map_keys.contains(name)) {
                property.remove("default");
            }
            drop_zero_defaults(property, &[]);
        }
    }
    let keys = strings(schema.get("x-kubernetes-list-map-keys"));
    if let Some(Value::Object(items)) = schema.get_mut("items") {
        items.remove("default");
        drop_zero_defaults(items, &keys);
    }
    if let Some(Value::Object(values)) = schema.get_mut("additionalProperties") {
        values.remove("default");
        drop_zero_defaults(values, &[]);
    }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("tests pass objects"),
        }
    }

    #[test]
    fn references_are_inlined_under_the_referring_description() {
        let schemas = schemas(json!({
            "Spec": {"type": "object", "required": ["inner"], "properties": {
                "inner": {"description": "outer words", "default": {},
                          "allOf": [{"$ref": "#/components/schemas/Inner"}]},
                "direct": {"$ref": "#/components/schemas/Inner"}}},
            "Inner": {"description": "inner words", "type": "object",
                      "properties": {"n": {"type": "integer", "format": "int32"}}},
        }));
        let out = schema(&schemas, "Spec").unwrap();
        assert_eq!(
            out["properties"]["inner"],
            json!({"description": "outer words", "type": "object",
                   "properties": {"n": {"type": "integer", "format": "int32"}}})
        );
        assert_eq!(out["properties"]["direct"]["description"], "inner words");
    }

    #[test]
    fn zero_defaults_go_real_ones_and_list_map_keys_stay() {
        let schemas = schemas(json!({
            "Pod": {"type": "object", "required": ["schedule"], "properties": {
                "schedule": {"type": "string", "default": ""},
                "optional": {"type": "string", "default": ""},
                "count": {"type": "integer", "default": 0},
                "protocol": {"type": "string", "default": "TCP"},
                "labels": {"type": "object",
                           "additionalProperties": {"type": "string", "default": ""}},
                "secrets": {"type": "array", "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"default": {},
                                      "allOf": [{"$ref": "#/components/schemas/Ref"}]}}}},
            "Ref": {"type": "object", "properties": {"name": {"type": "string", "default": ""}}},
        }));
        let out = schema(&schemas, "Pod").unwrap();
        let p = &out["properties"];
        assert_eq!(p["schedule"].get("default"), None);
        assert_eq!(p["optional"].get("default"), None);
        assert_eq!(p["count"].get("default"), None);
        assert_eq!(p["protocol"]["default"], "TCP");
        assert_eq!(
            p["labels"]["additionalProperties"],
            json!({"type": "string"})
        );
        assert_eq!(p["secrets"]["items"].get("default"), None);
        assert_eq!(p["secrets"]["items"]["properties"]["name"]["default"], "");
    }

    #[test]
    fn int_or_string_and_quantity_become_int_or_string() {
        let schemas = schemas(json!({
            "Probe": {"type": "object", "properties": {
                "port": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}]},
                "cpu": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"}}},
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
                {"type": "string", "format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
            "io.k8s.apimachinery.pkg.api.resource.Quantity":
                {"description": "q", "oneOf": [{"type": "string"}, {"type": "number"}]},
        }));
        let out = schema(&schemas, "Probe").unwrap();
        assert_eq!(
            out["properties"]["port"],
            json!({"x-kubernetes-int-or-string": true})
        );
        assert_eq!(
            out["properties"]["cpu"],
            json!({"description": "q", "x-kubernetes-int-or-string": true})
        );
    }

    #[test]
    fn client_only_keywords_are_dropped_and_unknown_ones_refused() {
        let schemas = schemas(json!({
            "A": {"type": "object", "x-kubernetes-patch-strategy": "merge", "properties": {}},
            "B": {"type": "object", "x-kubernetes-something-new": true},
        }));
        assert_eq!(
            schema(&schemas, "A").unwrap(),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            schema(&schemas, "B"),
            Err(StructuralError::UnsupportedKeyword {
                at: "B".into(),
                keyword: "x-kubernetes-something-new".into()
            })
        );
    }

    #[test]
    fn recursion_missing_schemas_and_foreign_references_are_errors() {
        let schemas = schemas(json!({
            "Loop": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Loop"}}},
            "Dangling": {"type": "object", "properties": {"x": {"$ref": "#/components/schemas/Nowhere"}}},
            "Foreign": {"type": "object", "properties": {"x": {"$ref": "https://example.com/x"}}},
        }));
        assert_eq!(
            schema(&schemas, "Loop"),
            Err(StructuralError::Recursive("Loop".into()))
        );
        assert_eq!(
            schema(&schemas, "Dangling"),
            Err(StructuralError::Missing("Nowhere".into()))
        );
        assert_eq!(
            schema(&schemas, "Foreign"),
            Err(StructuralError::BadReference {
                at: "Foreign.x".into(),
                reference: "https://example.com/x".into()
            })
        );
        assert_eq!(
            schema(&schemas, "Absent"),
            Err(StructuralError::Missing("Absent".into()))
        );
    }
}
