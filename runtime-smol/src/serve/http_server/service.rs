//! One HTTP request to the endpoint: the guards, then POST (a message), GET (a
//! stream) or DELETE (the end of a session).

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_LENGTH};
use hyper::{Method, Request, Response, StatusCode};
use tether_core::{Input, SessionId};

use super::adopt;
use super::body::{self, BodyError};
use super::guards::{self, Refusal, JSON, SSE};
use super::listener::Connection;
use super::message::{classify, Shape, INVALID_REQUEST, PARSE_ERROR};
use super::reply::{self, Body};
use super::resource_guard::Bearer;
use super::sessions::{First, Refused, Resume};
use super::status_routes;
use super::Shared;
use crate::serve::byte_queue as queue;

/// The session header, in requests and in the initialize response.
const SESSION_HEADER: &str = "mcp-session-id";

/// Answers one request arriving on `connection`.
pub(super) async fn handle(shared: Arc<Shared>, connection: &Connection, request: Request<Incoming>) -> Response<Body> {
    let screened = screen(&shared, &request);
    // OAuth: the token is checked once the request is known to be one it matters for.
    let mut bearer = None;
    if let (Some(guard), Screened::Status | Screened::Mcp(_)) = (&shared.options.resource_guard, &screened) {
        // The page shows nothing by itself: it asks for a token.
        let page = matches!(screened, Screened::Status) && request.uri().path() == "/";
        if !page {
            let verified = match guard.authenticate(request.headers()).await {
                Ok(verified) => verified,
                Err(response) => return body::after_discarding(request, response).await,
            };
            let status = matches!(screened, Screened::Status);
            if let Some(response) = status.then(|| guard.refuse_operator(request.uri().path(), &verified)).flatten() {
                return body::after_discarding(request, response).await;
            }
            bearer = Some(verified);
        }
    }
    let owner = bearer;
    if matches!(screened, Screened::Mcp(_)) && !shared.accepting.load(std::sync::atomic::Ordering::SeqCst) {
        // Draining: the balancer has had its time to notice; whatever still
        // comes goes elsewhere (after the body, so the connection can close cleanly).
        let refused =
            reply::error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable: this replica is draining; retry");
        return body::after_discarding(request, reply::closing(reply::retry_after(refused, 1))).await;
    }
    if let (Screened::Mcp(Method::GET | Method::DELETE), Some(key)) = (&screened, session_key(request.headers())) {
        // A session another replica opened is taken in before anything looks it up.
        let key = key.to_string();
        adopt::find_or_adopt(&shared, &key, owner.as_ref()).await;
    }
    match screened {
        Screened::Refused(response) => body::after_discarding(request, response).await,
        Screened::Metadata => match &shared.options.resource_guard {
            Some(guard) => guard.metadata(),
            None => reply::error(StatusCode::NOT_FOUND, "not found"),
        },
        Screened::Status => status_routes::handle(&shared, connection, request).await,
        Screened::Login => {
            let response = login_callback(&shared, &request).await;
            body::after_discarding(request, response).await
        }
        Screened::Mcp(Method::POST) => post(&shared, connection, request, owner).await,
        Screened::Mcp(Method::GET) => match stranger(&shared, request.headers(), owner) {
            Some(refused) => refused,
            None => get(&shared, connection, request.headers()).await,
        },
        Screened::Mcp(_) => match stranger(&shared, request.headers(), owner) {
            Some(refused) => refused,
            None => delete(&shared, request.headers()).await,
        },
    }
}

/// 403 when the request's bearer is not the one who opened the session it names.
fn stranger(shared: &Shared, headers: &HeaderMap, owner: Option<Bearer>) -> Option<Response<Body>> {
    let owner = owner?;
    let table = shared.table();
    let session = table.find(session_key(headers)?)?;
    table.is_stranger(session, &owner.identity).then(not_yours)
}

fn not_yours() -> Response<Body> {
    reply::error(StatusCode::FORBIDDEN, "forbidden: this session was opened with another identity's token")
}

