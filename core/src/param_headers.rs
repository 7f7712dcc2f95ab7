//! Tool arguments mirrored into HTTP headers (2026-07-28 Streamable HTTP,
//! "Custom Headers from Tool Parameters", SEP-2243).
//!
//! A tool's `inputSchema` may mark a property with `"x-mcp-header": "Region"`:
//! on HTTP, a client then repeats that argument of every `tools/call` in the
//! header `Mcp-Param-Region`, so load balancers and gateways can route on it
//! without parsing the body, and the server refuses a call whose header and body
//! disagree (`HeaderMismatch`, -32020, HTTP 400). tether stands on both sides:
//! it checks the headers of its stateless HTTP clients (`check`) and adds them
//! to its calls to stateless HTTP backends (`request_headers`), both from the
//! declarations `declarations` reads out of the backend's schema.
//!
//! Values are encoded like `Mcp-Name` (see `http_headers::header_value`):
//! plain when header-safe, else `=?base64?…?=`; integers in decimal; booleans
//! `true`/`false`; a null or absent argument has no header.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Number, Value};

use crate::protocol::quote;

/// What every mirrored argument's header name starts with.
pub(crate) const HEADER_PREFIX: &str = "Mcp-Param-";

/// The schema keyword that marks a property as mirrored.
pub(crate) const KEYWORD: &str = "x-mcp-header";

/// One argument a tool mirrors into a header, read from its `inputSchema`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    /// `{Name}` of `Mcp-Param-{Name}`, as the tool declares it (header names
    /// compare case-insensitively).
    pub name: String,
    /// The `properties` keys leading from the schema root to the property: where
    /// the value sits in the call's `arguments`.
    pub path: Vec<String>,
    /// The property's declared type.
    pub kind: ParamKind,
}

/// The types an argument can have to be mirrored: those with one spelling as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// Sent as it is (or Base64-encoded when not header-safe).
    String,
    /// Sent in decimal; compared numerically.
    Integer,
    /// Sent as `true` or `false`.
    Boolean,
}

impl ParamHeader {
    /// The full header name, `Mcp-Param-{Name}`.
    pub fn header_name(&self) -> String {
        format!("{HEADER_PREFIX}{}", self.name)
    }

    /// Where the value sits, for messages: `arguments.a.b`.
    fn location(&self) -> String {
        let mut out = String::from("arguments");
        for key in &self.path {
            out.push('.');
            out.push_str(key);
        }
        out
    }
}

/// The mirrored arguments an `inputSchema` declares, in property-name order. `Err` says
/// why the declarations are invalid, which makes the whole tool invalid: a name
/// that is empty or not an HTTP token, a name used twice (case-insensitively), a
/// property whose type is not string, integer or boolean, or an annotation not
/// reachable from the root through `properties` alone (under `items`, `oneOf`,
/// `$defs`, ...). A schema without annotations declares nothing.
pub(crate) fn declarations(input_schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut out = Vec::new();
    walk(input_schema, &mut Vec::new(), true, &mut out)?;
    Ok(out)
}

/// The headers a client adds to a `tools/call` whose `arguments` are given:
/// `(Mcp-Param-{Name}, value)` for every declared argument that has a value.
/// Null, absent, object and array values have no header.
pub(crate) fn request_headers(declared: &[ParamHeader], arguments: Option<&Value>) -> Vec<(String, String)> {
    declared
        .iter()
        .filter_map(|d| {
            let value = header_text(d.kind, value_at(arguments, &d.path)?)?;
            Some((d.header_name(), value))
        })
        .collect()
}

/// The lowercased `{Name}` of a received header named `Mcp-Param-{Name}` (any
/// case), the key `check` looks headers up by; `None` for any other header.
pub fn received_name(header: &str) -> Option<String> {
    let prefix = header.get(..HEADER_PREFIX.len())?;
    let name = &header[HEADER_PREFIX.len()..];
    (prefix.eq_ignore_ascii_case(HEADER_PREFIX) && !name.is_empty()).then(|| name.to_ascii_lowercase())
}

