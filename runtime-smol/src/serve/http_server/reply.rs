//! The responses the transport sends: JSON, SSE, empty, and short JSON-RPC error bodies.

use std::convert::Infallible;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::header::{
    HeaderValue, ALLOW, CACHE_CONTROL, CONNECTION, CONTENT_SECURITY_POLICY, CONTENT_TYPE, WWW_AUTHENTICATE,
    X_FRAME_OPTIONS,
};
use hyper::{Response, StatusCode};

use super::guards::{JSON, SSE};
use super::message::{error_body, error_body_for, TRANSPORT_ERROR};
use super::stream::SseBody;
use crate::serve::byte_queue::{self as queue, Closer, TooSlow};

/// Every response body. Only an event stream fails: when its client is too slow.
pub(super) type Body = UnsyncBoxBody<Bytes, TooSlow>;

fn never(never: Infallible) -> TooSlow {
    match never {}
}

/// A JSON body.
pub(super) fn json(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text)).map_err(never).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

/// A transport error: `status` with a JSON-RPC error body (no id) saying what is wrong.
pub(super) fn error(status: StatusCode, message: &str) -> Response<Body> {
    error_code(status, TRANSPORT_ERROR, message)
}

/// Like [`error`], with a specific JSON-RPC code (-32700, -32600).
pub(super) fn error_code(status: StatusCode, code: i64, message: &str) -> Response<Body> {
    json(status, error_body(code, message))
}

/// Like [`error_code`], answering the message whose id is `id`, as written.
pub(super) fn error_for(status: StatusCode, id: Option<&str>, code: i64, message: &str) -> Response<Body> {
    json(status, error_body_for(id, code, message))
}

/// 401 with the challenge.
pub(super) fn unauthorized() -> Response<Body> {
    let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized: a valid bearer token is required");
    response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// 405 naming the methods the endpoint takes.
pub(super) fn method_not_allowed(get_stream: bool) -> Response<Body> {
    let mut response = error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed at the MCP endpoint");
    let allow = if get_stream { "GET, POST, DELETE" } else { "POST, DELETE" };
    response.headers_mut().insert(ALLOW, HeaderValue::from_static(allow));
    response
}

/// 405 for GET or DELETE without a session when stateless clients are served:
/// a stateless client only ever POSTs (2026-07-28 transport).
pub(super) fn sessionless_method_not_allowed() -> Response<Body> {
    let mut response =
        error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: without Mcp-Session-Id the MCP endpoint takes POST");
    response.headers_mut().insert(ALLOW, HeaderValue::from_static("POST"));
    response
}

/// No body (202, 204).
pub(super) fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Empty::new().map_err(never).boxed_unsync());
    *response.status_mut() = status;
    response
}

/// `response` with `Retry-After: seconds`.
pub(super) fn retry_after(mut response: Response<Body>, seconds: u32) -> Response<Body> {
    response.headers_mut().insert(hyper::header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// The response ends its connection: its request body was not read whole.
pub(super) fn closing(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The response may not be shown inside another site's frame (clickjacking).
pub(super) fn unframed(mut response: Response<Body>) -> Response<Body> {
    let headers = response.headers_mut();
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("frame-ancestors 'none'"));
    response
}

/// A 200 SSE stream fed by `rx`, on the connection `closer` ends if it overflows.
pub(super) fn sse(rx: queue::Receiver, closer: Closer) -> Response<Body> {
    sse_response(SseBody::new(rx, closer))
}

/// A 200 SSE stream that is kept alive with a comment every `keep_alive`, and
/// whose `on_drop` runs when the client leaves it (see [`SseBody`]).
pub(super) fn watched_sse(
    rx: queue::Receiver,
    closer: Closer,
    keep_alive: std::time::Duration,
    on_drop: Box<dyn FnOnce() + Send>,
) -> Response<Body> {
    sse_response(SseBody::new(rx, closer).keep_alive(keep_alive).on_drop(on_drop))
}

fn sse_response(body: SseBody) -> Response<Body> {
    let body = body.boxed_unsync();
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
