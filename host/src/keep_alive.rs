//! HTTP agents that survive servers closing idle connections, as mature HTTP
//! clients do.
//!
//! A server closes a keep-alive connection it has not heard from for a while
//! (uvicorn and Node after 5 s, Apache after 5 s, nginx after 75 s). A client that
//! picks that connection from its pool just as the server closes it writes a
//! request nobody reads and gets a reset or an end of stream instead of an answer.
//! ureq 2 checks a pooled connection before use (a non-blocking peek) and resends
//! idempotent requests itself, but the race at the server's timeout remains, and an
//! MCP call is a POST, which ureq never resends. [`PooledAgent`] closes the gap
//! twice over:
//!
//! - **Idle connections are retired before the server's timeout.** The server's
//!   `Keep-Alive: timeout=N` is honoured (a second of margin); without one,
//!   connections idle for [`DEFAULT_IDLE_LIMIT`] (below the common 5 s) are not
//!   reused.
//! - **A request that fails on a reused connection before any response byte
//!   arrived is sent again once, on a fresh connection.** The server closed that
//!   connection without reading the request (that is what closing an idle
//!   connection means), so sending it again cannot run it twice. A request on a
//!   fresh connection is never resent: there a reset is the server's failure, and
//!   what to do about it is the engine's call.
//!
//! Which connections are reused is learnt without reaching into ureq: ureq asks the
//! agent's resolver for addresses only when it opens a connection, on the thread
//! that sends the request, so a resolver that notes the call tells a new connection
//! from a pooled one.

// ureq 2's error carries a whole response; requests are built in closures that
// return it as ureq does (PooledAgent::send), so it is not boxed here.
#![allow(clippy::result_large_err)]

use std::cell::Cell;
use std::io::{self, Read};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a connection may stay idle and still be reused when the server does
/// not say: below the 5 s after which uvicorn and Node close theirs.
pub const DEFAULT_IDLE_LIMIT: Duration = Duration::from_secs(4);

/// Builds the agent a [`PooledAgent`] hands out (timeouts, redirects, TLS): called
/// again whenever the pool is retired.
type AgentSettings = Arc<dyn Fn() -> ureq::AgentBuilder + Send + Sync>;

thread_local! {
    /// Set by [`NotingResolver`] when ureq opens a connection on this thread.
    static OPENED: Cell<bool> = const { Cell::new(false) };
}

/// The standard resolver, noting on the calling thread that a connection is
/// being opened.
struct NotingResolver;

impl ureq::Resolver for NotingResolver {
    fn resolve(&self, netloc: &str) -> io::Result<Vec<SocketAddr>> {
        OPENED.with(|opened| opened.set(true));
        netloc.to_socket_addrs().map(Iterator::collect)
    }
}

/// A ureq agent whose idle connections are retired before the server drops them,
/// and whose requests lost to a connection the server had closed are sent again.
/// Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct PooledAgent {
    inner: Arc<Inner>,
}

struct Inner {
    settings: AgentSettings,
    state: Mutex<State>,
}

struct State {
    agent: ureq::Agent,
    /// When a connection last went back to the pool (at most: the end of the
    /// exchange that returned it). ureq reuses the newest pooled connection.
    returned: Option<Instant>,
    /// How long a pooled connection stays usable: from the server's `Keep-Alive`,
    /// else [`DEFAULT_IDLE_LIMIT`].
    idle_limit: Duration,
    /// Counts the pools: which one a request took its connection from.
    pool: u64,
}

impl State {
    /// A new agent, with an empty pool: its idle connections close as the last
    /// clone of the old agent goes.
    fn renew(&mut self, settings: &AgentSettings) {
        self.agent = build(settings);
        self.returned = None;
        self.pool += 1;
    }
}

impl std::fmt::Debug for PooledAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PooledAgent")
    }
}

impl PooledAgent {
    /// An agent built by `settings` (called again each time the pool is retired).
    pub fn new(settings: impl Fn() -> ureq::AgentBuilder + Send + Sync + 'static) -> PooledAgent {
        let settings: AgentSettings = Arc::new(settings);
        let agent = build(&settings);
        let state = State { agent, returned: None, idle_limit: DEFAULT_IDLE_LIMIT, pool: 0 };
        PooledAgent { inner: Arc::new(Inner { settings, state: Mutex::new(state) }) }
    }

