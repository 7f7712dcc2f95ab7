//! A session's view on its own: what its scopes let it call, get, read and see,
//! over a real catalog.

use super::*;
use crate::access::{ScopeGrant, ScopeMap};
use alloc::string::ToString;
use alloc::vec;
use serde_json::{json, Map, Value};

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("an object"),
    }
}

/// `time` (tool `now`, resource `time://zone`, prompt `when`; lists in
/// [`ListKind::ALL`]'s order) and `everything` (tools `echo`, `add`).
fn catalog() -> Catalog {
    let mut c = Catalog::new("__");
    for server in ["time", "everything"] {
        c.register(server, true);
    }
    let tool = |n: &str| obj(json!({"name": n, "inputSchema": {"type": "object"}}));
    c.install(
        "time",
        [
            vec![tool("now")],
            vec![obj(json!({"uri": "time://zone", "name": "zone"}))],
            vec![],
            vec![obj(json!({"name": "when"}))],
        ],
    );
    c.install("everything", [vec![tool("echo"), tool("add")], vec![], vec![], vec![]]);
    c
}

fn mapping() -> ScopeMap {
    let mut m = ScopeMap::new();
    m.insert("time".into(), ScopeGrant { servers: vec!["time".into()], tools: vec![] });
    m.insert("echo".into(), ScopeGrant { servers: vec![], tools: vec!["everything__echo".into()] });
    m
}

fn view<'a>(catalog: &'a Catalog, mapping: &'a ScopeMap, held: Option<&'a [String]>) -> SessionView<'a> {
    SessionView { access: Access::new(mapping, held), catalog }
}

#[test]
fn a_tool_scope_calls_that_tool_only_and_sees_its_server_but_not_its_prompts_or_resources() {
    let (c, m) = (catalog(), mapping());
    let held = ["echo".to_string()];
    let v = view(&c, &m, Some(&held));
    assert!(v.restricted());
    assert_eq!(v.tool("everything__echo").map(|r| r.server), Some("everything"));
    assert!(v.tool("everything__add").is_none() && v.tool("time__now").is_none());
    assert!(v.prompt("time__when").is_none());
    let served = c.visible(ListKind::Resources, |_, _| true).map(|(_, e)| e.served.clone()).next();
    let served = served.expect("one resource");
    assert!(v.uri(&served).is_none());
    assert!(v.sees_server("everything") && !v.sees_server("time"));
}

#[test]
fn a_server_scope_grants_its_tools_prompts_and_resources_whole() {
    let (c, m) = (catalog(), mapping());
    let held = ["time".to_string()];
    let v = view(&c, &m, Some(&held));
    assert!(v.tool("time__now").is_some() && v.prompt("time__when").is_some());
    let served = c.visible(ListKind::Resources, |_, _| true).map(|(_, e)| e.served.clone()).next().expect("one");
    assert_eq!(v.uri(&served), Some(("time", "time://zone")));
    let entry = c.resolve_tool("everything__echo").expect("listed").entry;
    assert!(!v.grants(ListKind::Tools, "everything", entry) && !v.sees_server("everything"));
}

#[test]
fn no_scopes_given_sees_everything_and_an_unknown_name_is_none_either_way() {
    let (c, m) = (catalog(), mapping());
    let v = view(&c, &m, None);
    assert!(!v.restricted());
    assert!(v.tool("everything__add").is_some() && v.sees_server("time"));
    assert!(v.tool("nope__x").is_none());
    let none: [String; 0] = [];
    assert!(view(&c, &m, Some(&none)).tool("nope__x").is_none());
}
