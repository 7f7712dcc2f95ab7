//! `${VAR}` expansion in the string values of server entries.

use serde_json::{Map, Value};

use super::Problem;

/// Where variables come from (the process environment, or a test's table).
pub(super) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Expands `${VAR}`, `${VAR:-default}` and `$$` in `text`, the value of the field at
/// `path`. Errors name the field and never quote the text.
pub(super) fn expand(text: &str, path: &str, env: Env<'_>) -> Result<String, Problem> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('{') {
            let end = tail
                .find('}')
                .ok_or_else(|| Problem::new(path, "unterminated \"${\" (write \"$$\" for a literal \"$\")"))?;
            out.push_str(&substitute(&tail[..end], path, env)?);
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `value` with every string in it expanded; `path` names it in errors.
pub(super) fn expand_strings(value: &Value, path: &str, env: Env<'_>) -> Result<Value, Problem> {
    Ok(match value {
        Value::String(s) => Value::String(expand(s, path, env)?),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), expand_strings(v, &format!("{path}.{k}"), env)?)))
                .collect::<Result<Map<String, Value>, Problem>>()?,
        ),
        Value::Array(a) => {
            Value::Array(a.iter().map(|v| expand_strings(v, path, env)).collect::<Result<Vec<_>, Problem>>()?)
        }
        other => other.clone(),
    })
}

/// The value of one reference, `NAME` or `NAME:-default` (without the braces).
fn substitute(reference: &str, path: &str, env: Env<'_>) -> Result<String, Problem> {
    let (name, default) = match reference.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (reference, None),
    };
    if !is_variable_name(name) || default.is_some_and(|d| d.contains("${")) {
        return Err(Problem::new(
            path,
            "malformed variable reference; expected ${NAME} or ${NAME:-default} (write \"$$\" for a literal \"$\")",
        ));
    }
    match (env(name), default) {
        (Some(value), Some(default)) if value.is_empty() => Ok(default.to_string()),
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_string()),
        (None, None) => Err(Problem::new(path, format!("{UNSET_PREFIX}{name}{UNSET_SUFFIX}"))),
    }
}

const UNSET_PREFIX: &str = "environment variable ";
const UNSET_SUFFIX: &str = " is not set";

/// Whether `problem` is a variable that is not set (which, in a server entry,
/// touches that server alone).
pub(super) fn is_unset(problem: &Problem) -> bool {
    problem.message.starts_with(UNSET_PREFIX) && problem.message.ends_with(UNSET_SUFFIX)
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
