//! Tests of the catalog: namespacing, visibility, pagination, fingerprints.
use super::*;
use alloc::vec;
use serde_json::json;

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!(),
    }
}

fn tools(names: &[&str]) -> [Vec<Map<String, Value>>; 4] {
    let mut l: [Vec<Map<String, Value>>; 4] = Default::default();
    l[0] = names.iter().map(|n| obj(json!({"name": n, "inputSchema": {"type": "object"}}))).collect();
    l
}

#[test]
fn names_round_trip_through_lookup() {
    let mut c = Catalog::new("__");
    c.register("fs", true);
    c.register("fs_x", true);
    c.install("fs", tools(&["x__read"]));
    c.install("fs_x", tools(&["read"]));
    // `fs__x__read` and `fs_x__read` are different backends' tools; lookup, not splitting, tells them apart.
    assert_eq!(c.resolve_tool("fs__x__read").unwrap().server, "fs");
    assert_eq!(c.resolve_tool("fs__x__read").unwrap().entry.original, "x__read");
    assert_eq!(c.resolve_tool("fs_x__read").unwrap().server, "fs_x");
    assert!(c.resolve_tool("read").is_none());
}

#[test]
fn long_and_odd_names_are_shortened_reversibly() {
    let mut c = Catalog::new("__");
    c.register("srv", true);
    let long = "a".repeat(80);
    c.install("srv", tools(&[&long, "dotted.name/x", "dotted_name_x"]));
    let served: Vec<_> = c.visible(ListKind::Tools, |_, _| true).map(|(_, e)| e.served.clone()).collect();
    assert_eq!(served.len(), 3);
    for s in &served {
        assert!(s.len() <= MAX_NAME_LEN && s.bytes().all(is_name_byte), "{s}");
        assert_eq!(c.resolve_tool(s).unwrap().entry.served, *s);
    }
    assert_ne!(served[1], served[2]);
    assert_eq!(c.resolve_tool(&served[0]).unwrap().entry.original, long);
}

#[test]
fn unprefixed_collisions_are_reported_not_served_twice() {
    let mut c = Catalog::new("__");
    c.register("a", false);
    c.register("b", false);
    assert_eq!(c.install("a", tools(&["search"])), Installed::default());
    let conflicts = c.install("b", tools(&["search", "other"])).conflicts;
    assert_eq!(conflicts, [Conflict { name: "search".into() }]);
    assert_eq!(c.resolve_tool("search").unwrap().server, "a");
    assert_eq!(c.resolve_tool("other").unwrap().server, "b");
}

