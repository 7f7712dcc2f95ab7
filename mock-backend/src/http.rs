//! The Streamable HTTP transport at `/mcp` (cargo feature `http`), on tiny_http:
//! sessions by `Mcp-Session-Id`, or none with `--stateless`; each POST is an
//! outlet that answers with a JSON body, or with an SSE stream when something has
//! to be sent before the response.

mod replay;
#[cfg(test)]
mod tests;

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::{process, thread};

use serde_json::{json, Value};

use self::replay::{CutExchange, Replay};
use crate::protocol::*;
use crate::server::Mock;

/// The largest POST body read.
pub(crate) const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// Binds `addr`, reports the bound address on stderr and serves forever.
pub(crate) fn serve_http(mock: Arc<Mock>, addr: &str) -> io::Result<()> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| io::Error::new(io::ErrorKind::AddrNotAvailable, format!("cannot listen on {addr}: {e}")))?;
    match server.server_addr().to_ip() {
        Some(bound) => eprintln!("listening on {bound}"),
        None => eprintln!("listening on {addr}"),
    }
    HttpFront::new(mock).serve(&server);
    Ok(())
}

/// The Streamable HTTP endpoint: sessions by `Mcp-Session-Id`, or with
/// `--stateless` none at all.
pub(crate) struct HttpFront {
    mock: Arc<Mock>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// With `--stateless`, the one session all POSTs share: the requests in flight
    /// (which `notifications/cancelled` may name) and the open listens.
    shared: Arc<Session>,
    /// With `--cut-streams`, every request stream's events, for resumption.
    replay: Option<Arc<Replay>>,
}

impl HttpFront {
    fn new(mock: Arc<Mock>) -> Self {
        let replay = mock.options.cut_streams.map(|seed| Arc::new(Replay::new(seed)));
        HttpFront { mock, sessions: Mutex::new(HashMap::new()), shared: Arc::new(Session::new()), replay }
    }

    /// Handles requests until the server shuts down.
    fn serve(&self, server: &tiny_http::Server) {
        for request in server.incoming_requests() {
            self.handle(request);
        }
    }

    fn handle(&self, request: tiny_http::Request) {
        let path = request.url().split('?').next().unwrap_or_default();
        if path != "/mcp" {
            return respond(request, plain(404, "not found: the MCP endpoint is /mcp"));
        }
        if self.mock.options.stateless {
            return match request.method() {
                tiny_http::Method::Post => self.post_stateless(request),
                _ => respond(
                    request,
                    plain(405, "method not allowed: POST (a stateless server has no GET stream and no sessions)")
                        .with_header(header("Allow", "POST")),
                ),
            };
        }
        match request.method() {
            tiny_http::Method::Post => self.post(request),
            tiny_http::Method::Delete => self.delete(request),
            tiny_http::Method::Get if self.replay.is_some() && header_value(&request, "Last-Event-ID").is_some() => {
                self.resume(request)
            }
            _ => respond(
                request,
                plain(405, "method not allowed: POST or DELETE").with_header(header("Allow", "POST, DELETE")),
            ),
        }
    }

    /// Reads a POST's body; `Err` is the answer when it is not to be served (it
    /// cannot be read, it is too large, or `--http-status` refuses everything).
    fn read_body(&self, request: &mut tiny_http::Request) -> Result<Vec<u8>, HttpResponse> {
        let mut body = Vec::new();
        if let Err(e) = request.as_reader().take(MAX_BODY_BYTES + 1).read_to_end(&mut body) {
            return Err(plain(400, &format!("cannot read the body: {e}")));
        }
        if let Some(status) = self.mock.options.http_status {
            if let Some(method) = peek_method(&body) {
                self.mock.record(&method);
            }
            return Err(forced_status(status));
        }
        if body.len() as u64 > MAX_BODY_BYTES {
            return Err(plain(413, "the body is too large"));
        }
        Ok(body)
    }

