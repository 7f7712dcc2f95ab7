//! The responses the transport sends: JSON, SSE, empty, and short JSON-RPC error bodies.

use std::convert::Infallible;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};

use super::guards::{JSON, SSE};
use super::message::{error_body, TRANSPORT_ERROR};
use super::stream;

/// Every response body.
pub(super) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A JSON body.
pub(super) fn json(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text)).boxed_unsync());
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
    let mut response = Response::new(Empty::new().boxed_unsync());
    *response.status_mut() = status;
    response
}

/// A 200 SSE stream fed by `rx`.
pub(super) fn sse(rx: async_channel::Receiver<Bytes>) -> Response<Body> {
    sse_body(stream::body(rx).boxed_unsync())
}

/// A 200 SSE stream of a stateless-era request: kept alive, and `on_drop` runs
/// when the client leaves it (see [`stream::Watched`]).
pub(super) fn watched_sse(
    rx: async_channel::Receiver<Bytes>,
    keep_alive: std::time::Duration,
    on_drop: Box<dyn FnOnce() + Send>,
) -> Response<Body> {
    let watched = stream::Watched::new(rx, keep_alive, on_drop);
    sse_body(http_body_util::StreamBody::new(watched).boxed_unsync())
}

fn sse_body(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(SSE));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
