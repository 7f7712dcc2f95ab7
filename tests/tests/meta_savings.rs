//! Measured savings of meta mode: the size of `tools/list` in flat mode and in
//! meta mode, over the real tool catalogs of server-everything, server-memory and
//! server-filesystem (captured in `tests/fixtures/tool-catalogs/`, see its README),
//! through the real binaries. Fails if meta mode stops saving.
//!
//! The catalogs are served by a fake Streamable HTTP backend on 127.0.0.1 run by
//! the test itself (`initialize`, `tools/list` from the fixture, `ping`), so the
//! test needs neither node nor the network. tether connects to the three as `url`
//! backends, started once in flat mode and once with `--mode meta`.
//!
//! Size: the bytes of the JSON of the `tools/list` result; tokens: characters / 4,
//! the rule tether's catalog uses for its per-tool estimate. `cargo test -p
//! tether-tests --test meta_savings -- --nocapture` prints the numbers; the
//! interop test (`tests/interop/run.sh`) measures the same against the live servers.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::{Runtime, Tether};

/// The backends, by their name in tether's config and their fixture file.
const SERVERS: [&str; 3] = ["everything", "memory", "filesystem"];

/// The tools meta mode serves.
const META_TOOLS: [&str; 6] =
    ["list_servers", "search_tools", "describe_tool", "execute_tool", "reconnect_server", "server_events"];

/// Meta mode's `tools/list` must be smaller than flat mode's by at least this
/// factor. Measured: 9.8 (flat 33,251 bytes, meta 3,396). Listing even one
/// server's tools besides the six would break it.
const MIN_FACTOR: usize = 4;

/// Long enough for three HTTP backends to be discovered on a loaded machine.
const DISCOVERY: Duration = Duration::from_secs(30);

/// A captured catalog: the server's `tools/list` result and what it says it is.
struct Catalog {
    package: String,
    version: String,
    server_info: Value,
    result: Value,
}

impl Catalog {
    fn load(name: &str) -> Catalog {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join("tool-catalogs")
            .join(format!("{name}.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let tools = v["result"]["tools"].as_array().map_or(0, Vec::len);
        assert!(tools > 0, "{}: no tools in result.tools", path.display());
        Catalog {
            package: v["server"].as_str().unwrap_or(name).to_string(),
            version: v["version"].as_str().unwrap_or("?").to_string(),
            server_info: v["serverInfo"].clone(),
            result: v["result"].clone(),
        }
    }

    fn tools(&self) -> &[Value] {
        self.result["tools"].as_array().map_or(&[], Vec::as_slice)
    }
}

/// A fake Streamable HTTP MCP server at `/mcp` serving one catalog: one thread
/// per connection, keep-alive, a JSON body per POST; no session, no GET stream
/// (405). Stops accepting when dropped.
struct FakeBackend {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl FakeBackend {
    fn start(catalog: Arc<Catalog>) -> FakeBackend {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let catalog = catalog.clone();
                std::thread::spawn(move || serve_connection(stream, &catalog));
            }
        });
        FakeBackend { port, stop }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for FakeBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wakes the accept loop
    }
}

/// One HTTP request: method and body (`None` at the end of the connection).
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let method = line.split_whitespace().next()?.to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).ok()?;
            let size = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2]; // the data and its CRLF
            reader.read_exact(&mut chunk).ok()?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body).ok()?;
    }
    Some((method, body))
}

fn serve_connection(stream: TcpStream, catalog: &Catalog) {
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    while let Some((method, body)) = read_request(&mut reader) {
        let (status, body) = match method.as_str() {
            "POST" => answer(&body, catalog).map_or((202, String::new()), |b| (200, b)),
            "DELETE" => (200, String::new()),
            _ => (405, String::new()),
        };
        let reason = match status {
            200 => "OK",
            202 => "Accepted",
            _ => "Method Not Allowed",
        };
        let head = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(body.as_bytes())).is_err() {
            return;
        }
    }
}

/// The JSON-RPC answer to a POSTed request; `None` for a notification or a response.
fn answer(body: &[u8], catalog: &Catalog) -> Option<String> {
    let frame: Value = serde_json::from_slice(body).ok()?;
    let id = frame.get("id")?.clone();
    let method = frame.get("method")?.as_str()?;
    let reply = match method {
        "initialize" => json!({"result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": catalog.server_info,
        }}),
        "tools/list" => json!({ "result": catalog.result }),
        "ping" => json!({"result": {}}),
        _ => json!({"error": {"code": -32601, "message": format!("method not found: {method}")}}),
    };
    let mut reply = reply.as_object().cloned().unwrap_or_default();
    reply.insert("jsonrpc".into(), json!("2.0"));
    reply.insert("id".into(), id);
    Some(Value::Object(reply).to_string())
}

/// The size of a `tools/list` result: tools, bytes of its JSON, estimated tokens.
#[derive(Clone, Copy, Debug)]
struct Size {
    tools: usize,
    bytes: usize,
    tokens: usize,
}

impl Size {
    fn of(result: &Value) -> Size {
        let text = serde_json::to_string(result).expect("serialize");
        Size {
            tools: result["tools"].as_array().map_or(0, Vec::len),
            bytes: text.len(),
            tokens: text.chars().count() / 4,
        }
    }
}

