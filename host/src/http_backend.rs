//! Remote backends: Streamable HTTP (POST answered with JSON or an SSE stream, the
//! optional GET stream, `Mcp-Session-Id`, `MCP-Protocol-Version`, DELETE on close)
//! and legacy HTTP+SSE (a GET event stream that names the POST endpoint).
//!
//! Streamable HTTP speaks two eras. Until the connection sends `initialize`, a
//! request whose `_meta` names a stateless revision (2026-07-28) is POSTed that
//! revision's way: routing headers derived from the body, no session, no GET
//! stream, an HTTP 4xx carrying a JSON-RPC error for the request read as its
//! answer, and cancellation by closing the response stream. Once `initialize`
//! went out, every frame goes the handshake-era (2025-11-25) way.
//!
//! HTTP runs through ureq (rustls) on threads the runtime provides ([`Spawner`]:
//! smol's blocking pool, or plain threads). Every outcome becomes an input handed
//! to the runtime's [`InputSink`]; what to do about it (retry, reconnect,
//! re-initialize) is the core's call.
//!
//! Each POST runs on its own thread, so two frames could overtake each other on
//! the wire. Where order matters it is kept: a frame sent after a notification or
//! a response waits until that POST was accepted (its response head arrived), so
//! `notifications/initialized` reaches the server before the discovery requests
//! and an answer to a server request before what follows it. Requests do not hold
//! up later frames: a slow JSON-answered call must not stall the connection.

// ureq 2's error carries a whole response; requests are built in closures that
// return it as ureq does (PooledAgent::send), so it is not boxed here.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tether_core::codec::SseDecoder;
use tether_core::http_headers::{self, stateless_request_headers};
use tether_core::protocol::{self, Message};
use tether_core::{Failure, Input, StreamRef};

use crate::keep_alive::PooledAgent;

/// Connect timeout for every request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a POST waits for the legacy transport's endpoint event.
const ENDPOINT_WAIT: Duration = Duration::from_secs(30);
/// How long a frame waits for the notification or response sent before it to be
/// accepted (and the handshake answer for the GET stream to open) before it goes
/// regardless.
const ORDER_WAIT: Duration = Duration::from_secs(2);
/// How much of an error response's body is read to understand it.
const ERROR_BODY_LIMIT: u64 = 64 * 1024;

/// Where a connection's inputs go: returns `false` once nobody listens any more.
pub type InputSink = Arc<dyn Fn(Input) -> bool + Send + Sync>;

/// The access token to put on requests now (`None`: no managed credential, or
/// none yet). Called for every request, so a refreshed token is used at once.
pub type BearerSource = Arc<dyn CredentialSource>;

/// The managed credential as a connection puts it on its requests.
pub trait CredentialSource: Send + Sync {
    /// The `Authorization` value, and a `DPoP` proof when the token is bound to a
    /// key, for a `method` request to `url`.
    fn authorize(&self, method: &str, url: &str) -> Option<(String, Option<String>)>;
    /// The access token alone (hidden from what a server quotes back).
    fn token(&self) -> Option<String>;
    /// The server sent a `DPoP-Nonce` for the next proofs; whether it is new.
    fn nonce(&self, _nonce: &str) -> bool {
        false
    }
}

/// A plain bearer token from a closure.
impl<F: Fn() -> Option<String> + Send + Sync> CredentialSource for F {
    fn authorize(&self, _method: &str, _url: &str) -> Option<(String, Option<String>)> {
        self().map(|token| (format!("Bearer {token}"), None))
    }

    fn token(&self) -> Option<String> {
        self()
    }
}

/// Runs a blocking job (one HTTP exchange or stream) on some thread.
pub type Spawner = Arc<dyn Fn(Box<dyn FnOnce() + Send>) + Send + Sync>;

/// Where and how to connect.
pub struct HttpTarget {
    /// Backend name.
    pub server: tether_core::ServerName,
    /// Connection generation to tag inputs with.
    pub generation: tether_core::Generation,
    /// Endpoint (Streamable HTTP) or event-stream URL (legacy SSE).
    pub url: String,
    /// Extra headers on every request.
    pub headers: BTreeMap<String, String>,
    /// Legacy HTTP+SSE transport.
    pub legacy: bool,
    /// Longest wait for response bytes (covers long SSE answers). Stateless-era
    /// `subscriptions/listen` streams are exempt: they stay open, possibly silent,
    /// for as long as the subscription lasts.
    pub read_timeout: Duration,
    /// Largest frame accepted.
    pub max_frame: usize,
    /// The managed credential's access token, when tether manages one.
    pub bearer: Option<BearerSource>,
}

