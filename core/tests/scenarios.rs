//! Whole scenarios of the documented behaviour, each pinned as a
//! readable transcript: time, input, and the actions it caused.

mod support;

use serde_json::json;
use support::*;
use tether_core::Status;

#[test]
fn two_backends_initialised_and_aggregated() {
    let mut sim = Sim::new(two_backends());
    sim.client_init();
    sim.note("client lists tools while both backends are still starting: parked");
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    sim.boot("fs", &["read_file", "write_file"]);
    sim.boot("web", &["search"]);
    let list = sim.response(1);
    let names: Vec<_> = list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].clone()).collect();
    assert_eq!(names, [json!("fs__read_file"), json!("fs__write_file"), json!("web__search")]);
    assert_eq!(sim.status("fs"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_call_is_routed_and_answered() {
    let mut sim = Sim::new(one_stdio());
    sim.boot("fs", &["read_file"]);
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":"call-1","method":"tools/call","params":{"name":"fs__read_file","arguments":{"path":"/a"}}}));
    let (id, params) = sim.requests_to("fs", "tools/call").pop().unwrap();
    assert_eq!(params["name"], "read_file");
    sim.backend("fs", json!({"jsonrpc":"2.0","id":id,"result":{"content":[{"type":"text","text":"hello"}]}}));
    let frames = sim.client_frames();
    let r = frames.iter().find(|f| f["id"] == "call-1").unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "hello");
    insta::assert_snapshot!(sim.log);
}
