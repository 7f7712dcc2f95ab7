//! SEP-1034: a client that accepts a backend's elicitation but leaves out fields
//! the requested schema gives a `default` gets them filled in by tether before
//! the answer reaches the backend; what the client did give is kept.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::Action;

/// The answers tether sent to `web`, parsed.
fn answers_to_web(sim: &Sim) -> Vec<Value> {
    sim.actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToBackend { server, frame, .. } if &**server == "web" => serde_json::from_str(frame).ok(),
            _ => None,
        })
        .filter(|v: &Value| v.get("method").is_none())
        .collect()
}

#[test]
fn an_accepted_elicitation_reaches_the_backend_with_the_schema_defaults() {
    let mut sim = Sim::new(one_http());
    sim.boot("web", &["signup"]);
    sim.client(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"minimal","version":"1"}}}));
    sim.client(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    sim.call(1, "web__signup");
    let schema = json!({"type":"object","properties":{
        "name":{"type":"string","default":"John Doe"},
        "age":{"type":"integer","default":30},
        "status":{"type":"string","enum":["active","inactive"],"default":"active"},
        "verified":{"type":"boolean","default":true},
        "note":{"type":"string"}
    }});
    for (backend_id, content) in
        [(70, json!({"age": 41})), (71, json!({"name":"A","age":1,"status":"inactive","verified":false}))]
    {
        sim.backend(
            "web",
            json!({"jsonrpc":"2.0","id":backend_id,"method":"elicitation/create","params":{"message":"who?","requestedSchema":schema}}),
        );
        let asked = sim.client_frames().into_iter().rev().find(|f| f["method"] == "elicitation/create").unwrap();
        sim.client(json!({"jsonrpc":"2.0","id":asked["id"],"result":{"action":"accept","content":content}}));
    }
    let answers = answers_to_web(&sim);
    let filled = answers.iter().find(|a| a["id"] == 70).expect("answer relayed");
    assert_eq!(
        filled["result"],
        json!({"action":"accept","content":{"age":41,"name":"John Doe","status":"active","verified":true}}),
        "defaults filled in, the client's own value kept, no default invented for `note`"
    );
    let complete = answers.iter().find(|a| a["id"] == 71).expect("answer relayed");
    assert_eq!(complete["result"]["content"], json!({"name":"A","age":1,"status":"inactive","verified":false}));
}