impl HttpTarget {
    /// The target of a [`tether_core::Action::ConnectHttp`] under `config`: reads
    /// may last as long as the longest call the policy allows, plus a margin
    /// (the core times calls out itself; this only bounds a dead socket).
    pub fn for_action(
        config: &tether_core::Config,
        server: tether_core::ServerName,
        generation: tether_core::Generation,
        url: String,
        headers: BTreeMap<String, String>,
        legacy: bool,
    ) -> HttpTarget {
        let policy = config.policy_for(&server);
        let read_timeout = Duration::from_millis(policy.request_timeout_max_ms + 10_000);
        let max_frame = config.limits.max_frame_bytes as usize;
        HttpTarget { server, generation, url, headers, legacy, read_timeout, max_frame, bearer: None }
    }
}

/// One connection (one generation) to a remote backend.
pub struct HttpBackend {
    shared: Arc<Shared>,
}

struct Shared {
    server: tether_core::ServerName,
    generation: tether_core::Generation,
    url: String,
    headers: BTreeMap<String, String>,
    legacy: bool,
    /// Every request goes through it: idle connections are retired before the
    /// server drops them, and a request lost to one the server closed goes again.
    agent: PooledAgent,
    /// For requests whose answer is a stream that lasts (`subscriptions/listen`):
    /// no read timeout.
    lasting_agent: PooledAgent,
    max_frame: usize,
    bearer: Option<BearerSource>,
    inputs: InputSink,
    spawn: Spawner,
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
    /// Opens when the last notification or response sent has been accepted.
    barrier: Option<Arc<Gate>>,
    closed: bool,
    /// The connection sent `initialize`: handshake era from then on, every frame
    /// goes as it did before the stateless revision.
    handshake: bool,
    /// Requests sent before the handshake, by gateway id, until their exchange
    /// ends: the stateless-era ones among them are cancelled through these.
    requests: BTreeMap<u64, Arc<Cancel>>,
}

/// Set when the core cancels a stateless-era request. 2026-07-28 HTTP has no
/// cancel message: closing the response stream is the cancellation. The thread
/// reading the stream checks this whenever it regains control (response head,
/// bytes, an SSE keep-alive comment) and then drops the response, which closes
/// the connection. ureq 2 gives no handle on the socket to shut it from the
/// cancelling thread, so a server silent on that stream learns of it only when
/// it next writes (or the read timeout passes).
#[derive(Default)]
struct Cancel(AtomicBool);

impl Cancel {
    fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Opens once an HTTP request got its response head (or failed): the frames
/// ordered behind it may go.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    /// Waits until the gate opens, at most `timeout`.
    fn wait(&self, timeout: Duration) {
        let open = self.open.lock().unwrap();
        drop(self.opened.wait_timeout_while(open, timeout, |open| !*open).unwrap());
    }
}

/// Opens its gate when dropped, so every way out of a request opens it.
struct Opener(Arc<Gate>);

impl Drop for Opener {
    fn drop(&mut self) {
        *self.0.open.lock().unwrap() = true;
        self.0.opened.notify_all();
    }
}

impl HttpBackend {
    /// Opens a connection. Streamable HTTP needs nothing up front; legacy SSE
    /// opens its event stream at once.
    pub fn connect(target: HttpTarget, inputs: InputSink, spawn: Spawner) -> HttpBackend {
        let read_timeout = target.read_timeout;
        let agent = PooledAgent::new(move || {
            ureq::AgentBuilder::new().timeout_connect(CONNECT_TIMEOUT).timeout_read(read_timeout)
        });
        let lasting_agent = PooledAgent::new(|| ureq::AgentBuilder::new().timeout_connect(CONNECT_TIMEOUT));
        let legacy = target.legacy;
        let shared = Arc::new(Shared {
            server: target.server,
            generation: target.generation,
            url: target.url,
            headers: target.headers,
            legacy,
            agent,
            lasting_agent,
            max_frame: target.max_frame,
            bearer: target.bearer,
            inputs,
            spawn,
            state: Mutex::new(State::default()),
            endpoint_known: Condvar::new(),
        });
        if legacy {
            let s = shared.clone();
            (shared.spawn)(Box::new(move || s.legacy_stream()));
        }
        HttpBackend { shared }
    }

    /// Sends one frame; `request` is the id to quote if delivery fails, `None` for
    /// notifications and responses, which the frames after them wait for.
    ///
    /// Before the handshake, a `notifications/cancelled` is not sent: the
    /// cancelled request's response stream is closed instead (2026-07-28 HTTP).
    pub fn send(&self, frame: String, request: Option<u64>) {
        self.send_with_headers(frame, request, Vec::new());
    }