/// Checks the `Mcp-Param-*` headers a server received with a `tools/call`
/// against its `arguments`. `received` maps each header's lowercased `{Name}`
/// (see [`received_name`]) to its raw value. Every declared argument with a
/// value needs its header, with that value once surrounding spaces and tabs are
/// trimmed and a complete `=?base64?…?=` is decoded (invalid Base64 inside one
/// is refused; a value with only half the markers is literal); integers compare
/// numerically. A header for an argument without a value is refused too, since
/// whoever routed on it acted on a value the tool never gets. Headers no
/// declaration names are ignored. `Err` holds the `HeaderMismatch` message.
pub(crate) fn check(
    declared: &[ParamHeader],
    arguments: Option<&Value>,
    received: &BTreeMap<String, String>,
) -> Result<(), String> {
    for d in declared {
        let body = value_at(arguments, &d.path).filter(|v| has_header(v));
        let sent = received.get(&d.name.to_ascii_lowercase());
        let (body, sent) = match (body, sent) {
            (None, None) => continue,
            (Some(body), None) => {
                return Err(format!("missing {} header (the body's {} is {body})", d.header_name(), d.location()))
            }
            (None, Some(sent)) => {
                return Err(format!(
                    "{} header {} has no value to match: the body's {} is absent or null",
                    d.header_name(),
                    quote(sent),
                    d.location()
                ))
            }
            (Some(body), Some(sent)) => (body, sent),
        };
        let value = sent.trim_matches([' ', '\t']);
        if !value.bytes().all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic()) {
            return Err(format!(
                "{} header {} has characters a header value cannot carry",
                d.header_name(),
                quote(sent)
            ));
        }
        let Some(decoded) = crate::protocol::decode_header(value) else {
            return Err(format!(
                "{} header {} is not valid Base64 inside =?base64?…?= (standard alphabet, padded, UTF-8)",
                d.header_name(),
                quote(value)
            ));
        };
        let same = match body {
            Value::String(s) => decoded == *s,
            Value::Bool(b) => decoded == if *b { "true" } else { "false" },
            Value::Number(n) => same_number(&decoded, n),
            _ => false,
        };
        if !same {
            return Err(format!(
                "{} header {} does not match the body's {} {body}",
                d.header_name(),
                quote(value),
                d.location()
            ));
        }
    }
    Ok(())
}

