//! Tool arguments mirrored into `Mcp-Param-*` HTTP headers (2026-07-28,
//! SEP-2243): tether refuses a stateless HTTP client's `tools/call` whose headers
//! disagree with its arguments (-32020), adds the headers to its own calls to a
//! stateless HTTP backend, and does not serve a tool whose annotations are invalid.

mod support;

use std::collections::BTreeMap;

use serde_json::{json, Value};
use support::*;
use tether_core::param_headers::received_name;
use tether_core::protocol::Era;
use tether_core::{Action, Config, Event, Input, ServerConfig, SessionId};

/// `sql` mirrors `region` and `limit`; `bad` puts an annotation on a number.
fn tools() -> Value {
    json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private", "tools": [
        {"name": "sql", "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limit": {"type": "integer", "x-mcp-header": "Limit"},
            "query": {"type": "string"}}}},
        {"name": "bad", "inputSchema": {"type": "object", "properties": {
            "score": {"type": "number", "x-mcp-header": "Score"}}}},
        {"name": "plain", "inputSchema": {"type": "object"}},
    ]})
}

/// `web` (HTTP) online in the era given, listing [`tools`]; stateless clients served.
fn booted(era: Era) -> Sim {
    let mut config = Config::default().server("web", ServerConfig::http("https://web.example/mcp"));
    config.stateless_clients = true;
    let mut sim = Sim::new(config);
    match era {
        Era::Stateless => {
            let discover = json!({"resultType": "complete", "supportedVersions": [STATELESS],
                "capabilities": {"tools": {}}, "ttlMs": 0, "cacheScope": "private"});
            sim.answer("web", "server/discover", discover);
        }
        Era::Handshake => {
            sim.answer("web", "initialize", json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}));
        }
    }
    sim.answer("web", "tools/list", tools());
    sim
}

/// One stateless POST: a session of its own, the frame and its `Mcp-Param-*` headers.
fn post(sim: &mut Sim, session: u64, frame: Value, headers: &[(&str, &str)]) -> Value {
    let session = SessionId(session);
    let param_headers: BTreeMap<String, String> =
        headers.iter().map(|(name, value)| (received_name(name).expect("Mcp-Param-*"), value.to_string())).collect();
    sim.input(Input::ClientConnected { session, expires: true });
    sim.input(Input::ClientFrame { session, frame: frame.to_string(), param_headers: Some(param_headers) });
    let answer = sim.actions.iter().rev().find_map(|(_, a)| match a {
        Action::SendToClient { session: s, frame, .. } if *s == session => serde_json::from_str(frame).ok(),
        _ => None,
    });
    answer.unwrap_or(Value::Null)
}

fn call(id: u64, arguments: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
           "params":{"name":"web__sql","arguments":arguments,"_meta":stateless_meta()}})
}