    /// [`HttpBackend::send`] with headers for this frame alone (the core's
    /// `Mcp-Param-*` headers of a `tools/call`, from `Action::SendToBackend`).
    /// They go on a stateless-era POST only; the handshake era has no such headers.
    pub fn send_with_headers(&self, frame: String, request: Option<u64>, headers: Vec<(String, String)>) {
        let s = self.shared.clone();
        let cancelled = (request.is_none() && !s.legacy).then(|| cancelled_request(&frame)).flatten();
        let (after, accepted, cancel) = {
            let mut state = s.state.lock().unwrap();
            let stateless = !s.legacy && !state.handshake;
            if let (true, Some(id)) = (stateless, cancelled) {
                if let Some(cancel) = id.and_then(|id| state.requests.remove(&id)) {
                    cancel.cancel();
                }
                return;
            }
            // Registered here, not on the thread that posts it, so a cancellation
            // sent right after the request finds it.
            let cancel = request.filter(|_| stateless).map(|id| {
                let cancel = Arc::new(Cancel::default());
                state.requests.insert(id, cancel.clone());
                cancel
            });
            let after = state.barrier.clone();
            let accepted = request.is_none().then(|| {
                let gate = Arc::new(Gate::default());
                state.barrier = Some(gate.clone());
                Opener(gate)
            });
            (after, accepted, cancel)
        };
        (self.shared.spawn)(Box::new(move || {
            if let Some(gate) = after {
                gate.wait(ORDER_WAIT);
            }
            match cancel {
                Some(cancel) => s.post_before_handshake(&frame, request, &headers, &cancel),
                None => s.post(&frame, request, accepted),
            }
        }));
    }

    /// Resumes `stream` with a GET carrying `Last-Event-ID` when known (the core's
    /// `Action::ResumeStream`, which also decided when): its events and its end
    /// are reported under `stream`. A resumed request's stream is closed once it
    /// brought the answer.
    pub fn resume(&self, stream: StreamRef, last_event_id: Option<String>) {
        let s = self.shared.clone();
        if s.legacy {
            return;
        }
        (self.shared.spawn)(Box::new(move || s.get_stream(None, stream, last_event_id)));
    }

    /// Ends the session (DELETE when the server gave one) and stops reporting.
    pub fn close(self) {
        let s = self.shared;
        let (session, version) = {
            let mut state = s.state.lock().unwrap();
            state.closed = true;
            (state.session_id.clone(), state.protocol_version.clone())
        };
        s.endpoint_known.notify_all();
        if let (Some(session), false) = (session, s.legacy) {
            let spawn = s.spawn.clone();
            spawn(Box::new(move || {
                let _ = s.agent.send(|agent| {
                    let mut req = agent.delete(&s.url).set("Mcp-Session-Id", &session);
                    if let Some(v) = &version {
                        req = req.set("MCP-Protocol-Version", v);
                    }
                    for (k, v) in &s.headers {
                        req = req.set(k, v);
                    }
                    s.with_bearer(req).call()
                });
            }));
        }
    }
}

impl Shared {
    /// A 401 or 403 as the failure the core acts on ([`unauthorized`]), without the
    /// managed token if the server quoted it back.
    fn unauthorized(&self, status: u16, response: &ureq::Response) -> Option<Failure> {
        let mut failure = unauthorized(status, response)?;
        // Held before the engine hears of the refusal and resends.
        self.note_nonce(response);
        if let (Failure::Unauthorized { challenge, .. }, Some(token)) =
            (&mut failure, self.bearer.as_ref().and_then(|b| b.token()))
        {
            hide_in_challenge(challenge, &token);
        }
        Some(failure)
    }

    /// A DPoP nonce the server wants in the next proofs (RFC 9449 §8, §9): a
    /// refusal names one, and any answer may rotate it.
    fn note_nonce(&self, response: &ureq::Response) {
        if let (Some(nonce), Some(source)) = (response.header("DPoP-Nonce"), &self.bearer) {
            source.nonce(nonce);
        }
    }

