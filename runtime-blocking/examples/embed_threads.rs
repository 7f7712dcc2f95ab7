//! Embedding tether on plain threads: two backends, list the tools, call one,
//! then kill a backend and watch the gateway restart it.
//!
//! `cargo build -p tether-tests --bin mock-mcp && cargo run -p tether-blocking --example embed_threads`
//! (or pass any stdio MCP server command as arguments, e.g. `-- npx -y @modelcontextprotocol/server-everything`).

use std::sync::mpsc::channel;
use std::time::Duration;

use serde_json::json;
use tether_blocking::{Event, Host, Status};
use tether_core::{Config, ServerConfig};

fn main() {
    // Default backend: the mock next to this example's executable (target/debug/mock-mcp).
    let exe = std::env::current_exe().expect("own path");
    let mock = exe.parent().and_then(|d| d.parent()).expect("target dir").join("mock-mcp");
    let mock = mock.to_str().expect("utf-8 path").to_string();
    let command: Vec<String> = std::env::args().skip(1).collect();
    let (program, args) = command.split_first().map_or((mock.as_str(), &[][..]), |(p, a)| (p.as_str(), a));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let config = Config::default()
        .server("alpha", ServerConfig::stdio(program, &args))
        .server("beta", ServerConfig::stdio(program, &args));

    // Status events arrive on the core thread; hand them to this one.
    let (events, statuses) = channel();
    let host = Host::builder(config).on_event(move |e| drop(events.send(e.clone()))).start().expect("valid config");
    let mut client = host.client().expect("handshake");

    let tools = client.list_tools().expect("tools/list");
    let Some(first) = tools.first() else { panic!("no tools: is {program} built?") };
    println!("{} tools, e.g. {}", tools.len(), first["name"]);
    let answer = client.call_tool("alpha__echo", json!({"text": "hello"})).expect("tools/call");
    println!("alpha__echo -> {}", answer["content"][0]["text"]);

    // Kill alpha's process (its `crash` tool exits at once) and watch it come back.
    while statuses.try_recv().is_ok() {} // (start-up events)
    let _ = client.call_tool("alpha__crash", json!({}));
    while let Ok(event) = statuses.recv_timeout(Duration::from_secs(10)) {
        if let Event::ServerStatusChanged { server, from, to, .. } = &event {
            println!("{server}: {from} -> {to}");
            if &**server == "alpha" && *to == Status::Online {
                break;
            }
        }
    }
    let answer = client.call_tool("alpha__echo", json!({"text": "again"})).expect("after the restart");
    println!("alpha__echo -> {}", answer["content"][0]["text"]);
    drop(client);
    host.shutdown();
}
