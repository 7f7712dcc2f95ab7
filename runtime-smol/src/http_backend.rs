//! Remote backends: Streamable HTTP (POST answered with JSON or an SSE stream, the
//! optional GET stream, `Mcp-Session-Id`, `MCP-Protocol-Version`, DELETE on close)
//! and legacy HTTP+SSE (a GET event stream that names the POST endpoint).
//!
//! HTTP runs through ureq (rustls) on smol's blocking pool. Every outcome becomes
//! an input; what to do about it (retry, reconnect, re-initialize) is the core's call.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use async_channel::Sender;
use tether_core::codec::SseDecoder;
use tether_core::{Failure, Input};

/// Connect timeout for every request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a POST waits for the legacy transport's endpoint event.
const ENDPOINT_WAIT: Duration = Duration::from_secs(30);

/// Where and how to connect.
pub struct HttpTarget {
    /// Backend name.
    pub server: String,
    /// Connection generation to tag inputs with.
    pub generation: u64,
    /// Endpoint (Streamable HTTP) or event-stream URL (legacy SSE).
    pub url: String,
    /// Extra headers on every request.
    pub headers: BTreeMap<String, String>,
    /// Legacy HTTP+SSE transport.
    pub legacy: bool,
    /// Longest wait for response bytes (covers long SSE answers).
    pub read_timeout: Duration,
    /// Largest frame accepted.
    pub max_frame: usize,
}

/// One connection (one generation) to a remote backend.
pub struct HttpBackend {
    shared: Arc<Shared>,
}

struct Shared {
    server: String,
    generation: u64,
    url: String,
    headers: BTreeMap<String, String>,
    legacy: bool,
    agent: ureq::Agent,
    max_frame: usize,
    inputs: Sender<Input>,
    state: Mutex<State>,
    endpoint_known: Condvar,
}

#[derive(Default)]
struct State {
    session_id: Option<String>,
    protocol_version: Option<String>,
    get_stream_opened: bool,
    /// Legacy transport: where to POST, from the `endpoint` event.
    endpoint: Option<String>,
    closed: bool,
}

impl HttpBackend {
    /// Opens a connection. Streamable HTTP needs nothing up front; legacy SSE
    /// opens its event stream at once.
    pub fn connect(target: HttpTarget, inputs: Sender<Input>) -> HttpBackend {
        let agent =
            ureq::AgentBuilder::new().timeout_connect(CONNECT_TIMEOUT).timeout_read(target.read_timeout).build();
        let legacy = target.legacy;
        let shared = Arc::new(Shared {
            server: target.server,
            generation: target.generation,
            url: target.url,
            headers: target.headers,
            legacy,
            agent,
            max_frame: target.max_frame,
            inputs,
            state: Mutex::new(State::default()),
            endpoint_known: Condvar::new(),
        });
        if legacy {
            let s = shared.clone();
            smol::unblock(move || s.legacy_stream()).detach();
        }
        HttpBackend { shared }
    }

    /// Sends one frame; `request` is the id to quote if delivery fails.
    pub fn send(&self, frame: String, request: Option<u64>) {
        let s = self.shared.clone();
        smol::unblock(move || s.post(&frame, request)).detach();
    }

    /// Ends the session (DELETE when the server gave one) and stops reporting.
    pub fn close(self) {
        let s = self.shared;
        let session = {
            let mut state = s.state.lock().unwrap();
            state.closed = true;
            state.session_id.clone()
        };
        s.endpoint_known.notify_all();
        if let (Some(session), false) = (session, s.legacy) {
            smol::unblock(move || {
                let mut req = s.agent.delete(&s.url).set("Mcp-Session-Id", &session);
                for (k, v) in &s.headers {
                    req = req.set(k, v);
                }
                let _ = req.call();
            })
            .detach();
        }
    }
}

impl Shared {
    fn report(&self, input: Input) {
        if !self.state.lock().unwrap().closed {
            let _ = self.inputs.send_blocking(input);
        }
    }

    fn frame(&self, frame: String) {
        self.remember_version(&frame);
        self.report(Input::BackendFrame { server: self.server.clone(), generation: self.generation, frame });
    }

    fn failed(&self, request: Option<u64>, failure: Failure) {
        tracing::debug!(server = %self.server, ?request, "transport failure: {failure}");
        self.report(Input::BackendFailed {
            server: self.server.clone(),
            generation: self.generation,
            request,
            failure,
        });
    }

    /// Streamable HTTP requires `MCP-Protocol-Version` on every request after the
    /// handshake: the transport notes the version the server chose.
    fn remember_version(&self, frame: &str) {
        #[derive(serde::Deserialize)]
        struct Answer {
            result: Option<Version>,
        }
        #[derive(serde::Deserialize)]
        struct Version {
            #[serde(rename = "protocolVersion")]
            protocol_version: Option<String>,
        }
        if !frame.contains("protocolVersion") {
            return;
        }
        if let Ok(Answer { result: Some(Version { protocol_version: Some(v) }) }) = serde_json::from_str(frame) {
            self.state.lock().unwrap().protocol_version = Some(v);
        }
    }

