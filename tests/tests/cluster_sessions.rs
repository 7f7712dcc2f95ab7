//! Sealed sessions' state shared through Redis, end to end: three `tether
//! serve --listen` replicas with one `tether.cluster` (session keys and a
//! `redis-server` of the test's own), each with its own mock backend.
//!
//! A session opened on A subscribes to a resource and sets its log level
//! there; B, which never saw it, adopts it from its id, restores the
//! subscription (subscribing at its own backend) and delivers the resource's
//! update on the session's stream. The client ends the session on B; C
//! refuses the id from then on (404), and the state is gone from Redis.
//!
//! Needs `redis-server` on the PATH (see [`tether_tests::redis_server`]).

use std::io::BufRead;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};
use tether_tests::redis_server::RedisServer;
use tether_tests::{mcp_post, mock_server, wait_until, Tether};

const TOKEN: &str = "tok-cluster-sessions-0123456789";

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build()
}

fn post(url: &str, session: Option<&str>, body: &Value) -> (u16, Option<String>, Value) {
    let (status, id, text) = mcp_post(&agent(), url, Some(TOKEN), session, body).unwrap();
    (status, id, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Opens the session's stream on `url` (GET); its `data:` lines arrive on the channel.
fn stream(url: &str, session: &str) -> mpsc::Receiver<String> {
    let response = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .build()
        .get(url)
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .set("Accept", "text/event-stream")
        .set("Mcp-Session-Id", session)
        .set("MCP-Protocol-Version", "2025-11-25")
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(response.into_reader()).lines() {
            let Ok(line) = line else { break };
            // (The stream opens with an empty event that carries only an id.)
            if let Some(data) = line.strip_prefix("data:").map(str::trim).filter(|d| !d.is_empty()) {
                if tx.send(data.to_owned()).is_err() {
                    break;
                }
            }
        }
    });
    rx
}

#[test]
fn a_sessions_subscription_follows_it_to_the_replica_that_adopts_it_and_its_end_is_everyones() {
    let Some(redis) = RedisServer::start() else { return };
    let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let config = json!({
        "mcpServers": { "m": mock_server(&[]) },
        "tether": { "cluster": { "session_keys": format!("1:{key}"), "store": redis.url() } }
    });
    let args = ["serve", "--listen", "127.0.0.1:0", "--auth-token", TOKEN];
    let replicas: Vec<Tether> = (0..3).map(|_| Tether::start(config.clone(), &args)).collect();
    let urls: Vec<String> = replicas.iter().map(|t| t.logged_url("listening on ")).collect();
    let (a, b, c) = (&urls[0], &urls[1], &urls[2]);

    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let (status, session, _) = post(a, None, &init);
    assert_eq!(status, 200);
    let session = session.expect("a session id");
    let s = Some(session.as_str());
    post(a, s, &json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let mut uri = String::new();
    let listed = wait_until(Duration::from_secs(20), || {
        let (_, _, list) = post(a, s, &json!({"jsonrpc":"2.0","id":2,"method":"resources/list"}));
        let uris = list["result"]["resources"].as_array().cloned().unwrap_or_default();
        uri = uris.iter().filter_map(|r| r["uri"].as_str()).find(|u| u.ends_with("mock://info")).unwrap_or("").into();
        !uri.is_empty()
    });
    assert!(listed, "no mock://info resource on A");
    let (_, _, subscribed) =
        post(a, s, &json!({"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri": uri}}));
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    post(a, s, &json!({"jsonrpc":"2.0","id":4,"method":"logging/setLevel","params":{"level":"warning"}}));
    let kept = wait_until(Duration::from_secs(10), || redis.dump().contains("tether:session:"));
    assert!(kept, "A kept no session state in Redis:\n{}", redis.dump());

    // B never saw the session: its stream adopts it, with the subscription.
    let updates = stream(b, &session);
    let (_, _, tools) = post(b, s, &json!({"jsonrpc":"2.0","id":5,"method":"tools/list"}));
    let echo = tools["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.ends_with("echo"))
        .unwrap_or_else(|| panic!("no echo tool on B: {tools}"))
        .to_owned();
    // B subscribes at its own backend in the background: call until the
    // update arrives (each call makes the backend announce one when subscribed).
    let mut heard = None;
    for n in 0..50 {
        let call = json!({"jsonrpc":"2.0","id":10 + n,"method":"tools/call","params":{"name": echo, "arguments":{"text":"hi"}}});
        let (status, _, answer) = post(b, s, &call);
        assert_eq!(status, 200, "{answer}");
        if let Ok(data) = updates.recv_timeout(Duration::from_millis(200)) {
            heard = Some(data);
            break;
        }
    }
    let heard: Value = serde_json::from_str(&heard.expect("no resource update on B's stream")).unwrap();
    assert_eq!(heard["method"], "notifications/resources/updated", "{heard}");
    assert_eq!(heard["params"]["uri"], json!(uri));

    // The client ends the session on B: no replica takes it back in.
    let deleted = ureq::delete(b)
        .set("Authorization", &format!("Bearer {TOKEN}"))
        .set("Mcp-Session-Id", &session)
        .set("MCP-Protocol-Version", "2025-11-25")
        .call()
        .map(|r| r.status())
        .unwrap_or_else(|e| panic!("DELETE: {e}"));
    assert_eq!(deleted, 204);
    let ended = wait_until(Duration::from_secs(10), || !redis.dump().contains("tether:session:"));
    assert!(ended, "the state outlived the session:\n{}", redis.dump());
    let (status, _, _) = post(c, s, &json!({"jsonrpc":"2.0","id":99,"method":"tools/list"}));
    assert_eq!(status, 404, "C adopted a session its client ended on B");
}