    fn post(&self, mut request: tiny_http::Request) {
        let body = match self.read_body(&mut request) {
            Ok(body) => body,
            Err(refusal) => return respond(request, refusal),
        };
        let message = match parse_message(&body) {
            Ok(message) => message,
            Err(error) => return respond(request, json_body(400, &error)),
        };
        let (session_id, session) = if matches!(&message, Incoming::Request { method, .. } if method == "initialize") {
            let id = new_session_id();
            let session = Arc::new(Session::new());
            lock(&self.sessions).insert(id.clone(), Arc::clone(&session));
            (id, session)
        } else {
            match self.session_of(&request) {
                Ok(found) => found,
                Err(refusal) => return respond(request, refusal),
            }
        };
        let exchange: Arc<dyn Outlet> = match &self.replay {
            Some(replay) if matches!(&message, Incoming::Request { method, .. } if method != "initialize") => {
                Arc::new(CutExchange::open(Arc::clone(replay), request, &session_id))
            }
            _ => Arc::new(Exchange::new(request, Some(session_id))),
        };
        self.mock.receive(&session, message, exchange);
    }

    /// A GET with `Last-Event-ID` under `--cut-streams`: replays the stream that
    /// event belongs to, on a thread of its own (404 for an unknown event).
    fn resume(&self, request: tiny_http::Request) {
        let Some(replay) = &self.replay else { return };
        let session_id = match self.session_of(&request) {
            Ok((id, _)) => id,
            Err(refusal) => return respond(request, refusal),
        };
        let last = header_value(&request, "Last-Event-ID").and_then(|v| v.trim().parse::<u64>().ok());
        let Some((stream, index, first_new)) = last.and_then(|last| replay.locate(last)) else {
            return respond(request, plain(404, "unknown Last-Event-ID"));
        };
        let replay = Arc::clone(replay);
        thread::spawn(move || replay.serve_resumption(request, &session_id, stream, (index, first_new)));
    }

    /// A POST to a stateless mock: no session is issued or required, and a
    /// request's headers must agree with its body (400 and -32020 otherwise).
    fn post_stateless(&self, mut request: tiny_http::Request) {
        let body = match self.read_body(&mut request) {
            Ok(body) => body,
            Err(refusal) => return respond(request, refusal),
        };
        let message = match parse_message(&body) {
            Ok(message) => message,
            Err(error) => return respond(request, json_body(400, &error)),
        };
        if let Incoming::Request { id, method, params } = &message {
            if let Err(error) = check_stateless_headers(&request, method, params) {
                self.mock.record(method);
                return respond(request, json_body(400, &error_response(id, &error)));
            }
        }
        let exchange: Arc<dyn Outlet> = Arc::new(Exchange::new(request, None));
        self.mock.receive(&self.shared, message, exchange);
    }

    fn delete(&self, request: tiny_http::Request) {
        match self.session_of(&request) {
            Ok((id, session)) => {
                lock(&self.sessions).remove(&id);
                session.close();
                respond(request, tiny_http::Response::empty(200));
            }
            Err(refusal) => respond(request, refusal),
        }
    }

    /// The session a request names: 400 without `Mcp-Session-Id`, 404 for an
    /// unknown (or ended) one.
    fn session_of(&self, request: &tiny_http::Request) -> Result<(String, Arc<Session>), HttpResponse> {
        let Some(id) = request.headers().iter().find(|h| h.field.equiv("Mcp-Session-Id")).map(|h| h.value.as_str())
        else {
            let error = RpcError::invalid_request("missing Mcp-Session-Id header");
            return Err(json_body(400, &error_response(&Value::Null, &error)));
        };
        match lock(&self.sessions).get(id) {
            Some(session) => Ok((id.to_string(), Arc::clone(session))),
            None => {
                let error = RpcError::invalid_request(format!("unknown session {id}"));
                Err(json_body(404, &error_response(&Value::Null, &error)))
            }
        }
    }
}

pub(crate) type HttpResponse = tiny_http::Response<io::Cursor<Vec<u8>>>;

/// A request header's value (names are case-insensitive).
pub(crate) fn header_value<'a>(request: &'a tiny_http::Request, name: &'static str) -> Option<&'a str> {
    request.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str())
}

