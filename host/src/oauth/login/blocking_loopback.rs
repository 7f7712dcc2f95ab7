//! The loopback listener on a blocking HTTP server (`tiny_http`), for hosts that
//! carry no async crate (the threads runtime): requests are served one after the
//! other on the waiting thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::super::secret::Secret;
use super::super::Failure;
use super::{check_callback, listener_failed, page_html, timed_out, Callback, Expected, POLL, REDIRECT_PATH, STRAY};

/// The loopback listener of one login.
pub(crate) struct Loopback {
    server: tiny_http::Server,
    port: u16,
}

impl std::fmt::Debug for Loopback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Loopback({})", self.port)
    }
}

impl Loopback {
    /// Listens on 127.0.0.1:`port` (0: any free port).
    pub(crate) fn bind(port: u16) -> Result<Self, String> {
        let server = tiny_http::Server::http(("127.0.0.1", port))
            .map_err(|e| format!("cannot listen on 127.0.0.1:{port} for the login redirect: {e}"))?;
        let port = server.server_addr().to_ip().map(|a| a.port()).unwrap_or(port);
        Ok(Loopback { server, port })
    }

    /// The port it listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>/callback`.
    pub(crate) fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}{REDIRECT_PATH}", self.port)
    }

    /// Serves the callback until a response for this flow arrives (its code, or why
    /// it failed), `timeout` passes, or `cancel` is set (then `None`).
    pub(crate) fn wait(
        &self,
        expected: &Expected,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Option<Result<Secret, Failure>> {
        let deadline = Instant::now() + timeout;
        loop {
            if cancel.load(Ordering::SeqCst) {
                return None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Some(Err(timed_out(timeout)));
            }
            let request = match self.server.recv_timeout(left.min(POLL)) {
                Ok(Some(request)) => request,
                Ok(None) => continue,
                Err(e) => return Some(Err(listener_failed(e))),
            };
            let target = request.url().to_owned();
            let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
            if path != REDIRECT_PATH {
                respond(request, 404, "Not found.");
                continue;
            }
            match check_callback(query, expected) {
                Callback::Stray => respond(request, 400, STRAY),
                Callback::Code(code) => {
                    respond(request, 200, "Authorized: tether is finishing the login (its status, or `tether auth status`, says when it is done). You can close this tab.");
                    return Some(Ok(code));
                }
                Callback::Failed(failure) => {
                    respond(request, 400, &format!("Login failed: {}", failure.message));
                    return Some(Err(failure));
                }
            }
        }
    }
}

/// Answers the browser with a small page.
fn respond(request: tiny_http::Request, status: u16, text: &str) {
    let response = tiny_http::Response::from_string(page_html(text)).with_status_code(status).with_header(
        tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"text/html; charset=utf-8"[..]).expect("a valid header"),
    );
    let _ = request.respond(response);
}