/// Walks a schema, collecting annotations. `reachable`: every step from the root
/// was a `properties` key, so an annotation here is allowed.
fn walk<'a>(
    schema: &'a Value,
    path: &mut Vec<&'a str>,
    reachable: bool,
    out: &mut Vec<ParamHeader>,
) -> Result<(), String> {
    let Value::Object(schema) = schema else { return Ok(()) };
    if let Some(name) = schema.get(KEYWORD) {
        let declared = declaration(schema, name, path, reachable, out)?;
        out.push(declared);
    }
    for (keyword, value) in schema {
        match keyword.as_str() {
            "properties" => {
                let Value::Object(properties) = value else { continue };
                for (key, property) in properties {
                    path.push(key);
                    walk(property, path, reachable, out)?;
                    path.pop();
                }
            }
            // Keywords whose value is a schema, an array of schemas or a map of
            // them: what is under them is not statically reachable.
            "items"
            | "prefixItems"
            | "additionalItems"
            | "unevaluatedItems"
            | "contains"
            | "additionalProperties"
            | "unevaluatedProperties"
            | "propertyNames"
            | "allOf"
            | "anyOf"
            | "oneOf"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contentSchema" => walk_nested(value, out)?,
            "$defs" | "definitions" | "patternProperties" | "dependentSchemas" | "dependencies" => {
                let Value::Object(map) = value else { continue };
                for schema in map.values() {
                    walk_nested(schema, out)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A schema (or array of schemas) not statically reachable.
fn walk_nested(value: &Value, out: &mut Vec<ParamHeader>) -> Result<(), String> {
    match value {
        Value::Array(schemas) => schemas.iter().try_for_each(|s| walk(s, &mut Vec::new(), false, out)),
        schema => walk(schema, &mut Vec::new(), false, out),
    }
}

/// One annotation, checked.
fn declaration(
    schema: &Map<String, Value>,
    name: &Value,
    path: &[&str],
    reachable: bool,
    seen: &[ParamHeader],
) -> Result<ParamHeader, String> {
    let shown = name.to_string();
    let Value::String(name) = name else {
        return Err(format!("{KEYWORD} {shown} is not a string"));
    };
    if !reachable || path.is_empty() {
        let place =
            if reachable { "the schema root" } else { "a schema under items, a composition, a condition or $defs" };
        return Err(format!(
            "{KEYWORD} {shown} is on {place}; it is allowed only on properties reached from the root through `properties`"
        ));
    }
    if name.is_empty() {
        return Err(format!("{KEYWORD} is empty"));
    }
    if !name.bytes().all(is_tchar) {
        return Err(format!("{KEYWORD} {shown} is not an HTTP field-name token (letters, digits, !#$%&'*+-.^_`|~)"));
    }
    if let Some(other) = seen.iter().find(|d| d.name.eq_ignore_ascii_case(name)) {
        return Err(format!("{KEYWORD} {shown} is declared twice (also as {})", quote(&other.name)));
    }
    let kind = kind(schema.get("type")).map_err(|found| {
        format!("{KEYWORD} {shown} is on a property of type {found}; only string, integer and boolean can be mirrored")
    })?;
    Ok(ParamHeader { name: name.clone(), path: path.iter().map(|key| String::from(*key)).collect(), kind })
}

/// The property's type when it is one that can be mirrored (a nullable one
/// counts: null has no header); `Err` shows what it is instead.
fn kind(declared: Option<&Value>) -> Result<ParamKind, String> {
    let primitive = |t: &str| match t {
        "string" => Some(ParamKind::String),
        "integer" => Some(ParamKind::Integer),
        "boolean" => Some(ParamKind::Boolean),
        _ => None,
    };
    match declared {
        Some(Value::String(t)) => primitive(t).ok_or_else(|| quote(t)),
        Some(Value::Array(types)) => {
            let mut kinds = types.iter().filter(|t| t.as_str() != Some("null"));
            match (kinds.next().and_then(Value::as_str).and_then(primitive), kinds.next()) {
                (Some(kind), None) => Ok(kind),
                _ => Err(Value::Array(types.clone()).to_string()),
            }
        }
        Some(other) => Err(other.to_string()),
        None => Err("(none declared)".into()),
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The value at a property path of the arguments, if there is one.
fn value_at<'a>(arguments: Option<&'a Value>, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(arguments?, |value, key| value.as_object()?.get(key))
}

/// Whether a value has a header: null has none, and objects and arrays no text.
fn has_header(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Bool(_) | Value::Number(_))
}

/// A value as a header carries it; `None` for values without a header.
fn header_text(kind: ParamKind, value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(crate::http_headers::header_value(s)),
        Value::Bool(b) => Some(String::from(if *b { "true" } else { "false" })),
        Value::Number(n) => Some(number_text(kind, n)),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Largest integer a JSON number holds exactly everywhere (2^53 - 1).
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A number in decimal: `42.0` for an integer argument is `42`.
fn number_text(kind: ParamKind, n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        Some(f) if kind == ParamKind::Integer && (-MAX_SAFE..=MAX_SAFE).contains(&f) && (f as i64) as f64 == f => {
            (f as i64).to_string()
        }
        _ => n.to_string(),
    }
}

/// Whether a header's text is the body's number (`42`, `42.0` and `4.2e1` are).
fn same_number(text: &str, n: &Number) -> bool {
    if let (Some(body), Ok(sent)) = (n.as_i64(), text.parse::<i64>()) {
        return body == sent;
    }
    if let (Some(body), Ok(sent)) = (n.as_u64(), text.parse::<u64>()) {
        return body == sent;
    }
    match (n.as_f64(), text.parse::<f64>()) {
        (Some(body), Ok(sent)) => sent.is_finite() && body == sent,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn region_tool() -> Value {
        json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "query": {"type": "string"},
                "limit": {"type": ["integer", "null"], "x-mcp-header": "Limit"},
                "opts": {"type": "object", "properties": {"dry": {"type": "boolean", "x-mcp-header": "Dry-Run"}}}
            }
        })
    }

    fn received(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (received_name(k).expect("an Mcp-Param header"), v.to_string())).collect()
    }

    #[test]
    fn declarations_are_read_with_their_paths_and_types() {
        let declared = declarations(&region_tool()).unwrap();
        let found: Vec<_> = declared.iter().map(|d| (d.name.as_str(), d.path.join("."), d.kind)).collect();
        assert_eq!(
            found,
            [
                ("Limit", "limit".to_string(), ParamKind::Integer),
                ("Dry-Run", "opts.dry".to_string(), ParamKind::Boolean),
                ("Region", "region".to_string(), ParamKind::String),
            ]
        );
        assert_eq!(declarations(&json!({"type": "object"})).unwrap(), []);
        assert_eq!(declarations(&json!({"type": "object", "properties": {"a": true}})).unwrap(), []);
    }

    /// The conformance suite's invalid tools, and the reachability rule.
    #[test]
    fn invalid_declarations_make_the_tool_invalid() {
        let property = |p: Value| json!({"type": "object", "properties": {"value": p}});
        let invalid = [
            ("empty", property(json!({"type": "string", "x-mcp-header": ""}))),
            ("object", property(json!({"type": "object", "x-mcp-header": "Data"}))),
            ("array", property(json!({"type": "array", "items": {"type": "string"}, "x-mcp-header": "Items"}))),
            ("null", property(json!({"type": "null", "x-mcp-header": "Nil"}))),
            ("number", property(json!({"type": "number", "x-mcp-header": "Score"}))),
            ("untyped", property(json!({"x-mcp-header": "Any"}))),
            ("two types", property(json!({"type": ["string", "integer"], "x-mcp-header": "Two"}))),
            ("space", property(json!({"type": "string", "x-mcp-header": "My Region"}))),
            ("colon", property(json!({"type": "string", "x-mcp-header": "Region:Primary"}))),
            ("non-ascii", property(json!({"type": "string", "x-mcp-header": "Région"}))),
            ("control", property(json!({"type": "string", "x-mcp-header": "Region\t1"}))),
            ("crlf", property(json!({"type": "string", "x-mcp-header": "Region\r\nX"}))),
            ("not a string", property(json!({"type": "string", "x-mcp-header": 7}))),
            (
                "same name",
                json!({"type": "object", "properties": {
                    "a": {"type": "string", "x-mcp-header": "Region"},
                    "b": {"type": "string", "x-mcp-header": "Region"}}}),
            ),
            (
                "same name, other case",
                json!({"type": "object", "properties": {
                    "a": {"type": "string", "x-mcp-header": "MyField"},
                    "b": {"type": "object", "properties": {"c": {"type": "string", "x-mcp-header": "myfield"}}}}}),
            ),
            ("root", json!({"type": "object", "x-mcp-header": "Root"})),
            ("items", property(json!({"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}}))),
            (
                "oneOf",
                json!({"type": "object", "oneOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
            ),
            (
                "$defs",
                json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/r"}},
                       "$defs": {"r": {"type": "string", "x-mcp-header": "R"}}}),
            ),
            ("if", json!({"type": "object", "if": {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}})),
        ];
        for (why, schema) in invalid {
            let result = declarations(&schema);
            assert!(result.is_err(), "{why}: {result:?}");
        }
        let reason = declarations(&property(json!({"type": "number", "x-mcp-header": "Score"}))).unwrap_err();
        assert!(reason.contains("\"Score\"") && reason.contains("\"number\""), "{reason}");
        // A value that merely looks like the keyword, as data, is no annotation.
        let data = property(json!({"type": "object", "default": {"x-mcp-header": "Nope"}}));
        assert_eq!(declarations(&data).unwrap(), []);
    }

    #[test]
    fn values_are_encoded_as_the_transport_says() {
        let declared = declarations(&json!({"type": "object", "properties": {
            "s": {"type": "string", "x-mcp-header": "S"},
            "i": {"type": "integer", "x-mcp-header": "I"},
            "b": {"type": "boolean", "x-mcp-header": "B"},
            "n": {"type": ["string", "null"], "x-mcp-header": "N"},
        }}))
        .unwrap();
        let headers = |arguments: Value| request_headers(&declared, Some(&arguments));
        let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(
            headers(json!({"s": "us-west1", "i": 42, "b": false, "n": null})),
            pairs(&[("Mcp-Param-B", "false"), ("Mcp-Param-I", "42"), ("Mcp-Param-S", "us-west1")])
        );
        // The specification's encoding table.
        for (value, encoded) in [
            ("us-west1", "us-west1"),
            ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (" padded ", "=?base64?IHBhZGRlZCA=?="),
            ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
            ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
            ("a\tb", "=?base64?YQli?="),
            ("", ""),
        ] {
            assert_eq!(headers(json!({"s": value})), pairs(&[("Mcp-Param-S", encoded)]), "{value:?}");
        }
        assert_eq!(headers(json!({"i": -7, "b": true})), pairs(&[("Mcp-Param-B", "true"), ("Mcp-Param-I", "-7")]));
        assert_eq!(headers(json!({"i": 42.0})), pairs(&[("Mcp-Param-I", "42")]));
        assert_eq!(headers(json!({"s": {"x": 1}, "i": [1]})), pairs(&[]));
        assert_eq!(request_headers(&declared, None), pairs(&[]));
        // Nested properties are read at their path.
        let nested = declarations(&region_tool()).unwrap();
        let sent = request_headers(&nested, Some(&json!({"opts": {"dry": true}, "region": "eu"})));
        assert_eq!(sent, pairs(&[("Mcp-Param-Dry-Run", "true"), ("Mcp-Param-Region", "eu")]));
        assert_eq!(request_headers(&nested, Some(&json!({"opts": "odd"}))), pairs(&[]));
    }

    /// What a client sends, the server side accepts.
    #[test]
    fn encoded_headers_pass_the_check() {
        let declared = declarations(&region_tool()).unwrap();
        for arguments in [
            json!({"region": "us-west1", "limit": 5, "opts": {"dry": false}}),
            json!({"region": " ünïcode\r\n", "limit": null}),
            json!({"region": "=?base64?SGVsbG8=?="}),
            json!({}),
        ] {
            let sent = request_headers(&declared, Some(&arguments));
            let map = sent.iter().map(|(k, v)| (received_name(k).unwrap(), v.clone())).collect();
            assert_eq!(check(&declared, Some(&arguments), &map), Ok(()), "{arguments}: {sent:?}");
        }
    }

    /// The conformance suite's server-side cases, on a string argument whose body value is `Hello`.
    #[test]
    fn the_check_decodes_trims_and_refuses_as_the_conformance_table_says() {
        let declared = declarations(&region_tool()).unwrap();
        let call = |body: &str, header: Option<&str>| {
            let arguments = json!({"region": body});
            let sent = header.map_or_else(BTreeMap::new, |h| received(&[("Mcp-Param-Region", h)]));
            check(&declared, Some(&arguments), &sent)
        };
        assert_eq!(call("Hello", Some("=?base64?SGVsbG8=?=")), Ok(()), "valid Base64");
        assert!(call("Hello", Some("=?base64?SGVsbG8?=")).is_err(), "invalid padding");
        assert!(call("Hello", Some("=?base64?SGVs!!!bG8=?=")).is_err(), "invalid characters");
        assert_eq!(call("SGVsbG8=", Some("SGVsbG8=")), Ok(()), "no prefix: literal");
        assert_eq!(call("=?base64?SGVsbG8=", Some("=?base64?SGVsbG8=")), Ok(()), "no suffix: literal");
        assert_eq!(call("Hello", Some("  Hello\t")), Ok(()), "surrounding whitespace is not part of the value");
        assert_eq!(call("", Some("")), Ok(()), "an empty string has an empty header");
        let missing = call("test-value", None).unwrap_err();
        assert!(missing.contains("missing Mcp-Param-Region") && missing.contains("arguments.region"), "{missing}");
        let mismatch = call("us-west1", Some("eu-west1")).unwrap_err();
        assert!(mismatch.contains("\"eu-west1\"") && mismatch.contains("\"us-west1\""), "{mismatch}");
        assert!(call("Hello", Some("Hel\u{7f}lo")).is_err(), "a control character");
        assert!(call("Héllo", Some("Héllo")).is_err(), "non-ASCII must come Base64-encoded");
        assert!(call("Hello", Some("hello")).is_err(), "values are case-sensitive");
    }

    #[test]
    fn names_are_case_insensitive_numbers_numeric_and_absent_values_need_no_header() {
        let declared = declarations(&region_tool()).unwrap();
        let arguments = json!({"region": "eu", "limit": 42, "opts": {"dry": true}});
        let ok = received(&[("mcp-param-region", "eu"), ("MCP-PARAM-LIMIT", "42.0"), ("Mcp-Param-Dry-Run", "true")]);
        assert_eq!(check(&declared, Some(&arguments), &ok), Ok(()));
        let wrong = received(&[("mcp-param-region", "eu"), ("mcp-param-limit", "41"), ("mcp-param-dry-run", "true")]);
        assert!(check(&declared, Some(&arguments), &wrong).is_err());
        let yes = received(&[("mcp-param-region", "eu"), ("mcp-param-limit", "42"), ("mcp-param-dry-run", "True")]);
        assert!(check(&declared, Some(&arguments), &yes).is_err(), "booleans are spelled in lowercase");
        // Null and absent arguments expect no header; unknown headers are ignored.
        let quiet = received(&[("Mcp-Param-Other", "x")]);
        assert_eq!(check(&declared, Some(&json!({"limit": null})), &quiet), Ok(()));
        assert_eq!(check(&declared, None, &quiet), Ok(()));
        // A header without a body value is refused: the router saw what the tool will not.
        let stray = received(&[("Mcp-Param-Region", "eu")]);
        assert!(check(&declared, Some(&json!({})), &stray).is_err());
        assert_eq!(received_name("Content-Type"), None);
        assert_eq!(received_name("Mcp-Param-"), None);
        assert_eq!(received_name("mcp-param-Region").as_deref(), Some("region"));
    }
}