/// The stateless revision's header checks: `Mcp-Method` must be the method and
/// `MCP-Protocol-Version` the body's `_meta` version (-32020 when either is
/// missing or different). Methods the mock does not serve get their -32601, and
/// a body without a version its -32602, from the protocol instead.
pub(crate) fn check_stateless_headers(
    request: &tiny_http::Request,
    method: &str,
    params: &Value,
) -> Result<(), RpcError> {
    if !STATELESS_METHODS.contains(&method) {
        return Ok(());
    }
    match header_value(request, "Mcp-Method") {
        Some(value) if value == method => {}
        Some(value) => {
            return Err(RpcError::header_mismatch(format!(
                "Header mismatch: Mcp-Method header value '{value}' does not match body value '{method}'"
            )))
        }
        None => {
            return Err(RpcError::header_mismatch(format!("Header mismatch: missing Mcp-Method header ('{method}')")))
        }
    }
    let version = params.get("_meta").and_then(|meta| meta.get(META_PROTOCOL_VERSION)).and_then(Value::as_str);
    let Some(version) = version else { return Ok(()) };
    match header_value(request, "MCP-Protocol-Version").map(str::trim) {
        Some(value) if value == version => Ok(()),
        Some(value) => Err(RpcError::header_mismatch(format!(
            "Header mismatch: MCP-Protocol-Version header value '{value}' does not match body value '{version}'"
        ))),
        None => Err(RpcError::header_mismatch(format!(
            "Header mismatch: missing MCP-Protocol-Version header ('{version}')"
        ))),
    }
}

/// The HTTP status of a stateless JSON answer: 404 for an unknown method, 400
/// for the errors about the request itself, 200 otherwise.
pub(crate) fn stateless_status(response: &Value) -> u16 {
    match response.pointer("/error/code").and_then(Value::as_i64) {
        Some(-32601) => 404,
        Some(-32700 | -32600 | -32602 | -32020 | -32021 | -32022) => 400,
        _ => 200,
    }
}

/// One POST being answered. It answers with a JSON body when the response is the
/// first thing sent, and otherwise with an SSE stream (chunked) carrying the
/// notifications and server requests, then the response. An exchange that ends
/// without sending anything (a notification, a response, a cancelled request)
/// answers 202 Accepted.
///
/// Without a session (`--stateless`) no `Mcp-Session-Id` is sent, a JSON error
/// gets the status [`stateless_status`] picks, and an open stream can be probed
/// with SSE comments ([`Outlet::keep_alive`]).
pub(crate) struct Exchange {
    session_id: Option<String>,
    state: Mutex<ExchangeState>,
}

pub(crate) enum ExchangeState {
    Waiting(tiny_http::Request),
    Streaming(Box<dyn Write + Send>),
    Ended,
}

impl Exchange {
    fn new(request: tiny_http::Request, session_id: Option<String>) -> Self {
        Exchange { session_id, state: Mutex::new(ExchangeState::Waiting(request)) }
    }

    /// Moves the exchange to streaming, writing the SSE response head if needed.
    fn stream(&self, state: ExchangeState) -> ExchangeState {
        match state {
            ExchangeState::Waiting(request) => {
                let mut writer = request.into_writer();
                let head = match &self.session_id {
                    Some(session_id) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                         Mcp-Session-Id: {session_id}\r\nTransfer-Encoding: chunked\r\n\r\n"
                    ),
                    None => "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                             X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n"
                        .to_string(),
                };
                match writer.write_all(head.as_bytes()).and_then(|()| writer.flush()) {
                    Ok(()) => ExchangeState::Streaming(writer),
                    Err(_) => ExchangeState::Ended,
                }
            }
            other => other,
        }
    }
}

/// Writes one SSE event as one chunk.
pub(crate) fn write_event(writer: &mut dyn Write, message: &Value) -> io::Result<()> {
    write_chunk(writer, &format!("event: message\ndata: {message}\n\n"))
}

/// Writes `text` as one chunk of a chunked body.
pub(crate) fn write_chunk(writer: &mut dyn Write, text: &str) -> io::Result<()> {
    write!(writer, "{:x}\r\n{text}\r\n", text.len())?;
    writer.flush()
}

/// Ends a chunked body.
pub(crate) fn end_chunks(writer: &mut dyn Write) -> io::Result<()> {
    writer.write_all(b"0\r\n\r\n")?;
    writer.flush()
}

impl Outlet for Exchange {
    fn send(&self, message: &Value) {
        let mut state = lock(&self.state);
        *state = match self.stream(std::mem::replace(&mut *state, ExchangeState::Ended)) {
            ExchangeState::Streaming(mut writer) => match write_event(&mut writer, message) {
                Ok(()) => ExchangeState::Streaming(writer),
                Err(_) => ExchangeState::Ended,
            },
            other => other,
        };
    }