#[test]
fn uris_round_trip_and_meta_is_kept() {
    let mut c = Catalog::new("__");
    c.register("fs", true);
    let mut l: [Vec<Map<String, Value>>; 4] = Default::default();
    l[0] = vec![obj(json!({"name":"view","_meta":{"ui":{"resourceUri":"ui://view"},"x":1}}))];
    l[1] = vec![obj(json!({"uri":"git+ssh://h/r?q=1#f","name":"r"}))];
    l[2] = vec![obj(json!({"uriTemplate":"file:///{path}","name":"t"}))];
    c.install("fs", l);
    let (_, res) = c.visible(ListKind::Resources, |_, _| true).next().unwrap();
    assert_eq!(res.served, "fs+git+ssh://h/r?q=1#f");
    assert_eq!(c.resolve_uri(&res.served), Some(("fs", "git+ssh://h/r?q=1#f")));
    assert_eq!(c.resolve_uri("fs+file:///etc/hosts"), Some(("fs", "file:///etc/hosts")));
    assert_eq!(c.resolve_uri("nope+file:///x"), None);
    let tool = c.resolve_tool("fs__view").unwrap().entry;
    assert!(tool.json.contains(r#""resourceUri":"fs+ui://view""#), "{}", tool.json);
    assert!(tool.json.contains(r#""x":1"#));
}

#[test]
fn unprefixed_backends_serve_uris_unchanged() {
    let mut c = Catalog::new("__");
    c.register("fs", true);
    c.register("plain", false);
    let mut l: [Vec<Map<String, Value>>; 4] = Default::default();
    l[0] = vec![obj(json!({"name":"view","_meta":{"ui":{"resourceUri":"ui://view"}}}))];
    l[1] = vec![obj(json!({"uri":"test://static-text","name":"t"}))];
    l[2] = vec![obj(json!({"uriTemplate":"test://template/{id}/data","name":"tpl"}))];
    c.install("plain", l);
    let (_, res) = c.visible(ListKind::Resources, |_, _| true).next().unwrap();
    assert_eq!(res.served, "test://static-text");
    assert_eq!(c.resolve_uri("test://static-text"), Some(("plain", "test://static-text")));
    assert_eq!(c.resolve_uri("test://template/7/data"), Some(("plain", "test://template/7/data")));
    assert_eq!(c.resolve_uri("fs+file:///x"), Some(("fs", "file:///x")));
    // Not listed, no template: the only unprefixed backend takes it.
    assert_eq!(c.resolve_uri("other://x"), Some(("plain", "other://x")));
    assert_eq!(c.serve_uri("plain", "test://a").as_deref(), Some("test://a"));
    assert_eq!(c.serve_uri("fs", "file:///a").as_deref(), Some("fs+file:///a"));
    assert!(c.resolve_tool("view").unwrap().entry.json.contains(r#""resourceUri":"ui://view""#));
    // Turning prefixing on aliases everything, and back off restores it.
    c.register("plain", true);
    assert_eq!(c.resolve_uri("plain+test://static-text"), Some(("plain", "test://static-text")));
    assert!(c.resolve_tool("plain__view").unwrap().entry.json.contains(r#""resourceUri":"plain+ui://view""#));
    c.register("plain", false);
    assert!(c.resolve_tool("view").unwrap().entry.json.contains(r#""resourceUri":"ui://view""#));
    assert_eq!(c.resolve_uri("other://x"), Some(("plain", "other://x")));
    c.check_invariants().unwrap();
}

#[test]
fn pages_with_own_cursor_and_visibility() {
    let mut c = Catalog::new("__");
    c.register("a", true);
    c.register("b", true);
    c.install("a", tools(&["1", "2", "3"]));
    c.install("b", tools(&["4"]));
    let p1 = c.page(ListKind::Tools, None, 2, |_, _| true).unwrap();
    assert!(p1.contains("a__1") && p1.contains("a__2") && p1.ends_with(r#""nextCursor":"t2"}"#), "{p1}");
    let p2 = c.page(ListKind::Tools, Some("t2"), 2, |_, _| true).unwrap();
    assert!(p2.contains("a__3") && p2.contains("b__4") && !p2.contains("nextCursor"), "{p2}");
    let hidden = c.page(ListKind::Tools, None, 10, |s, _| s != "a").unwrap();
    assert_eq!(hidden, r#"{"tools":[{"inputSchema":{"type":"object"},"name":"b__4"}]}"#);
    assert!(c.page(ListKind::Tools, Some("p0"), 2, |_, _| true).is_err());
    assert!(c.page(ListKind::Tools, Some("tx"), 2, |_, _| true).is_err());
    assert_ne!(c.visible_hash(ListKind::Tools, |_, _| true), c.visible_hash(ListKind::Tools, |s, _| s != "a"));
}

#[test]
fn toggling_prefix_rekeys_without_losing_the_catalog() {
    let mut c = Catalog::new("__");
    c.register("fs", true);
    c.install("fs", tools(&["read"]));
    c.register("fs", false);
    assert_eq!(c.resolve_tool("read").unwrap().entry.original, "read");
    assert!(c.resolve_tool("fs__read").is_none());
}

#[test]
fn mirrored_arguments_are_read_once_and_invalid_tools_are_left_out() {
    let mut c = Catalog::new("__");
    c.register("s", true);
    c.register("t", true);
    c.install("t", tools(&["plain"]));
    assert!(!c.mirrors_params());
    let mut l: [Vec<Map<String, Value>>; 4] = Default::default();
    l[0] = vec![
        obj(json!({"name":"sql","inputSchema":{"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"}}}})),
        obj(json!({"name":"bad","inputSchema":{"type":"object","properties":{
            "score":{"type":"number","x-mcp-header":"Score"}}}})),
        obj(json!({"name":"plain","inputSchema":{"type":"object"}})),
    ];
    let installed = c.install("s", l);
    assert_eq!(installed.conflicts, []);
    assert_eq!(installed.rejected.len(), 1);
    assert_eq!(installed.rejected[0].name, "bad");
    assert!(installed.rejected[0].reason.contains("\"number\""), "{:?}", installed.rejected);
    assert!(c.resolve_tool("s__bad").is_none());
    let sql = c.resolve_tool("s__sql").unwrap().entry;
    assert_eq!(sql.param_headers.len(), 1);
    assert_eq!(sql.param_headers[0].name, "Region");
    assert!(c.resolve_tool("s__plain").unwrap().entry.param_headers.is_empty());
    assert!(c.mirrors_params());
    let backend = c.backend("s").unwrap();
    assert!(backend.mirrors_params() && !c.backend("t").unwrap().mirrors_params());
    assert_eq!(backend.tool("sql").map(|e| e.served.as_str()), Some("s__sql"));
    // Re-keyed entries keep their declarations.
    c.register("s", false);
    assert_eq!(c.resolve_tool("sql").unwrap().entry.param_headers.len(), 1);
}

#[test]
fn retry_safety_and_tokens_come_from_the_tool() {
    let mut c = Catalog::new("__");
    c.register("s", true);
    let mut l: [Vec<Map<String, Value>>; 4] = Default::default();
    l[0] = vec![
        obj(json!({"name":"get","description":"12345678","annotations":{"readOnlyHint":true}})),
        obj(json!({"name":"put","annotations":{"destructiveHint":true}})),
    ];
    c.install("s", l);
    assert!(c.resolve_tool("s__get").unwrap().entry.retry_safe);
    assert!(!c.resolve_tool("s__put").unwrap().entry.retry_safe);
    assert_eq!(c.resolve_tool("s__get").unwrap().entry.estimated_tokens, 2, "(3 + 8 chars) / 4");
}
