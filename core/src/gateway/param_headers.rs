//! The gateway's two sides of `Mcp-Param-*` headers (arguments a tool mirrors
//! into HTTP headers, see [`crate::param_headers`]): it checks them on a
//! stateless HTTP client's `tools/call` before routing it, and computes them for
//! a call it sends to a stateless backend, from that backend's own schema.

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::access::SessionView;
use super::backends::Backends;
use super::calls::ClientCall;
use crate::catalog::Catalog;
use crate::param_headers;
use crate::protocol::{self, RequestEra};

/// The members of `tools/call` params the headers mirror.
#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
}

impl CallParams<'_> {
    fn arguments(&self) -> Option<Value> {
        self.arguments.and_then(|a| serde_json::from_str(a.get()).ok())
    }
}

/// Checks the `Mcp-Param-*` headers that came with a `tools/call` over HTTP
/// (`received`, by lowercased name) against its arguments, by the served
/// tool's declarations. Only stateless-era requests are checked (the headers
/// belong to that revision), and nothing is done for a tool tether does not
/// know or one without declarations: calls of tools that mirror nothing cost
/// one look at the catalog. `Err` holds the `HeaderMismatch` message.
pub(super) fn check_param_headers(
    view: SessionView<'_>,
    catalog: &Catalog,
    params: Option<&str>,
    received: &BTreeMap<String, String>,
) -> Result<(), String> {
    if !catalog.mirrors_params() {
        return Ok(());
    }
    // Malformed params are the router's to refuse.
    let Some(call) = params.and_then(|p| serde_json::from_str::<CallParams<'_>>(p).ok()) else { return Ok(()) };
    let Some(tool) = view.tool(&call.name) else { return Ok(()) };
    let declared = &tool.entry.param_headers;
    if declared.is_empty() || protocol::request_era(params) == RequestEra::Handshake {
        return Ok(());
    }
    param_headers::check(declared, call.arguments().as_ref(), received)
}

/// The `Mcp-Param-*` headers of `call` to backend `server`, by the backend's
/// declarations for the tool (its own name for it, as in the frame), for a
/// stateless backend on HTTP: empty for anything else.
pub(super) fn param_headers_to(
    backends: &Backends,
    catalog: &Catalog,
    server: &str,
    call: &ClientCall,
) -> Vec<(String, String)> {
    if call.method != "tools/call" {
        return Vec::new();
    }
    let Some(catalog) = catalog.backend(server).filter(|c| c.mirrors_params()) else { return Vec::new() };
    let http = backends.get(server).is_some_and(|b| matches!(b.config.transport, crate::Transport::Http { .. }));
    if !http {
        return Vec::new();
    }
    let Ok(params) = serde_json::from_str::<CallParams<'_>>(call.params.body()) else { return Vec::new() };
    match catalog.tool(&params.name) {
        Some(tool) if !tool.param_headers.is_empty() => {
            param_headers::request_headers(&tool.param_headers, params.arguments().as_ref())
        }
        _ => Vec::new(),
    }
}