/// Where a request goes once its headers passed the guards.
enum Screened {
    /// Answered without reading its body.
    Refused(Response<Body>),
    /// To the status endpoints.
    Status,
    /// The Protected Resource Metadata (OAuth).
    Metadata,
    /// The cluster's login callback.
    Login,
    /// To the MCP endpoint, with this method (POST, GET or DELETE).
    Mcp(Method),
}

/// The guards, in the order the module's doc gives.
fn screen(shared: &Shared, request: &Request<Incoming>) -> Screened {
    let refused = |status, text| Screened::Refused(reply::error(status, text));
    let options = &shared.options;
    let status_path = shared.status.get().is_some() && status_routes::is_status_path(request.uri().path());
    let login_path = shared.logins.get().is_some_and(|(path, _)| path == request.uri().path());
    if let Some(why) = super::framing::refused_framing(request.headers()) {
        // Where the body ends is in doubt: nothing more is read from this connection.
        return Screened::Refused(reply::closing(reply::error(StatusCode::BAD_REQUEST, why)));
    }
    match guards::admit(options, request.headers()) {
        Ok(()) => {}
        Err(Refusal::RepeatedHost) => {
            return refused(StatusCode::BAD_REQUEST, "bad request: more than one Host header")
        }
        Err(Refusal::Host) => {
            return refused(StatusCode::FORBIDDEN, "forbidden: the Host header does not name this server")
        }
        Err(Refusal::Origin) => return refused(StatusCode::FORBIDDEN, "forbidden: Origin not allowed"),
        // A browser brings no token to the login callback.
        Err(Refusal::Unauthorized) if login_path => return Screened::Login,
        // The page shows nothing by itself: it asks for the token.
        Err(Refusal::Unauthorized) if status_path && request.uri().path() == "/" => {
            return Screened::Refused(reply::unframed(status_routes::page()))
        }
        Err(Refusal::Unauthorized) => return Screened::Refused(reply::unauthorized()),
    }
    if status_path {
        return Screened::Status;
    }
    if login_path {
        return Screened::Login;
    }
    let metadata = options.resource_guard.as_ref().is_some_and(|g| g.is_metadata_path(request.uri().path()));
    if metadata {
        return match *request.method() {
            Method::GET => Screened::Metadata,
            _ => refused(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: the metadata is read with GET"),
        };
    }
    if !options.mcp || request.uri().path() != options.path {
        return refused(StatusCode::NOT_FOUND, "not found: no MCP endpoint at this path");
    }
    let method = request.method().clone();
    if method != Method::POST && method != Method::GET && method != Method::DELETE {
        return Screened::Refused(reply::method_not_allowed(options.get_stream));
    }
    // A stateless request's revision is in its body too: the core answers an
    // unsupported one with -32022, the request's id and what tether speaks.
    let stateless_post =
        options.stateless_clients && method == Method::POST && session_key(request.headers()).is_none();
    if !stateless_post && !guards::version_supported(request.headers(), options.stateless_clients) {
        return refused(StatusCode::BAD_REQUEST, "bad request: unsupported MCP-Protocol-Version");
    }
    Screened::Mcp(method)
}

/// `GET` at the login callback's path: the pending login its `state` names is
/// finished here (the code exchange runs off the executor), and the browser
/// gets a small page saying how it went.
async fn login_callback(shared: &Shared, request: &Request<Incoming>) -> Response<Body> {
    if request.method() != Method::GET {
        return reply::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: the login callback is GET");
    }
    let Some((_, desk)) = shared.logins.get() else { return reply::error(StatusCode::NOT_FOUND, "not found") };
    // A person finishes a login now and then: a few at once is plenty, and
    // a flood of callbacks (no token is needed) holds no more threads or
    // store connections than that.
    let Some(_slot) = shared.login_slots.try_acquire() else {
        let busy =
            reply::error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable: too many login callbacks at once");
        return reply::retry_after(busy, 1);
    };
    let (desk, query) = (desk.clone(), request.uri().query().unwrap_or_default().to_owned());
    let cookie = login_cookie(request.headers());
    let answer = smol::unblock(move || desk.handle(&query, cookie.as_deref())).await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = reply::json(status, answer.page);
    let headers = response.headers_mut();
    if let Some(location) = answer.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        headers.insert(hyper::header::LOCATION, location);
    }
    if let Some(cookie) = answer.cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(hyper::header::SET_COOKIE, cookie);
    }
    headers.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(hyper::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(hyper::header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    reply::unframed(response)
}

/// The login nonce the browser sends back (see `tether_host::oauth::shared_login`).
fn login_cookie(headers: &HeaderMap) -> Option<String> {
    let name = tether_host::oauth::shared_login::COOKIE;
    headers
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.chars().take(128).collect())
}