    /// Sends one request: `send` builds it on the agent it is given and sends it
    /// (it may be called twice: once more, on a fresh connection, when the first
    /// try was lost to a connection the server had closed).
    pub fn send(
        &self,
        send: impl Fn(&ureq::Agent) -> Result<ureq::Response, ureq::Error>,
    ) -> Result<ureq::Response, ureq::Error> {
        let (agent, pool) = self.agent_for_request();
        OPENED.with(|opened| opened.set(false));
        let result = send(&agent);
        let reused = !OPENED.with(Cell::get);
        let result = match result {
            Err(ureq::Error::Transport(t)) if reused && lost_before_answer(&t) => {
                tracing::debug!("a reused connection was closed under the request ({t}); sending it again");
                send(&self.retire(pool))
            }
            other => other,
        };
        if let Ok(r) | Err(ureq::Error::Status(_, r)) = &result {
            self.answered(r);
        }
        result
    }

    /// The body of `response`, noting when it was read to its end (ureq then puts
    /// the connection back in the pool, and its idle time starts).
    pub fn body(&self, response: ureq::Response) -> Body {
        let pooled = keeps_connection(&response);
        Body { reader: response.into_reader(), agent: pooled.then(|| self.clone()) }
    }

    /// The agent to send with now: a new one (its pool empty) when the newest
    /// pooled connection has been idle for longer than the server keeps it.
    /// Which pool it is goes with it, for [`PooledAgent::retire`].
    fn agent_for_request(&self) -> (ureq::Agent, u64) {
        let mut state = self.inner.state.lock().unwrap();
        if state.returned.is_some_and(|at| at.elapsed() >= state.idle_limit) {
            state.renew(&self.inner.settings);
        }
        (state.agent.clone(), state.pool)
    }

    /// Drops `pool` (unless another request already did: then its successor is
    /// fresh enough) and returns the agent to send with now.
    fn retire(&self, pool: u64) -> ureq::Agent {
        let mut state = self.inner.state.lock().unwrap();
        if state.pool == pool {
            state.renew(&self.inner.settings);
        }
        state.agent.clone()
    }

    /// A response head arrived: note the server's idle timeout, and that its
    /// connection may be back in the pool (ureq pools a connection whose body it
    /// read with the head at once; a streamed body's connection is noted at its end).
    fn answered(&self, response: &ureq::Response) {
        let hint = response.header("Keep-Alive").and_then(keep_alive_timeout);
        let mut state = self.inner.state.lock().unwrap();
        if let Some(seconds) = hint {
            state.idle_limit = idle_limit(seconds);
        }
        if keeps_connection(response) && response.content_type() != "text/event-stream" {
            state.returned = Some(Instant::now());
        }
    }

    /// A body was read to its end: its connection is back in the pool now.
    fn returned(&self) {
        self.inner.state.lock().unwrap().returned = Some(Instant::now());
    }
}

/// A response body read through a [`PooledAgent`].
pub struct Body {
    reader: Box<dyn Read + Send + Sync + 'static>,
    /// The agent to tell when the body ends (taken then: told once).
    agent: Option<PooledAgent>,
}

impl Read for Body {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.reader.read(buf)?;
        if n == 0 && !buf.is_empty() {
            if let Some(agent) = self.agent.take() {
                agent.returned();
            }
        }
        Ok(n)
    }
}

fn build(settings: &AgentSettings) -> ureq::Agent {
    settings().resolver(NotingResolver).build()
}

/// Whether a transport error is a connection lost before the answer's first byte:
/// reset or closed (ureq reports an end of stream where the status line should be
/// as "connection aborted"), or the request could not be written whole.
fn lost_before_answer(t: &ureq::Transport) -> bool {
    if t.kind() != ureq::ErrorKind::Io {
        return false;
    }
    let Some(io) = std::error::Error::source(t).and_then(|e| e.downcast_ref::<io::Error>()) else {
        return false;
    };
    matches!(
        io.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

/// Whether the connection of `response` may go back to the pool (it is not
/// closed by `Connection: close`, nor an HTTP/1.0 answer without keep-alive).
fn keeps_connection(response: &ureq::Response) -> bool {
    let connection = response.header("Connection").unwrap_or("");
    let says = |token: &str| connection.split(',').any(|t| t.trim().eq_ignore_ascii_case(token));
    if response.http_version() == "HTTP/1.0" {
        return says("keep-alive");
    }
    !says("close")
}

/// The `timeout` parameter of a `Keep-Alive` header (`timeout=5, max=100`), in
/// seconds.
fn keep_alive_timeout(header: &str) -> Option<u64> {
    header.split(',').find_map(|part| {
        let (name, value) = part.split_once('=')?;
        name.trim().eq_ignore_ascii_case("timeout").then(|| value.trim().trim_matches('"').parse().ok()).flatten()
    })
}

/// How long to reuse a connection the server keeps for `seconds`: a second less
/// (half of it for very short timeouts), so the server never closes it under a
/// request.
fn idle_limit(seconds: u64) -> Duration {
    let ms = seconds.saturating_mul(1000);
    Duration::from_millis(ms.saturating_sub(1000).max(ms / 2))
}

#[cfg(test)]
mod tests;