fn tools_list(t: &mut Tether) -> Value {
    let r = t.request("tools/list", json!({}));
    assert!(r["result"].get("nextCursor").is_none(), "a second page: {r}");
    r["result"].clone()
}

/// The structured content of an own tool's successful result.
fn own_call(t: &mut Tether, tool: &str, arguments: Value) -> Value {
    let r = t.call(tool, arguments);
    assert_ne!(r["result"]["isError"], json!(true), "{tool}: {r}");
    r["result"]["structuredContent"].clone()
}

fn config(backends: &BTreeMap<&str, FakeBackend>) -> Value {
    let servers: serde_json::Map<String, Value> =
        backends.iter().map(|(name, b)| (name.to_string(), json!({ "url": b.url() }))).collect();
    json!({ "tether": {"separator": "__"}, "mcpServers": servers })
}

fn meta_mode_saves(rt: Runtime) {
    let catalogs: BTreeMap<&str, Arc<Catalog>> = SERVERS.iter().map(|&n| (n, Arc::new(Catalog::load(n)))).collect();
    let total: usize = catalogs.values().map(|c| c.tools().len()).sum();
    let backends: BTreeMap<&str, FakeBackend> =
        catalogs.iter().map(|(&n, c)| (n, FakeBackend::start(c.clone()))).collect();
    let config = config(&backends);

    // Flat mode: every tool of the three, namespaced.
    let mut flat = Tether::start_with(rt, config.clone(), &[]);
    flat.initialize();
    let started = Instant::now();
    let flat_list = loop {
        let list = tools_list(&mut flat);
        if list["tools"].as_array().map_or(0, Vec::len) == total || started.elapsed() > DISCOVERY {
            break list;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let flat_size = Size::of(&flat_list);
    assert_eq!(flat_size.tools, total, "flat mode lists every tool of the three fixtures\n{}", flat.stderr_text());
    for (name, catalog) in &catalogs {
        let served = flat_list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with(&format!("{name}__"))));
        assert_eq!(served.count(), catalog.tools().len(), "{name}'s tools in flat mode");
    }
    let echo_flat = flat_list["tools"].as_array().unwrap().iter().find(|t| t["name"] == "everything__echo").cloned();
    drop(flat);

    // Meta mode: six tools, the same catalog behind them.
    let mut meta = Tether::start_with(rt, config, &["--mode", "meta"]);
    meta.initialize();
    let started = Instant::now();
    let servers = loop {
        let servers = own_call(&mut meta, "list_servers", json!({}))["servers"].clone();
        let online = servers.as_array().map_or(0, |s| s.iter().filter(|s| s["status"] == "online").count());
        let searched = own_call(&mut meta, "search_tools", json!({"query": ""}))["searched"].as_u64();
        if (online == SERVERS.len() && searched == Some(total as u64)) || started.elapsed() > DISCOVERY {
            break servers;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let meta_list = tools_list(&mut meta);
    let meta_size = Size::of(&meta_list);
    let names: Vec<&str> = meta_list["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, META_TOOLS, "meta mode lists its six tools only");
    let search = own_call(&mut meta, "search_tools", json!({"query": ""}));
    assert_eq!(search["searched"], json!(total), "meta mode searches every tool of the three: {search}\n{servers}");
    let search = own_call(&mut meta, "search_tools", json!({"query": "echo"}));
    assert_eq!(search["tools"][0]["name"], "everything__echo", "{search}");
    let described = own_call(&mut meta, "describe_tool", json!({"name": "everything__echo"}));
    assert_eq!(Some(&described["tool"]), echo_flat.as_ref(), "describe_tool gives the definition flat mode lists");
    // tether's own estimate of what the backends' tools cost in flat mode.
    let estimated: u64 = servers.as_array().unwrap().iter().filter_map(|s| s["estimated_tokens"].as_u64()).sum();
    drop(meta);

    let sources: Vec<String> = catalogs.values().map(|c| format!("{} {}", c.package, c.version)).collect();
    println!("{rt}: backends {}", sources.join(", "));
    println!(
        "{rt}: tools/list flat: {} tools, {} bytes, ~{} tokens; meta: {} tools, {} bytes, ~{} tokens; \
         meta is {:.1}% of flat (list_servers' estimate for the backends' tools: {estimated} tokens)",
        flat_size.tools,
        flat_size.bytes,
        flat_size.tokens,
        meta_size.tools,
        meta_size.bytes,
        meta_size.tokens,
        100.0 * meta_size.bytes as f64 / flat_size.bytes as f64,
    );
    assert!(
        meta_size.bytes * MIN_FACTOR < flat_size.bytes,
        "meta mode's tools/list ({} bytes) is not under 1/{MIN_FACTOR} of flat mode's ({} bytes)",
        meta_size.bytes,
        flat_size.bytes
    );
    assert!(meta_size.tokens * MIN_FACTOR < flat_size.tokens);
}

/// Both runtimes, as `meta_mode_saves::smol` and `meta_mode_saves::blocking`.
mod meta_mode_saves {
    use tether_tests::Runtime::{Blocking, Smol};

    #[test]
    fn smol() {
        super::meta_mode_saves(Smol);
    }

    #[test]
    fn blocking() {
        super::meta_mode_saves(Blocking);
    }
}
