//! Microbenchmarks of the engine (divan): `cargo bench -p tether-core`.
//!
//! Each prints time per iteration and, through divan's allocation profiler, heap
//! allocations per iteration. `hot_path` is one whole tool call: client frame in →
//! backend frame out → backend answer in → client frame out.

use std::hint::black_box;

use serde_json::json;
use tether_core::catalog::Catalog;
use tether_core::{Action, Config, Gateway, Input, Instant, ServerConfig, SessionId};

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

const CLIENT: SessionId = SessionId(1);

/// The id inside a frame the gateway sent (`"id":N`), without parsing JSON.
fn frame_id(frame: &str) -> u64 {
    let start = frame.find("\"id\":").expect("id") + 5;
    frame[start..].bytes().take_while(u8::is_ascii_digit).fold(0, |n, b| n * 10 + u64::from(b - b'0'))
}

/// A gateway with `backends` stdio backends of `tools` tools each, all online,
/// and a ready client session.
fn booted(backends: usize, tools: usize, page_size: u32) -> Gateway {
    let mut config = Config::default();
    for b in 0..backends {
        config.servers.insert(format!("b{b:02}"), ServerConfig::stdio("mock", &[]));
    }
    config.limits.page_size = page_size;
    let mut gw = Gateway::new(config, 1, Instant::ZERO).unwrap();
    let tool_list: Vec<_> = (0..tools)
        .map(|t| json!({"name": format!("tool{t}"), "description": "a tool that does a thing", "inputSchema": {"type":"object","properties":{"text":{"type":"string"}}}}))
        .collect();
    // Answer handshakes and discovery until nothing is left to answer.
    for _ in 0..4 {
        let actions: Vec<Action> = std::iter::from_fn(|| gw.poll_action()).collect();
        for a in actions {
            let Action::SendToBackend { server, generation, frame, request: Some(id), .. } = a else { continue };
            let result = if frame.contains("\"initialize\"") {
                json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{},"resources":{}}})
            } else if frame.contains("tools/list") {
                json!({ "tools": tool_list })
            } else {
                json!({"resources":[],"resourceTemplates":[]})
            };
            let frame = json!({"jsonrpc":"2.0","id":id,"result":result}).to_string();
            gw.handle(Instant::ZERO, Input::BackendFrame { server, generation, frame }).unwrap();
        }
    }
    let init =
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#;
    gw.handle(Instant::ZERO, Input::ClientFrame { session: CLIENT, frame: init.into(), param_headers: None }).unwrap();
    let ready = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    gw.handle(Instant::ZERO, Input::ClientFrame { session: CLIENT, frame: ready.into(), param_headers: None }).unwrap();
    while gw.poll_action().is_some() {}
    gw
}

/// One call through the engine; returns the client's answer frame.
fn call(gw: &mut Gateway, request: &str, answer: impl Fn(u64) -> String) -> String {
    gw.handle(Instant::ZERO, Input::ClientFrame { session: CLIENT, frame: request.to_string(), param_headers: None })
        .unwrap();
    let mut out = None;
    while let Some(a) = gw.poll_action() {
        if let Action::SendToBackend { server, generation, frame, .. } = a {
            out = Some((server, generation, frame_id(&frame)));
        }
    }
    let (server, generation, id) = out.expect("forwarded");
    gw.handle(Instant::ZERO, Input::BackendFrame { server, generation, frame: answer(id) }).unwrap();
    let mut reply = String::new();
    while let Some(a) = gw.poll_action() {
        if let Action::SendToClient { frame, .. } = a {
            reply = frame;
        }
    }
    reply
}

/// The tool-call hot path. calls/s = 1 / time per iteration.
#[divan::bench]
fn hot_path(bencher: divan::Bencher<'_, '_>) {
    let mut gw = booted(1, 10, 500);
    let request =
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"b00__tool3","arguments":{"text":"hello"}}}"#;
    bencher.bench_local(|| {
        black_box(call(&mut gw, request, |id| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"hello"}}]}}}}"#)
        }))
    });
}

/// Resolving a served tool name among 1,000.
#[divan::bench]
fn catalog_lookup_1000_tools(bencher: divan::Bencher<'_, '_>) {
    let mut catalog = Catalog::new("__");
    for b in 0..10 {
        let name = format!("server{b}");
        catalog.register(&name, true);
        let mut lists: [Vec<serde_json::Map<String, serde_json::Value>>; 4] = Default::default();
        for t in 0..100 {
            let serde_json::Value::Object(m) = json!({"name": format!("tool_{t}"), "inputSchema": {"type":"object"}})
            else {
                unreachable!()
            };
            lists[0].push(m);
        }
        catalog.install(&name, lists);
    }
    let names: Vec<String> = (0..1000).map(|i| format!("server{}__tool_{}", i % 10, (i * 7) % 100)).collect();
    let mut i = 0;
    bencher.bench_local(|| {
        i = (i + 1) % names.len();
        black_box(catalog.resolve_tool(&names[i]).map(|r| r.server.len()))
    });
}

/// An aggregated `tools/list` over 50 backends × 40 tools (one page of 2,000).
#[divan::bench]
fn aggregated_tools_list_50x40(bencher: divan::Bencher<'_, '_>) {
    let mut gw = booted(50, 40, 5000);
    let request = r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#;
    bencher.bench_local(|| {
        gw.handle(
            Instant::ZERO,
            Input::ClientFrame { session: CLIENT, frame: request.to_string(), param_headers: None },
        )
        .unwrap();
        let mut bytes = 0;
        while let Some(a) = gw.poll_action() {
            if let Action::SendToClient { frame, .. } = a {
                bytes += frame.len();
            }
        }
        black_box(bytes)
    });
}

/// A 1 MiB tool result passing through (results are forwarded as raw JSON).
#[divan::bench]
fn one_mib_result_through(bencher: divan::Bencher<'_, '_>) {
    let mut gw = booted(1, 10, 500);
    let text = "x".repeat(1 << 20);
    let request = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"b00__tool1","arguments":{}}}"#;
    bencher.bench_local(|| {
        black_box(call(&mut gw, request, |id| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"{text}"}}]}}}}"#)
        }))
    });
}

/// One execution of the `gateway` fuzz target on a stress-sized input (the
/// corpus's median length). executions/s = 1 / time per iteration; compare with
/// `cargo fuzz run gateway`'s exec/s, which adds the sanitizers.
#[divan::bench(args = [0, 1, 2, 3])]
fn fuzz_gateway_execution(bencher: divan::Bencher<'_, '_>, seed: u64) {
    let mut rng = tether_core::Rng::new(seed ^ 0x5eed);
    let data: Vec<u8> = (0..800).map(|_| rng.next_u64() as u8).collect();
    bencher.bench_local(|| black_box(tether_core::fuzzing::gateway(&data).is_ok()));
}