fn session_key(headers: &HeaderMap) -> Option<&str> {
    // A value that is not visible ASCII names no session: it will not be found.
    headers.get(SESSION_HEADER).map(|v| v.to_str().unwrap_or("\u{0}"))
}

fn missing_session() -> Response<Body> {
    reply::error(
        StatusCode::BAD_REQUEST,
        "bad request: Mcp-Session-Id header required (only initialize opens a session)",
    )
}

fn unknown_session() -> Response<Body> {
    reply::error(StatusCode::NOT_FOUND, "session not found: unknown or closed Mcp-Session-Id; initialize again")
}

fn host_gone() -> Response<Body> {
    reply::error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable: the gateway is shutting down")
}

/// A waiting request's session ended: the session closed (404) or the server did (503).
fn gone(shared: &Shared) -> Response<Body> {
    if shared.table().is_closed() {
        host_gone()
    } else {
        unknown_session()
    }
}

async fn post(
    shared: &Arc<Shared>,
    connection: &Connection,
    request: Request<Incoming>,
    owner: Option<Bearer>,
) -> Response<Body> {
    if let Some(refused) = refuse_post(request.headers()) {
        return body::after_discarding(request, refused).await;
    }
    let headers = request.headers();
    let key = session_key(headers).map(str::to_string);
    // The stateless revision's request headers, checked against the body below.
    let [version_header, method_header, name_header] = ["mcp-protocol-version", "mcp-method", "mcp-name"]
        .map(|name| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string));
    let param_headers = param_headers(headers);
    let body = match read_body(shared, connection, request).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let Ok(text) = String::from_utf8(body) else {
        return reply::error_code(StatusCode::BAD_REQUEST, PARSE_ERROR, "parse error: the body is not UTF-8");
    };
    let shape = match classify(&text) {
        Ok(shape) => shape,
        Err(invalid) => {
            let (code, message) = invalid.error();
            return reply::error_for(StatusCode::BAD_REQUEST, invalid.id(), code, message);
        }
    };
    // OAuth: the engine is told the token's scopes before each message (it
    // ignores a repeat), so a refreshed or stepped-up token counts at once.
    let access = owner.as_ref().map(|o| Access { scopes: o.scopes.clone(), principal: o.identity.clone() });
    let (session, new_key) = match key {
        Some(key) => {
            let Some(session) = adopt::find_or_adopt(shared, &key, owner.as_ref()).await else {
                return unknown_session();
            };
            if owner.as_ref().is_some_and(|o| shared.table().is_stranger(session, &o.identity)) {
                return not_yours();
            }
            (session, None)
        }
        None if matches!(shape, Shape::Request { initialize: true, .. }) => {
            let Some(key) = new_session_key() else {
                tracing::error!("no randomness from the operating system for a session id");
                return reply::error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable: cannot open a session");
            };
            let mut table = shared.table();
            match table.open(key.clone()) {
                Some(session) => {
                    if let Some(owner) = owner {
                        table.set_owner(session, owner.identity);
                    }
                    (session, Some(key))
                }
                None => return host_gone(),
            }
        }
        // A stateless-era request: an engine session for this POST only.
        None if shared.options.stateless_clients && matches!(shape, Shape::Request { .. }) => {
            let stateless_headers = tether_core::protocol::StatelessHeaders {
                protocol_version: version_header.as_deref(),
                method: method_header.as_deref(),
                name: name_header.as_deref(),
            };
            if let Err(message) = tether_core::protocol::check_stateless_headers(&text, stateless_headers) {
                let Shape::Request { id, .. } = &shape else { unreachable!("matched above") };
                let code = tether_core::protocol::HEADER_MISMATCH;
                let frame = tether_core::protocol::error_response(id, code, &message, None);
                return reply::json(StatusCode::BAD_REQUEST, frame);
            }
            let Some(key) = new_session_key() else {
                return reply::error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable: no randomness");
            };
            let Some(session) = shared.table().open(key) else { return host_gone() };
            let Shape::Request { id, .. } = shape else { unreachable!("matched above") };
            let per_request = Opened::PerRequest;
            let frame = Frame { text, param_headers: Some(param_headers), access };
            return self::request(shared, connection, session, per_request, id, frame).await;
        }
        None => return missing_session(),
    };
    let opened = match new_key {
        Some(key) => Opened::Session(key),
        None => Opened::Existing,
    };
    match shape {
        Shape::Request { id, .. } => {
            let frame = Frame { text, param_headers: None, access };
            self::request(shared, connection, session, opened, id, frame).await
        }
        Shape::Notification | Shape::Response => {
            if let Some(Access { scopes, principal }) = access {
                let principal = Some(principal);
                if shared.inputs.send(Input::ClientAccess { session, scopes, principal }).await.is_err() {
                    return host_gone();
                }
            }
            if shared.inputs.send(Input::ClientFrame { session, frame: text, param_headers: None }).await.is_err() {
                return host_gone();
            }
            reply::empty(StatusCode::ACCEPTED)
        }
    }
}