/// The `tools/call` frames sent to `web`, with their headers.
fn calls_sent(sim: &Sim) -> Vec<(Value, Vec<(String, String)>)> {
    sim.actions
        .iter()
        .filter_map(|(_, a)| match a {
            Action::SendToBackend { server, frame, headers, .. } if &**server == "web" => {
                let frame: Value = serde_json::from_str(frame).ok()?;
                (frame["method"] == "tools/call").then(|| (frame, headers.clone()))
            }
            _ => None,
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_stateless_clients_call_is_refused_when_its_headers_disagree_and_forwarded_with_them_when_they_agree() {
    let mut sim = booted(Era::Stateless);

    sim.note("the argument is in the body, its header is missing: HeaderMismatch, nothing forwarded");
    let refused = post(&mut sim, 10, call(1, json!({"region": "us-west1", "query": "q"})), &[]);
    assert_eq!(refused["id"], 1);
    assert_eq!(refused["error"]["code"], -32020, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("Mcp-Param-Region") && message.contains("us-west1"), "{message}");
    assert_eq!(tether_core::protocol::stateless_http_status(&refused.to_string()), 400);

    sim.note("a header that says something else than the body: refused too");
    let refused = post(&mut sim, 11, call(2, json!({"region": "us-west1"})), &[("Mcp-Param-Region", "eu-west1")]);
    assert_eq!(refused["error"]["code"], -32020, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("eu-west1"));
    let refused =
        post(&mut sim, 12, call(3, json!({"region": "Hello"})), &[("mcp-param-region", "=?base64?SGVsbG8?=")]);
    assert_eq!(refused["error"]["code"], -32020, "invalid padding: {refused}");
    assert!(calls_sent(&sim).is_empty(), "no refused call reaches the backend");

    sim.note("headers that agree (any case, Base64, a number compared as one): the call goes on, with its headers");
    let arguments = json!({"region": "Zürich", "limit": 5, "query": "select 1"});
    let headers = [("MCP-PARAM-REGION", " =?base64?WsO8cmljaA==?= "), ("mcp-param-limit", "5.0")];
    post(&mut sim, 13, call(4, arguments.clone()), &headers);
    let (frame, headers) = calls_sent(&sim).pop().expect("forwarded");
    assert_eq!(frame["params"]["name"], "sql");
    assert_eq!(frame["params"]["arguments"], arguments);
    assert_eq!(headers, pairs(&[("Mcp-Param-Limit", "5"), ("Mcp-Param-Region", "=?base64?WsO8cmljaA==?=")]));
    reply(&mut sim, "web", frame["id"].as_u64().unwrap(), text_result("ok"));

    sim.note("an argument left out needs no header; a tool that mirrors nothing is not checked");
    post(&mut sim, 14, call(5, json!({"query": "q"})), &[]);
    assert_eq!(calls_sent(&sim).pop().unwrap().1, []);
    let plain = json!({"jsonrpc":"2.0","id":6,"method":"tools/call",
                       "params":{"name":"web__plain","arguments":{"region":"x"},"_meta":stateless_meta()}});
    post(&mut sim, 15, plain, &[]);
    assert_eq!(calls_sent(&sim).len(), 3);

    sim.note("a handshake-era client sends no headers and is not checked; tether adds them for the backend");
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":7,"method":"tools/call",
                      "params":{"name":"web__sql","arguments":{"region":"eu","limit":7}}}));
    assert_eq!(calls_sent(&sim).pop().unwrap().1, pairs(&[("Mcp-Param-Limit", "7"), ("Mcp-Param-Region", "eu")]));
}

#[test]
fn a_tool_with_an_invalid_annotation_is_not_served_and_the_operator_is_told_why() {
    let mut sim = booted(Era::Stateless);
    let violations: Vec<String> = events(&sim)
        .into_iter()
        .filter_map(|(_, e)| match e {
            Event::ProtocolViolation { server, detail } if &*server == "web" => Some(detail),
            _ => None,
        })
        .collect();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("\"bad\"") && violations[0].contains("\"number\""), "{}", violations[0]);
    sim.client_init();
    assert_eq!(listed_tools(&mut sim, 1), ["web__sql", "web__plain"]);
    // The served schema keeps its annotations: tether's own clients mirror them.
    let list = sim.response(1);
    assert_eq!(list["result"]["tools"][0]["inputSchema"]["properties"]["region"]["x-mcp-header"], "Region");
}

#[test]
fn calls_to_a_handshake_era_backend_carry_no_param_headers() {
    let mut sim = booted(Era::Handshake);
    sim.client_init();
    sim.client(json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
                      "params":{"name":"web__sql","arguments":{"region":"eu"}}}));
    let (_, headers) = calls_sent(&sim).pop().expect("forwarded");
    assert_eq!(headers, []);
}

#[test]
fn a_handshake_era_request_over_http_is_not_checked_for_param_headers() {
    let mut sim = booted(Era::Stateless);
    // No stateless `_meta`: the era check refuses it, not the header check.
    let frame =
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"web__sql","arguments":{"region":"eu"}}});
    let refused = post(&mut sim, 10, frame, &[]);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
}