    fn finish(&self, response: &Value) {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, ExchangeState::Ended) {
            ExchangeState::Waiting(request) => match &self.session_id {
                Some(session_id) => {
                    respond(request, json_body(200, response).with_header(header("Mcp-Session-Id", session_id)));
                }
                None => respond(request, json_body(stateless_status(response), response)),
            },
            ExchangeState::Streaming(mut writer) => {
                let _ = write_event(&mut writer, response).and_then(|()| end_chunks(&mut writer));
            }
            ExchangeState::Ended => {}
        }
    }

    fn open_stream(&self) {
        let mut state = lock(&self.state);
        *state = self.stream(std::mem::replace(&mut *state, ExchangeState::Ended));
    }

    /// Sends an SSE comment on an open stream; a failed write means the client
    /// closed it.
    fn keep_alive(&self) -> bool {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, ExchangeState::Ended) {
            ExchangeState::Streaming(mut writer) => {
                let alive = write_chunk(&mut writer, ":\n\n").is_ok();
                if alive {
                    *state = ExchangeState::Streaming(writer);
                }
                alive
            }
            ExchangeState::Waiting(request) => {
                *state = ExchangeState::Waiting(request);
                true
            }
            ExchangeState::Ended => false,
        }
    }

    fn junk_event(&self, bytes: usize) {
        let mut state = lock(&self.state);
        *state = match self.stream(std::mem::replace(&mut *state, ExchangeState::Ended)) {
            ExchangeState::Streaming(mut writer) => match Exchange::write_junk_event(&mut writer, bytes) {
                Ok(()) => ExchangeState::Streaming(writer),
                Err(_) => ExchangeState::Ended,
            },
            other => other,
        };
    }
}

impl Exchange {
    fn write_junk_event(writer: &mut dyn Write, bytes: usize) -> io::Result<()> {
        write_chunk(writer, "event: message\ndata: ")?;
        let piece = "x".repeat(1 << 20);
        let mut left = bytes;
        while left > 0 {
            let n = left.min(piece.len());
            write_chunk(writer, &piece[..n])?;
            left -= n;
        }
        write_chunk(writer, "\n\n")
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        match std::mem::replace(&mut *lock(&self.state), ExchangeState::Ended) {
            ExchangeState::Waiting(request) => respond(request, tiny_http::Response::empty(202)),
            ExchangeState::Streaming(mut writer) => {
                let _ = end_chunks(&mut writer);
            }
            ExchangeState::Ended => {}
        }
    }
}

/// Sends a response; a client that has gone away is not an error.
pub(crate) fn respond<R: Read>(request: tiny_http::Request, response: tiny_http::Response<R>) {
    let _ = request.respond(response);
}

/// A header built from our own ASCII text.
pub(crate) fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("headers built here are ASCII")
}

pub(crate) fn plain(status: u16, text: &str) -> HttpResponse {
    tiny_http::Response::from_string(text).with_status_code(status)
}

pub(crate) fn json_body(status: u16, body: &Value) -> HttpResponse {
    tiny_http::Response::from_string(body.to_string())
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
}

/// The answer to every POST under `--http-status`.
pub(crate) fn forced_status(status: u16) -> HttpResponse {
    let response = json_body(status, &json!({"error": format!("status {status} forced by --http-status")}));
    if status == 401 {
        response.with_header(header("WWW-Authenticate", "Bearer realm=\"mock\""))
    } else {
        response
    }
}

/// The method of a message, if the body is one.
pub(crate) fn peek_method(body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    value.get("method")?.as_str().map(String::from)
}

/// A fresh session id: 32 hex digits from std's randomly keyed hasher, unguessable
/// enough for a mock.
pub(crate) fn new_session_id() -> String {
    static MINTED: AtomicU64 = AtomicU64::new(0);
    let serial = MINTED.fetch_add(1, Ordering::Relaxed);
    let mut id = String::with_capacity(32);
    for half in 0..2u8 {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(serial);
        hasher.write_u8(half);
        hasher.write_u32(process::id());
        id.push_str(&format!("{:016x}", hasher.finish()));
    }
    id
}
