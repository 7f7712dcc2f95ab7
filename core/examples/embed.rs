//! Hosting tether-core: a fake clock and a scripted backend, no I/O at all.
//! Run with `cargo run -p tether-core --example embed`.

use tether_core::{Action, Config, Gateway, Input, Instant, ServerConfig, SessionId};

fn main() {
    let config = Config::default().server("fs", ServerConfig::stdio("fs-server", &[]));
    let mut now = Instant::ZERO;
    let mut gw = Gateway::new(config, 42, now).expect("valid config");
    let client = SessionId(1);
    let mut inbox: Vec<Input> = vec![Input::ClientFrame {
        session: client,
        frame: r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs__echo","arguments":{}}}"#.into(),
        param_headers: None,
    }];
    loop {
        // 1. Drain every action and "execute" it: here a fake backend answers by method.
        while let Some(action) = gw.poll_action() {
            println!("{:>6}  {action}", now.as_millis());
            let Action::SendToBackend { server, generation, frame, .. } = action else { continue };
            let msg: serde_json::Value = serde_json::from_str(&frame).unwrap();
            let result = match msg["method"].as_str() {
                Some("initialize") => r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}"#,
                Some("tools/list") => r#"{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}"#,
                Some("tools/call") => r#"{"content":[{"type":"text","text":"echoed"}]}"#,
                _ => continue,
            };
            let frame = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{result}}}"#, msg["id"]);
            inbox.push(Input::BackendFrame { server, generation, frame });
        }
        // 2. Feed the next input, or sleep (simulated) until the engine's next timer.
        if let Some(input) = (!inbox.is_empty()).then(|| inbox.remove(0)) {
            gw.handle(now, input).expect("host contract");
        } else if let Some(deadline) = gw.poll_timeout().filter(|d| d.as_millis() < 5_000) {
            now = deadline;
            gw.handle(now, Input::Tick).expect("host contract");
        } else {
            break;
        }
    }
}
