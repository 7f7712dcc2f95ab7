//! The operator endpoints beside `/mcp`: `/healthz`, `/readyz`, `/status`,
//! `/metrics`, `/events` (SSE), `/logs/NAME` (a backend's recent stderr and
//! events), the admin actions, and the status page at `/`.
//! Answers come from the host loop ([`crate::serve::status::Query`]); nothing here
//! decides anything but the HTTP shape. Every answer refuses to be framed by
//! another site (`X-Frame-Options`, CSP `frame-ancestors`).

use std::sync::Arc;

use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::json;
use tether_core::AdminCommand;

use super::guards::{self, JSON};
use super::listener::Connection;
use super::reply::{self, Body};
use super::Shared;
use crate::serve::status::{Query, StatusHandle};

/// The status page: one file, no external assets.
const PAGE: &str = include_str!("../status_page/index.html");

/// Whether `path` is one of these endpoints (they need the status handle).
pub(super) fn is_status_path(path: &str) -> bool {
    matches!(path, "/" | "/healthz" | "/readyz" | "/status" | "/metrics" | "/events")
        || path.starts_with("/admin/")
        || path.starts_with("/logs/")
}

/// The page itself holds no data (everything it shows comes from the endpoints,
/// which need the token), so it is served without one.
pub(super) fn page() -> Response<Body> {
    let mut response = reply::json(StatusCode::OK, PAGE.to_string());
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

/// Answers a request for one of the endpoints (guards already passed).
pub(super) async fn handle(
    shared: &Arc<Shared>,
    connection: &Connection,
    request: Request<Incoming>,
) -> Response<Body> {
    let response = answer(shared, connection, &request).await;
    // No status route reads a body: one sent anyway is dropped, the connection kept.
    reply::unframed(super::body::after_discarding(request, response).await)
}

async fn answer(shared: &Arc<Shared>, connection: &Connection, request: &Request<Incoming>) -> Response<Body> {
    let Some(status) = shared.status.get() else {
        return reply::error(StatusCode::NOT_FOUND, "not found: status endpoints are not served here");
    };
    let path = request.uri().path().to_string();
    let method = request.method().clone();
    if let Some(rest) = path.strip_prefix("/admin/") {
        if method != Method::POST {
            return reply::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: admin actions are POST");
        }
        return admin(status, rest, request).await;
    }
    if method != Method::GET {
        return reply::error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed: GET only");
    }
    if let Some(server) = path.strip_prefix("/logs/") {
        return logs(status, &percent_decode(server), request.uri().query()).await;
    }
    match path.as_str() {
        "/" => page(),
        "/healthz" => reply::json(StatusCode::OK, json!({"status": "ok"}).to_string()),
        "/readyz" => match ask(status, Query::Ready).await {
            Some(r) if r.draining => {
                reply::json(StatusCode::SERVICE_UNAVAILABLE, json!({"ready": false, "draining": true}).to_string())
            }
            Some(r) if r.waiting_for.is_empty() => reply::json(StatusCode::OK, json!({"ready": true}).to_string()),
            Some(r) => reply::json(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"ready": false, "waiting_for": r.waiting_for}).to_string(),
            ),
            None => gone(),
        },
        "/status" => match ask(status, Query::Status).await {
            Some(text) => reply::json(StatusCode::OK, text),
            None => gone(),
        },
        "/metrics" => match ask(status, Query::Metrics).await {
            Some(text) => {
                let mut response = reply::json(StatusCode::OK, text);
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
                );
                response
            }
            None => gone(),
        },
        _ => events(status, connection, request),
    }
}

/// Sends a query to the host loop and waits for its answer.
async fn ask<T>(status: &StatusHandle, query: impl FnOnce(async_channel::Sender<T>) -> Query) -> Option<T> {
    let (tx, rx) = async_channel::bounded(1);
    status.queries.send(query(tx)).await.ok()?;
    rx.recv().await.ok()
}

/// `GET /logs/NAME[?lines=N]`: the last N (default 50, at most 1000) lines of a
/// backend's recent log, oldest first; 404 for a backend tether does not have.
async fn logs(status: &StatusHandle, server: &str, query: Option<&str>) -> Response<Body> {
    let lines = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("lines=")?.parse::<usize>().ok())
        .unwrap_or(tether_host::control::DEFAULT_LOG_LINES)
        .min(1000);
    match ask(status, |reply| Query::Logs(server.to_string(), lines, reply)).await {
        Some(Ok(lines)) => reply::json(StatusCode::OK, json!({"server": server, "lines": lines}).to_string()),
        Some(Err(e)) => reply::error(StatusCode::NOT_FOUND, &format!("not found: {e}")),
        None => gone(),
    }
}

fn gone() -> Response<Body> {
    reply::error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable: tether is shutting down")
}

/// `/events`: the kept events (after `Last-Event-ID`), then live ones. A
/// subscriber that falls [`crate::serve::status::EVENTS_QUEUE_BYTES`] behind is disconnected.
fn events(status: &StatusHandle, connection: &Connection, request: &Request<Incoming>) -> Response<Body> {
    let last = request.headers().get("last-event-id").and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    // Primed with a comment so clients see the stream open at once.
    let rx = status.events.subscribe(last, Bytes::from_static(b": tether events\n\n"));
    reply::watched_sse(rx, connection.closer.clone(), std::time::Duration::from_secs(15), Box::new(|| {}))
}

/// `POST /admin/{restart|reconnect}/{server}`. A JSON content type is required:
/// a cross-site form cannot send one without a preflight tether never allows.
async fn admin(status: &StatusHandle, rest: &str, request: &Request<Incoming>) -> Response<Body> {
    if guards::media_type(request.headers()).as_deref() != Some(JSON) {
        return reply::error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported media type: send Content-Type: application/json",
        );
    }
    let Some((action, server)) = rest.split_once('/') else {
        return reply::error(StatusCode::NOT_FOUND, "not found: POST /admin/restart/NAME or /admin/reconnect/NAME");
    };
    let server = percent_decode(server);
    let command = match action {
        "restart" => AdminCommand::Restart { server: server.as_str().into() },
        "reconnect" => AdminCommand::Reconnect { server: server.as_str().into() },
        _ => return reply::error(StatusCode::NOT_FOUND, "not found: the admin actions are restart and reconnect"),
    };
    match ask(status, |tx| Query::Admin(command, tx)).await {
        Some(Ok(())) => reply::json(StatusCode::ACCEPTED, json!({"ok": true}).to_string()),
        Some(Err(_)) => {
            reply::json(StatusCode::NOT_FOUND, json!({"error": format!("unknown backend: {server}")}).to_string())
        }
        None => gone(),
    }
}

/// `%XX` escapes of a path segment decoded (backend names are plain, but a
/// browser escapes what it must).
fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
