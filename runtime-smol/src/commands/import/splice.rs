//! Adding entries to an object of a JSON-with-comments file by inserting text, so
//! everything else in the file (comments, key order, spacing, trailing commas)
//! stays as the person wrote it. `tether import` adds servers to tether's own file
//! this way.

use serde_json::value::RawValue;
use std::collections::HashMap;

use tether_host::config_file::{jsonc_as_json, Node};

/// `text` with `entries` added at the end of the object at `path` (keys from the
/// root; the last occurrence of a repeated key, as tether reads it). `None` when
/// the text does not parse or `path` does not lead to an object: the caller then
/// writes the file whole.
pub(super) fn add_entries(text: &str, path: &[&str], entries: &[(String, Node)]) -> Option<String> {
    let bom = if text.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
    let json = jsonc_as_json(&text[bom..]);
    let mut object: &RawValue = serde_json::from_str(&json).ok()?;
    for key in path {
        let members: HashMap<String, &RawValue> = serde_json::from_str(object.get()).ok()?;
        object = members.get(*key).copied()?;
    }
    let members: HashMap<String, &RawValue> = serde_json::from_str(object.get()).ok()?;
    let offset = |raw: &RawValue| raw.get().as_ptr() as usize - json.as_ptr() as usize;
    let (open, close) = (offset(object), offset(object) + object.get().len() - 1);
    if json.as_bytes()[open] != b'{' || json.as_bytes()[close] != b'}' {
        return None;
    }

    let own_indent = indent_of(&json, open);
    let first = members.values().map(|v| offset(v)).min();
    let entry_indent = match first {
        Some(at) if line_start(&json, at) > open => indent_of(&json, at),
        _ => format!("{own_indent}{}", if own_indent.is_empty() { "  " } else { &own_indent }),
    };
    let step = entry_indent.strip_prefix(own_indent.as_str()).filter(|s| !s.is_empty()).unwrap_or("  ");

    let mut added = Vec::new();
    for (name, value) in entries {
        let key = serde_json::to_string(name).ok()?;
        let value = pretty(value, step)?.replace('\n', &format!("\n{entry_indent}"));
        added.push(format!("{entry_indent}{key}: {value}"));
    }
    let added = added.join(",\n");

    let mut edits: Vec<(usize, String)> = Vec::new();
    if let Some(last) = members.values().map(|v| offset(v) + v.get().len()).max() {
        // A trailing comma was blanked in `json`; the original has it (or a comma
        // is needed).
        if !has_comma(&text[bom + last..bom + close]) {
            edits.push((last, ",".into()));
        }
    }
    // Before the closing brace: on its own line when it has one, else on a new line.
    let brace_line = line_start(&json, close);
    if brace_line > open && json[brace_line..close].trim().is_empty() {
        edits.push((brace_line, format!("{added}\n")));
    } else {
        edits.push((close, format!("\n{added}\n{own_indent}")));
    }

    let mut out = text.to_string();
    for (at, insert) in edits.into_iter().rev() {
        out.insert_str(bom + at, &insert);
    }
    Some(out)
}

/// Whether `between` (what follows an object's last value up to its closing brace)
/// holds a comma outside comments: a trailing comma.
fn has_comma(between: &str) -> bool {
    let mut rest = between;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("//") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else {
            return rest.starts_with(',');
        }
    }
}

/// The byte index where the line holding `at` starts.
fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |n| n + 1)
}

/// The leading whitespace of the line holding `at`.
fn indent_of(text: &str, at: usize) -> String {
    let start = line_start(text, at);
    text[start..].chars().take_while(|c| *c == ' ' || *c == '\t').collect()
}

/// `value` as pretty JSON indented by `step`.
fn pretty(value: &Node, step: &str) -> Option<String> {
    use serde::Serialize;
    let mut bytes = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(step.as_bytes());
    let mut serializer = serde_json::Serializer::with_formatter(&mut bytes, formatter);
    value.serialize(&mut serializer).ok()?;
    String::from_utf8(bytes).ok()
}