    /// Puts the managed credential on a request (its access token, and a DPoP
    /// proof for a bound one), unless the configuration gives an `Authorization`
    /// header of its own.
    fn with_bearer(&self, req: ureq::Request) -> ureq::Request {
        if self.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
            return req;
        }
        let Some(source) = &self.bearer else { return req };
        let (method, url) = (req.method().to_owned(), req.url().to_owned());
        match source.authorize(&method, &url) {
            Some((authorization, proof)) => {
                let req = req.set("Authorization", &authorization);
                match proof {
                    Some(proof) => req.set("DPoP", &proof),
                    None => req,
                }
            }
            None => req,
        }
    }

    fn report(&self, input: Input) {
        if !self.state.lock().unwrap().closed {
            let _ = (self.inputs)(input);
        }
    }

    fn frame(self: &Arc<Self>, frame: String) {
        if self.remember_version(&frame) {
            self.open_get_stream();
        }
        self.report_frame(frame);
    }

    /// A frame that tells the transport nothing: a stateless-era answer has no
    /// handshake to note and opens no GET stream.
    fn report_frame(&self, frame: String) {
        self.report(Input::BackendFrame { server: self.server.clone(), generation: self.generation, frame });
    }

    /// A frame that came as an SSE event on `stream` with an id of its own (the
    /// core drops it if it has seen the id: a replay after a resumption), or on a
    /// POST's stream (a request there is for that call).
    fn event_frame(self: &Arc<Self>, frame: String, stream: StreamRef, event_id: Option<String>) {
        if self.remember_version(&frame) {
            self.open_get_stream();
        }
        self.report(Input::BackendEvent {
            server: self.server.clone(),
            generation: self.generation,
            stream,
            event_id,
            frame,
        });
    }

    /// A stream ended (`failure`: `None` when the server ended it): whether to
    /// resume it is the core's call.
    fn stream_ended(&self, stream: StreamRef, outcome: SseOutcome, failure: Option<Failure>) {
        tracing::debug!(server = %self.server, %stream, ?failure, "SSE stream ended");
        self.report(Input::StreamEnded {
            server: self.server.clone(),
            generation: self.generation,
            stream,
            last_event_id: outcome.last_event_id,
            retry_ms: outcome.retry_ms,
            events: outcome.events,
            failure,
        });
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
    /// handshake: the transport notes the version the server chose. True when this
    /// frame was the handshake answer.
    fn remember_version(&self, frame: &str) -> bool {
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
            return false;
        }
        if let Ok(Answer { result: Some(Version { protocol_version: Some(v) }) }) = serde_json::from_str(frame) {
            return self.state.lock().unwrap().protocol_version.replace(v).is_none();
        }
        false
    }

    /// POSTs a request sent before the handshake: the stateless revision's way
    /// when it carries that revision's `_meta` (with `extra` headers from the
    /// core), else as always (and when it is `initialize`, the connection is in
    /// the handshake era from now on).
    fn post_before_handshake(
        self: &Arc<Self>,
        frame: &str,
        request: Option<u64>,
        extra: &[(String, String)],
        cancel: &Arc<Cancel>,
    ) {
        match stateless_request_headers(frame) {
            Some(headers) => self.post_stateless(frame, request, &headers, extra, cancel),
            None => {
                if is_initialize(frame) {
                    self.state.lock().unwrap().handshake = true;
                }
                self.post(frame, request, None);
            }
        }
        let mut state = self.state.lock().unwrap();
        if let Some(id) = request {
            if state.requests.get(&id).is_some_and(|c| Arc::ptr_eq(c, cancel)) {
                state.requests.remove(&id);
            }
        }
    }

    /// POSTs a stateless-era request (2026-07-28): the headers that repeat its
    /// body (the standard ones, then the core's `Mcp-Param-*` in `extra`), never
    /// `Mcp-Session-Id` (the revision has no sessions), and an answer that changes
    /// nothing about the connection. A `subscriptions/listen` goes without a read
    /// timeout. Nothing is reported once the core cancelled it.
    fn post_stateless(
        self: &Arc<Self>,
        frame: &str,
        request: Option<u64>,
        headers: &[(&'static str, String)],
        extra: &[(String, String)],
        cancel: &Cancel,
    ) {
        let lasting =
            headers.iter().any(|(name, value)| *name == http_headers::METHOD && value == "subscriptions/listen");
        let agent = if lasting { &self.lasting_agent } else { &self.agent };
        let response = agent.send(|agent| {
            let mut req = agent
                .post(&self.url)
                .set("Content-Type", "application/json")
                .set("Accept", "application/json, text/event-stream");
            for (k, v) in &self.headers {
                req = req.set(k, v);
            }
            req = self.with_bearer(req);
            for (k, v) in headers {
                req = req.set(k, v);
            }
            for (k, v) in extra {
                req = req.set(k, v);
            }
            req.send_string(frame)
        });
        if let Ok(r) = &response {
            self.note_nonce(r);
        }
        if cancel.is_set() {
            return; // dropping the response closes it
        }
        match response {
            Ok(response) => self.read_answer(agent, response, request, Some(cancel)),
            Err(ureq::Error::Status(status, response)) => self.refused(agent, frame, request, status, response),
            Err(ureq::Error::Transport(t)) => self.failed(request, transport_failure(&t)),
        }
    }

    /// A stateless-era request answered with an HTTP error. Stateless-era servers put a
    /// JSON-RPC error for the request in the body of their 4xx (-32022 for an
    /// unsupported revision, -32601 for an unknown method, -32020 for headers that
    /// disagree with the body): that is the request's answer, and the core decides
    /// what it means (retry at another revision, fail the call). A 4xx without one
    /// (a handshake-era server refusing the unknown request, a proxy) stays an HTTP
    /// failure: on a probe, the core reads it as "handshake-era server".
    fn refused(&self, agent: &PooledAgent, frame: &str, request: Option<u64>, status: u16, response: ureq::Response) {
        if let Some(failure) = self.unauthorized(status, &response) {
            return self.failed(request, failure);
        }
        if (400..500).contains(&status) {
            let body = error_text(agent, response);
            if error_answering(&body, frame) {
                return self.report_frame(body);
            }
        }
        self.failed(request, Failure::Http { status })
    }

    /// POSTs one frame. `accepted` opens when the response head arrived (or the
    /// POST failed): the frames ordered behind this one may go then.
    fn post(self: &Arc<Self>, frame: &str, request: Option<u64>, accepted: Option<Opener>) {
        let url = if self.legacy {
            match self.wait_for_endpoint() {
                Some(url) => url,
                None => return self.failed(request, Failure::Timeout),
            }
        } else {
            self.url.clone()
        };
        let (session_id, protocol_version) = {
            let state = self.state.lock().unwrap();
            (state.session_id.clone().filter(|_| !self.legacy), state.protocol_version.clone())
        };
        let in_session = session_id.is_some();
        let response = self.agent.send(|agent| {
            let mut req = agent
                .post(&url)
                .set("Content-Type", "application/json")
                .set("Accept", "application/json, text/event-stream");
            for (k, v) in &self.headers {
                req = req.set(k, v);
            }
            req = self.with_bearer(req);
            if let Some(v) = &protocol_version {
                req = req.set("MCP-Protocol-Version", v);
            }
            if let Some(id) = &session_id {
                req = req.set("Mcp-Session-Id", id);
            }
            req.send_string(frame)
        });
        if let Ok(r) = &response {
            self.note_nonce(r);
        }
        drop(accepted);
        let response = match response {
            Ok(r) => r,
            Err(ureq::Error::Status(status, r)) => {
                if let Some(failure) = self.unauthorized(status, &r) {
                    return self.failed(request, failure);
                }
                let status = if in_session && status == 400 && rejects_session(&error_text(&self.agent, r)) {
                    // The spec answers a request in an unknown session with 404; the
                    // TypeScript SDK's example servers (and servers built from them)
                    // answer 400 "No valid session ID provided", e.g. after a restart.
                    // It is the same loss: the core re-initializes.
                    tracing::debug!(server = %self.server, "HTTP 400 rejects the session: treated as session lost (404)");
                    404
                } else {
                    status
                };
                return self.failed(request, Failure::Http { status });
            }
            Err(ureq::Error::Transport(t)) => return self.failed(request, transport_failure(&t)),
        };
        if self.legacy {
            return; // answers arrive on the event stream
        }
        if let Some(id) = response.header("Mcp-Session-Id") {
            self.state.lock().unwrap().session_id = Some(id.to_string());
        }
        self.read_answer(&self.agent, response, request, None);
    }

    /// Reads what a POST got back: nothing (202), an SSE stream or a JSON body.
    /// `cancel` is there for a stateless-era request: its frames tell the
    /// transport nothing, and once it is cancelled nothing more is reported.
    fn read_answer(
        self: &Arc<Self>,
        agent: &PooledAgent,
        response: ureq::Response,
        request: Option<u64>,
        cancel: Option<&Cancel>,
    ) {
        let cancelled = || cancel.is_some_and(Cancel::is_set);
        let is_sse = response.content_type() == "text/event-stream";
        if response.status() == 202 {
            // Accepted: a notification or response; nothing comes back on this POST.
        } else if is_sse {
            // A handshake-era request's stream may be resumed; a stateless-era one's is not.
            let stream = request.filter(|_| cancel.is_none()).map(StreamRef::Request);
            let outcome = self.read_sse(agent.body(response), false, request, cancel, stream, false);
            if cancelled() {
                return;
            }
            match stream {
                // Ended before its answer: the core resumes it or fails the request.
                Some(stream) if !outcome.answered => {
                    let failure = (!outcome.clean).then_some(Failure::Reset);
                    self.stream_ended(stream, outcome, failure);
                }
                // A stream that broke, or ended without answering its request, loses the request.
                _ if !outcome.clean || (request.is_some() && !outcome.answered) => self.failed(request, Failure::Reset),
                _ => {}
            }
        } else {
            let mut body = String::new();
            let limit = self.max_frame as u64 + 1;
            let read = agent.body(response).take(limit).read_to_string(&mut body);
            match read {
                _ if cancelled() => {}
                Ok(_) if body.len() > self.max_frame => {
                    self.failed(request, Failure::Other { message: "response exceeds the frame limit".into() })
                }
                Ok(_) if body.trim().is_empty() => {}
                Ok(_) if cancel.is_some() => self.report_frame(body),
                Ok(_) => self.frame(body),
                Err(_) => self.failed(request, Failure::Reset),
            }
        }
    }

    /// Opens the optional server-to-client GET stream once the handshake is
    /// answered, and before the answer goes to the core: whatever the server sends
    /// on its own right after `notifications/initialized` (a tools/list_changed for
    /// tools it registers then, a roots/list request) goes to that stream or nowhere.
    fn open_get_stream(self: &Arc<Self>) {
        {
            let mut state = self.state.lock().unwrap();
            if self.legacy || state.get_stream_opened || state.session_id.is_none() {
                return;
            }
            state.get_stream_opened = true;
        }
        let gate = Arc::new(Gate::default());
        let opened = Opener(gate.clone());
        let s = self.clone();
        (self.spawn)(Box::new(move || s.get_stream(Some(opened), StreamRef::Standalone, None)));
        gate.wait(ORDER_WAIT);
    }

    /// A GET stream: the optional server-to-client stream (a server without one
    /// answers 405), or a resumption of `stream` after `last_event_id`. However
    /// it ends (but with the answer of the request it resumes), the core hears
    /// of it.
    fn get_stream(self: &Arc<Self>, opened: Option<Opener>, stream: StreamRef, last_event_id: Option<String>) {
        let (session_id, protocol_version) = {
            let state = self.state.lock().unwrap();
            (state.session_id.clone(), state.protocol_version.clone())
        };
        let response = self.agent.send(|agent| {
            let mut req = agent.get(&self.url).set("Accept", "text/event-stream");
            if let Some(id) = &last_event_id {
                req = req.set("Last-Event-ID", id);
            }
            for (k, v) in &self.headers {
                req = req.set(k, v);
            }
            req = self.with_bearer(req);
            if let Some(id) = &session_id {
                req = req.set("Mcp-Session-Id", id);
            }
            if let Some(v) = &protocol_version {
                req = req.set("MCP-Protocol-Version", v);
            }
            req.call()
        });
        if let Ok(r) = &response {
            self.note_nonce(r);
        }
        drop(opened);
        let failure = match response {
            Ok(r) if r.content_type() == "text/event-stream" => {
                let mut outcome = self.read_sse(self.agent.body(r), false, stream.request(), None, Some(stream), true);
                if outcome.answered {
                    return;
                }
                outcome.last_event_id = outcome.last_event_id.or(last_event_id);
                let failure = (!outcome.clean).then_some(Failure::Reset);
                return self.stream_ended(stream, outcome, failure);
            }
            Ok(r) => Failure::Other {
                message: format!("GET answered with HTTP {} and content type {:?}", r.status(), r.content_type()),
            },
            Err(ureq::Error::Status(status, r)) => self.unauthorized(status, &r).unwrap_or(Failure::Http { status }),
            Err(ureq::Error::Transport(t)) => {
                tracing::debug!(server = %self.server, "GET stream: {}", transport_text(&t));
                transport_failure(&t)
            }
        };
        let outcome = SseOutcome { last_event_id, ..SseOutcome::default() };
        self.stream_ended(stream, outcome, Some(failure));
    }

    /// Feeds SSE `message` events as frames; legacy streams also carry `endpoint`.
    /// A stateless-era request's stream (`cancel`) ends as soon as it is cancelled:
    /// returning drops the reader, which closes the stream. Events with an id of
    /// their own on a resumable `stream` go to the core with it (to drop replays).
    /// A GET resuming a request's stream ends once it brought the answer.
    fn read_sse(
        self: &Arc<Self>,
        mut reader: impl Read,
        legacy: bool,
        request: Option<u64>,
        cancel: Option<&Cancel>,
        stream: Option<StreamRef>,
        end_on_answer: bool,
    ) -> SseOutcome {
        let mut decoder = SseDecoder::new(self.max_frame);
        let mut chunk = vec![0u8; 16 * 1024];
        let mut answered = false;
        let mut events = 0u32;
        let outcome = |decoder: &SseDecoder, clean: bool, answered: bool, events: u32| SseOutcome {
            clean,
            answered,
            last_event_id: decoder.last_event_id().map(str::to_string),
            retry_ms: decoder.retry(),
            events,
        };
        loop {
            if cancel.is_some_and(Cancel::is_set) {
                return outcome(&decoder, true, answered, events);
            }
            let n = match reader.read(&mut chunk) {
                Ok(0) => return outcome(&decoder, true, answered, events),
                Ok(n) => n,
                Err(_) => return outcome(&decoder, false, answered, events),
            };
            decoder.push(&chunk[..n]);
            while let Some(event) = decoder.next_event() {
                let event = match event {
                    Ok(event) => event,
                    // An event over the frame bound on a request's stream is, but for
                    // a rare notification, that request's answer: the request fails at
                    // once rather than at its timeout, and the stream is dropped (a
                    // resumption would bring the same event again). Elsewhere the
                    // event is dropped and the stream read on.
                    Err(error) => {
                        tracing::warn!(server = %self.server, ?request, "SSE event dropped: {error}");
                        if request.is_some() && !answered {
                            let message = format!("an event of the response stream exceeds the frame limit ({error})");
                            self.failed(request, Failure::Other { message });
                            return outcome(&decoder, true, true, events);
                        }
                        continue;
                    }
                };
                if legacy && event.event == "endpoint" {
                    let endpoint = resolve(&self.url, event.data.trim());
                    self.state.lock().unwrap().endpoint = Some(endpoint);
                    self.endpoint_known.notify_all();
                } else if (event.event == "message" || event.event.is_empty()) && !event.data.trim().is_empty() {
                    answered |= request.is_some_and(|id| answers(&event.data, id));
                    events = events.saturating_add(1);
                    match (cancel, stream, event.id) {
                        (Some(cancel), ..) if cancel.is_set() => return outcome(&decoder, true, answered, events),
                        (Some(_), ..) => self.report_frame(event.data),
                        (None, Some(stream), Some(id)) if decoder.last_event_had_id() => {
                            self.event_frame(event.data, stream, Some(id))
                        }
                        (None, Some(stream @ StreamRef::Request(_)), _) => self.event_frame(event.data, stream, None),
                        (None, ..) => self.frame(event.data),
                    }
                    if answered && end_on_answer {
                        return outcome(&decoder, true, answered, events);
                    }
                }
            }
            if self.state.lock().unwrap().closed {
                return outcome(&decoder, true, answered, events);
            }
        }
    }

    fn legacy_stream(self: &Arc<Self>) {
        let response = self.agent.send(|agent| {
            let mut req = agent.get(&self.url).set("Accept", "text/event-stream");
            for (k, v) in &self.headers {
                req = req.set(k, v);
            }
            self.with_bearer(req).call()
        });
        match response {
            Ok(r) => {
                let _ = self.read_sse(self.agent.body(r), true, None, None, None, false);
                self.failed(None, Failure::Reset);
            }
            Err(ureq::Error::Status(status, r)) => {
                self.failed(None, self.unauthorized(status, &r).unwrap_or(Failure::Http { status }))
            }
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

/// The start of an error response's body, for telling what it is about.
/// A 401 or 403 as the failure the core acts on, with what `WWW-Authenticate` said.
fn unauthorized(status: u16, response: &ureq::Response) -> Option<Failure> {
    if !matches!(status, 401 | 403) {
        return None;
    }
    let challenge =
        response.all("WWW-Authenticate").into_iter().find_map(crate::oauth::challenge::parse).unwrap_or_default();
    Some(Failure::Unauthorized { status, challenge })
}

/// `challenge` with `token` hidden from every field: a server may quote the token
/// it refused, and the challenge goes into status, traces and the next login.
fn hide_in_challenge(challenge: &mut tether_core::credential::Challenge, token: &str) {
    let fields =
        [&mut challenge.error, &mut challenge.scope, &mut challenge.resource_metadata, &mut challenge.description];
    for field in fields.into_iter().flatten() {
        *field = crate::oauth::hide(field, &[token]);
    }
}

fn error_text(agent: &PooledAgent, response: ureq::Response) -> String {
    let mut text = String::new();
    let _ = agent.body(response).take(ERROR_BODY_LIMIT).read_to_string(&mut text);
    text
}

/// Whether an HTTP 400 body rejects the session: a JSON-RPC error whose message
/// is about the session (the TypeScript SDK's example servers, and the many
/// servers built from them, say "Bad Request: No valid session ID provided"), or
/// a plain-text body saying so (Python SDK servers before they switched to 404).
fn rejects_session(body: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Reply {
        error: Option<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        message: Option<String>,
    }
    let about_session = |text: &str| text.to_ascii_lowercase().contains("session");
    match serde_json::from_str::<Reply>(body) {
        Ok(Reply { error: Some(Error { message: Some(m) }) }) => about_session(&m),
        Ok(_) => false,
        Err(_) => about_session(body),
    }
}

/// `Some` when `frame` is a `notifications/cancelled`, holding the request it
/// cancels when that is a gateway id.
fn cancelled_request(frame: &str) -> Option<Option<u64>> {
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(default, rename = "requestId")]
        request_id: Option<serde_json::Value>,
    }
    if !frame.contains("notifications/cancelled") {
        return None; // most frames: no need to parse
    }
    match protocol::parse(frame) {
        Ok(Message::Notification { method, params }) if method == "notifications/cancelled" => {
            let params = params.and_then(|p| serde_json::from_str::<Params>(p).ok());
            Some(params.and_then(|p| p.request_id).and_then(|id| id.as_u64()))
        }
        _ => None,
    }
}

/// Whether `frame` is the handshake's `initialize` request.
fn is_initialize(frame: &str) -> bool {
    matches!(protocol::parse(frame), Ok(Message::Request { method, .. }) if method == "initialize")
}

/// Whether `body` is a JSON-RPC error answering `frame`, the request it came
/// back for (ids compared as JSON values).
fn error_answering(body: &str, frame: &str) -> bool {
    let Ok(Message::Error { id: Some(answered), .. }) = protocol::parse(body.trim()) else { return false };
    let Ok(Message::Request { id, .. }) = protocol::parse(frame) else { return false };
    let value = |raw: &str| serde_json::from_str::<serde_json::Value>(raw).ok();
    value(answered).is_some_and(|a| Some(a) == value(id))
}

/// How an SSE stream ended.
#[derive(Default)]
struct SseOutcome {
    /// It ended normally (not a read error).
    clean: bool,
    /// It carried the answer to the request that opened it.
    answered: bool,
    /// The last event id in effect.
    last_event_id: Option<String>,
    /// The server's latest `retry` hint, in ms.
    retry_ms: Option<u64>,
    /// Messages it carried.
    events: u32,
}

/// Whether `frame` is the response (result or error) to request `id`.
fn answers(frame: &str, id: u64) -> bool {
    #[derive(serde::Deserialize)]
    struct Response {
        id: Option<serde_json::Value>,
        #[serde(default)]
        result: Option<serde::de::IgnoredAny>,
        #[serde(default)]
        error: Option<serde::de::IgnoredAny>,
    }
    match serde_json::from_str::<Response>(frame) {
        Ok(r) => r.id.and_then(|v| v.as_u64()) == Some(id) && (r.result.is_some() || r.error.is_some()),
        Err(_) => false,
    }
}

/// Maps a ureq transport error to the core's failure kinds.
fn transport_failure(t: &ureq::Transport) -> Failure {
    match t.kind() {
        ureq::ErrorKind::Dns => Failure::Dns,
        // ureq reports a failed TLS handshake as a failed connection: it is not a
        // refusal, and saying so sends the user looking in the wrong place.
        ureq::ErrorKind::ConnectionFailed if t.message().is_some_and(|m| m.contains("tls")) => {
            let source = std::error::Error::source(t).map(|s| s.to_string()).unwrap_or_default();
            let hint = if source.contains("corrupt message") || source.contains("InvalidContentType") {
                " (the server answered in plain HTTP: use an http:// URL, or its TLS port)"
            } else {
                ""
            };
            Failure::Other { message: format!("TLS handshake failed: {source}{hint}") }
        }
        ureq::ErrorKind::ConnectionFailed => Failure::Refused,
        ureq::ErrorKind::Io => {
            let text = transport_text(t);
            if text.contains("timed out") || text.contains("timeout") {
                Failure::Timeout
            } else {
                Failure::Reset
            }
        }
        _ => Failure::Other { message: transport_text(t) },
    }
}

/// What went wrong, without the URL (ureq's own text names it, and a URL may hold
/// a key in its query or credentials before its host).
fn transport_text(t: &ureq::Transport) -> String {
    let mut text = t.kind().to_string();
    if let Some(message) = t.message() {
        text.push_str(": ");
        text.push_str(message);
    }
    if let Some(source) = std::error::Error::source(t) {
        text.push_str(": ");
        text.push_str(&source.to_string());
    }
    text
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
mod tests;