    fn post(self: &Arc<Self>, frame: &str, request: Option<u64>) {
        let url = if self.legacy {
            match self.wait_for_endpoint() {
                Some(url) => url,
                None => return self.failed(request, Failure::Timeout),
            }
        } else {
            self.url.clone()
        };
        let mut req = self
            .agent
            .post(&url)
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream");
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        {
            let state = self.state.lock().unwrap();
            if let Some(id) = &state.session_id {
                req = req.set("Mcp-Session-Id", id);
            }
            if let Some(v) = &state.protocol_version {
                req = req.set("MCP-Protocol-Version", v);
            }
        }
        let response = match req.send_string(frame) {
            Ok(r) => r,
            Err(ureq::Error::Status(status, _)) => return self.failed(request, Failure::Http { status }),
            Err(ureq::Error::Transport(t)) => return self.failed(request, transport_failure(&t)),
        };
        if self.legacy {
            return; // answers arrive on the event stream
        }
        let open_get = {
            let mut state = self.state.lock().unwrap();
            if let Some(id) = response.header("Mcp-Session-Id") {
                state.session_id = Some(id.to_string());
            }
            let open = !state.get_stream_opened && state.session_id.is_some() && state.protocol_version.is_some();
            state.get_stream_opened |= open;
            open
        };
        let is_sse = response.content_type() == "text/event-stream";
        if response.status() == 202 {
            // Accepted: a notification or response; nothing comes back on this POST.
        } else if is_sse {
            if !self.read_sse(response.into_reader(), false) {
                self.failed(request, Failure::Reset);
            }
        } else {
            let mut body = String::new();
            let limit = self.max_frame as u64 + 1;
            match response.into_reader().take(limit).read_to_string(&mut body) {
                Ok(_) if body.len() > self.max_frame => {
                    self.failed(request, Failure::Other { message: "response exceeds the frame limit".into() })
                }
                Ok(_) if body.trim().is_empty() => {}
                Ok(_) => self.frame(body),
                Err(_) => self.failed(request, Failure::Reset),
            }
        }
        if open_get {
            let s = self.clone();
            smol::unblock(move || s.get_stream()).detach();
        }
    }

    /// The optional server-to-client stream. A server without one answers 405.
    fn get_stream(&self) {
        let mut req = self.agent.get(&self.url).set("Accept", "text/event-stream");
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        if let Some(id) = &self.state.lock().unwrap().session_id {
            req = req.set("Mcp-Session-Id", id);
        }
        match req.call() {
            Ok(r) if r.content_type() == "text/event-stream" => {
                self.read_sse(r.into_reader(), false);
            }
            Ok(_) | Err(ureq::Error::Status(..)) => {}
            Err(ureq::Error::Transport(t)) => tracing::debug!(server = %self.server, "GET stream: {t}"),
        }
    }

    /// Feeds SSE `message` events as frames; legacy streams also carry `endpoint`.
    /// Returns false when the stream failed mid-way.
    fn read_sse(&self, mut reader: impl Read, legacy: bool) -> bool {
        let mut decoder = SseDecoder::new(self.max_frame);
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) => return true,
                Ok(n) => n,
                Err(_) => return false,
            };
            decoder.push(&chunk[..n]);
            while let Some(event) = decoder.next_event() {
                let Ok(event) = event else { continue };
                if legacy && event.event == "endpoint" {
                    let endpoint = resolve(&self.url, event.data.trim());
                    self.state.lock().unwrap().endpoint = Some(endpoint);
                    self.endpoint_known.notify_all();
                } else if (event.event == "message" || event.event.is_empty()) && !event.data.trim().is_empty() {
                    self.frame(event.data);
                }
            }
            if self.state.lock().unwrap().closed {
                return true;
            }
        }
    }

    fn legacy_stream(&self) {
        let mut req = self.agent.get(&self.url).set("Accept", "text/event-stream");
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        match req.call() {
            Ok(r) => {
                let _ = self.read_sse(r.into_reader(), true);
                self.failed(None, Failure::Reset);
            }
            Err(ureq::Error::Status(status, _)) => self.failed(None, Failure::Http { status }),
            Err(ureq::Error::Transport(t)) => self.failed(None, transport_failure(&t)),
        }
    }

    fn wait_for_endpoint(&self) -> Option<String> {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .endpoint_known
            .wait_timeout_while(state, ENDPOINT_WAIT, |s| s.endpoint.is_none() && !s.closed)
            .unwrap();
        state.endpoint.clone()
    }
}

/// Maps a ureq transport error to the core's failure kinds.
fn transport_failure(t: &ureq::Transport) -> Failure {
    match t.kind() {
        ureq::ErrorKind::Dns => Failure::Dns,
        ureq::ErrorKind::ConnectionFailed => Failure::Refused,
        ureq::ErrorKind::Io => {
            let text = t.to_string();
            if text.contains("timed out") || text.contains("timeout") {
                Failure::Timeout
            } else {
                Failure::Reset
            }
        }
        _ => Failure::Other { message: t.to_string() },
    }
}

/// Resolves the legacy transport's endpoint (often a path) against the stream URL.
fn resolve(base: &str, endpoint: &str) -> String {
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        return endpoint.to_string();
    }
    let origin_end = base.find("://").map(|i| i + 3).and_then(|i| base[i..].find('/').map(|j| i + j));
    let origin = origin_end.map_or(base, |end| &base[..end]);
    if endpoint.starts_with('/') {
        format!("{origin}{endpoint}")
    } else {
        let dir = base.rfind('/').map_or(base, |i| &base[..=i]);
        format!("{dir}{endpoint}")
    }
}

#[cfg(test)]
mod tests {
    use super::resolve;

    #[test]
    fn endpoints_resolve_against_the_stream_url() {
        assert_eq!(resolve("http://h:1/sse", "/messages?s=1"), "http://h:1/messages?s=1");
        assert_eq!(resolve("http://h:1/a/sse", "messages"), "http://h:1/a/messages");
        assert_eq!(resolve("http://h:1/sse", "https://x/y"), "https://x/y");
    }
}