/// A request's `Mcp-Param-*` headers (tool arguments mirrored by stateless-era
/// clients), by lowercased `{Name}`, raw: the core checks them against the body.
/// Repeated headers are joined as HTTP joins them (`a, b`).
/// The answer to a POST whose headers say it cannot be taken (before its body is read).
fn refuse_post(headers: &HeaderMap) -> Option<Response<Body>> {
    if !guards::accepts(headers, JSON) || !guards::accepts(headers, SSE) {
        return Some(reply::error(
            StatusCode::NOT_ACCEPTABLE,
            "not acceptable: Accept must list application/json and text/event-stream",
        ));
    }
    if !guards::json_body(headers) {
        return Some(reply::error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported media type: send application/json"));
    }
    None
}

fn param_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for (name, value) in headers {
        let Some(key) = tether_core::param_headers::received_name(name.as_str()) else { continue };
        let value = String::from_utf8_lossy(value.as_bytes());
        found
            .entry(key)
            .and_modify(|joined: &mut String| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    found
}

/// How the session a request runs in came to be.
enum Opened {
    /// The client's session.
    Existing,
    /// Opened by this `initialize`: the response carries its key.
    Session(String),
    /// Opened for this stateless request alone; the core closes it with the answer.
    PerRequest,
}

/// Forgets a wait when its POST goes away before the first frame. For a
/// per-request session that is the client cancelling: the session closes.
struct Abandon {
    shared: Arc<Shared>,
    session: SessionId,
    id: String,
    token: u64,
    per_request: bool,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let was_waiting = self.shared.table().abandon(self.session, &self.id, self.token);
        if was_waiting && self.per_request {
            let _ = self.shared.inputs.try_send(Input::ClientClosed { session: self.session });
        }
    }
}

/// A request's message and what goes to the engine with it.
struct Frame {
    text: String,
    /// For a stateless-era POST (see [`param_headers`]).
    param_headers: Option<BTreeMap<String, String>>,
    /// What the engine is told of first: the request's token's scopes and holder.
    access: Option<Access>,
}

/// A request's bearer, as the engine hears of it.
struct Access {
    scopes: Vec<String>,
    principal: String,
}

/// Forwards a request and answers with whatever the core routes to it first.
async fn request(
    shared: &Arc<Shared>,
    connection: &Connection,
    session: SessionId,
    opened: Opened,
    id: String,
    frame: Frame,
) -> Response<Body> {
    let Frame { text: frame, param_headers, access } = frame;
    let waiter = match shared.table().expect(session, &id) {
        Ok(waiter) => waiter,
        Err(Refused::Duplicate) => {
            return reply::error_code(
                StatusCode::BAD_REQUEST,
                INVALID_REQUEST,
                "invalid request: a request with this id is already in flight in this session",
            )
        }
        Err(Refused::Gone) => return gone(shared),
    };
    // Declared after `waiter`, so dropped first: a frame is never sent to a wait
    // whose receiver is gone while the table still lists it.
    let per_request = matches!(opened, Opened::PerRequest);
    let _abandon = Abandon { shared: shared.clone(), session, id, token: waiter.token, per_request };
    let connect = !matches!(opened, Opened::Existing);
    if connect && shared.inputs.send(Input::ClientConnected { session, expires: true }).await.is_err() {
        return host_gone();
    }
    if let Some(Access { scopes, principal }) = access {
        let principal = Some(principal);
        if shared.inputs.send(Input::ClientAccess { session, scopes, principal }).await.is_err() {
            return host_gone();
        }
    }
    if shared.inputs.send(Input::ClientFrame { session, frame, param_headers }).await.is_err() {
        return host_gone();
    }
    let mut response = match waiter.first.recv().await {
        Ok(First::Reply(frame)) => {
            if per_request {
                // Answered: this POST's session is over (the core closes a stateless
                // one itself; a request it refused before knowing the era, here).
                let _ = shared.inputs.send(Input::ClientClosed { session }).await;
                let status = tether_core::protocol::stateless_http_status(&frame);
                return reply::json(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), frame);
            }
            if matches!(opened, Opened::Session(_)) && tether_core::protocol::is_error_response(&frame) {
                // A refused initialize opens no session (e.g. one carrying stateless
                // `_meta`, for which initialize does not exist: 404 in that revision).
                let _ = shared.inputs.send(Input::ClientClosed { session }).await;
                shared.table().close(session);
                let status = match shared.options.stateless_clients {
                    true => tether_core::protocol::stateless_http_status(&frame),
                    false => 200,
                };
                return reply::json(StatusCode::from_u16(status).unwrap_or(StatusCode::OK), frame);
            }
            reply::json(StatusCode::OK, frame)
        }
        Ok(First::Stream(rx)) if per_request => {
            // The stateless revision cancels by closing the stream: the request's
            // engine session ends with it (a no-op once the core closed it).
            let shared = shared.clone();
            let keep_alive = shared.options.sse_keep_alive;
            return reply::watched_sse(
                rx,
                connection.closer.clone(),
                keep_alive,
                Box::new(move || {
                    if shared.table().close(session) {
                        let _ = shared.inputs.try_send(Input::ClientClosed { session });
                    }
                }),
            );
        }
        Ok(First::Stream(rx)) => reply::sse(rx, connection.closer.clone()),
        Err(_) => return gone(shared),
    };
    // The id the client gets: sealed by now (the engine asked before its answer).
    let new_key = match opened {
        Opened::Session(key) => Some(shared.table().key_of(session).map_or(key, str::to_string)),
        _ => None,
    };
    if let Some(value) = new_key.and_then(|key| HeaderValue::from_str(&key).ok()) {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    response
}

/// The body, under the server's limits (see [`body::read`]). A refusal closes
/// the connection: the rest of the body is never read.
async fn read_body(
    shared: &Shared,
    connection: &Connection,
    request: Request<Incoming>,
) -> Result<Vec<u8>, Response<Body>> {
    let limits = shared.body_limits();
    let declared = request.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let error = match body::read(request.into_body(), declared, &limits, &shared.budget).await {
        Ok(body) => return Ok(body),
        Err(error) => error,
    };
    let (status, message) = match error {
        BodyError::TooLarge => {
            (StatusCode::PAYLOAD_TOO_LARGE, format!("payload too large: the body exceeds {} bytes", limits.max_bytes))
        }
        BodyError::TimedOut => (
            StatusCode::REQUEST_TIMEOUT,
            format!("request timeout: the body did not arrive within {} s", limits.timeout.as_secs()),
        ),
        BodyError::TooSlow => (
            StatusCode::REQUEST_TIMEOUT,
            format!("request timeout: the body arrived slower than {} bytes per second", limits.min_rate),
        ),
        BodyError::Busy => (
            StatusCode::SERVICE_UNAVAILABLE,
            "service unavailable: too many request bodies are being received; retry".to_string(),
        ),
        BodyError::Broken => (StatusCode::BAD_REQUEST, "bad request: the body could not be read".to_string()),
    };
    if error != BodyError::Broken {
        tracing::debug!(peer = %connection.peer, "HTTP request body refused: {message}");
    }
    Err(reply::closing(reply::error(status, &message)))
}

/// 128 bits from the operating system, as 32 hex digits.
fn new_session_key() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::getrandom(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// GET: resume the stream `Last-Event-ID` names, or open the standalone stream.
async fn get(shared: &Shared, connection: &Connection, headers: &HeaderMap) -> Response<Body> {
    if shared.options.stateless_clients && session_key(headers).is_none() {
        return reply::sessionless_method_not_allowed();
    }
    let get_stream = shared.options.get_stream;
    if !guards::accepts(headers, SSE) {
        return reply::error(StatusCode::NOT_ACCEPTABLE, "not acceptable: Accept must list text/event-stream");
    }
    let last_event_id = headers.get("last-event-id").and_then(|v| v.to_str().ok());
    if !get_stream && last_event_id.is_none() {
        return reply::method_not_allowed(false);
    }
    let Some(key) = session_key(headers) else { return missing_session() };
    let (conn, rx) = queue::channel(shared.options.sse_queue_bytes);
    let closer = connection.closer.clone();
    let (session, lost) = {
        let mut table = shared.table();
        let Some(session) = table.find(key) else { return unknown_session() };
        let resumed = match last_event_id {
            Some(last) => table.resume(session, last, conn),
            None => Resume::Unknown(conn),
        };
        let (conn, lost) = match resumed {
            Resume::Resumed => return reply::sse(rx, closer),
            Resume::Unknown(conn) if last_event_id.is_none() => (Some(conn), None),
            Resume::Unknown(conn) => {
                tracing::debug!(session = session.0, "Last-Event-ID names no kept stream: served as a plain GET");
                (Some(conn), None)
            }
            // Another replica held it: what it carried is lost. The engine
            // answers its request (on this connection, when the id names it)
            // and says lists may differ.
            Resume::Foreign(conn, Some(id)) => match table.lost(session, &id, conn) {
                // The connection waits for the error the engine sends for it.
                Ok(()) => (None, Some(Some(id))),
                Err(conn) => (Some(conn), Some(None)),
            },
            Resume::Foreign(conn, None) => (Some(conn), Some(None)),
        };
        if let Some(conn) = conn {
            if !get_stream {
                return reply::method_not_allowed(false);
            }
            table.listen(session, conn);
        }
        (session, lost)
    };
    if let Some(request) = lost {
        let input = Input::ClientStreamLost { session, request: request.map(Into::into) };
        if shared.inputs.send(input).await.is_err() {
            return host_gone();
        }
    }
    reply::sse(rx, closer)
}

/// DELETE: the client ends its session.
async fn delete(shared: &Shared, headers: &HeaderMap) -> Response<Body> {
    let Some(key) = session_key(headers) else {
        return match shared.options.stateless_clients {
            true => reply::sessionless_method_not_allowed(),
            false => missing_session(),
        };
    };
    let session = {
        let mut table = shared.table();
        let Some(session) = table.find(key) else { return unknown_session() };
        if let Some(sealed) = table.sealed_key(session) {
            // Ended for every replica, not only this one.
            super::write_state(shared, sealed, super::StateWrite::Close);
        }
        table.close(session);
        session
    };
    let _ = shared.inputs.send(Input::ClientClosed { session }).await;
    reply::empty(StatusCode::NO_CONTENT)
}
