//! The mock server ([`Mock`]): its shared state, and how a message from a client
//! becomes a served request: `dispatch` for the 2025-11-25 methods,
//! `dispatch_stateless` for the 2026-07-28 ones.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::{fs, process, thread};

use serde_json::{json, Value};

use crate::protocol::*;
use crate::tools::*;
use crate::{MockOptions, CRASH_EXIT_CODE, PROTOCOL_VERSION, STATELESS_PROTOCOL_VERSION};

/// The mock server: its options and the state all sessions share.
pub(crate) struct Mock {
    pub(crate) options: MockOptions,
    /// The built-in tools offered, in `tools/list` order.
    pub(crate) offered: Vec<Builtin>,
    pub(crate) tool_added: AtomicBool,
    tool_calls_answered: AtomicU64,
    /// Held while a tool call is answered and counted under --crash-after.
    crash_gate: std::sync::Mutex<()>,
    pub(crate) next_server_request: AtomicU64,
    /// The `requestState`s minted for `input_required` results (stateless mode),
    /// with the tool and arguments of the call each belongs to.
    pub(crate) minted_states: Mutex<HashMap<String, MintedFor>>,
    pub(crate) next_state: AtomicU64,
    /// The keep-alive period of an open listen.
    pub(crate) keep_alive: Duration,
}

impl Mock {
    /// Checks the options; `--tools` must name built-in tools only.
    pub(crate) fn new(options: MockOptions) -> io::Result<Self> {
        let available = Builtin::available(options.stateless);
        let offered = match &options.tools {
            None => available,
            Some(names) => names
                .iter()
                .map(|name| name.trim())
                .filter(|name| !name.is_empty())
                .map(|name| {
                    Builtin::from_name(name).filter(|tool| available.contains(tool)).ok_or_else(|| {
                        let known: Vec<_> = available.iter().map(|tool| tool.name()).collect();
                        io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("--tools: unknown tool `{name}` (built-in tools: {})", known.join(", ")),
                        )
                    })
                })
                .collect::<io::Result<_>>()?,
        };
        Ok(Mock {
            options,
            offered,
            tool_added: AtomicBool::new(false),
            tool_calls_answered: AtomicU64::new(0),
            crash_gate: std::sync::Mutex::new(()),
            next_server_request: AtomicU64::new(1),
            minted_states: Mutex::new(HashMap::new()),
            next_state: AtomicU64::new(1),
            keep_alive: KEEP_ALIVE,
        })
    }

    /// Takes one message from the client. Requests are served on a thread of their
    /// own, answering through `outlet`; notifications and responses are applied at
    /// once and `outlet` is dropped unused.
    pub(crate) fn receive(self: &Arc<Self>, session: &Arc<Session>, message: Incoming, outlet: Arc<dyn Outlet>) {
        match message {
            Incoming::Request { id, method, params } => {
                self.record(&method);
                // Registered before the thread starts, so a cancel that follows the
                // request finds it.
                let call = session.begin(&id);
                let (mock, session_for_thread) = (Arc::clone(self), Arc::clone(session));
                let (id_for_thread, outlet_for_thread) = (id.clone(), Arc::clone(&outlet));
                let call_for_thread = Arc::clone(&call);
                let spawned = thread::Builder::new().name("mock-request".to_string()).spawn(move || {
                    mock.serve(
                        &session_for_thread,
                        &id_for_thread,
                        &method,
                        &params,
                        &call_for_thread,
                        &outlet_for_thread,
                    )
                });
                if let Err(e) = spawned {
                    session.end(&id, &call);
                    outlet.finish(&error_response(&id, &RpcError::internal(format!("cannot start a thread: {e}"))));
                }
            }
            Incoming::Notification { method, params } => {
                self.record(&method);
                if method == "notifications/cancelled" {
                    if let Some(id) = params.get("requestId") {
                        session.cancel(id);
                    }
                }
            }
            Incoming::Response { id, outcome } => session.settle(&id, outcome),
        }
    }

    /// Serves one request on the current thread, to its end.
    fn serve(
        &self,
        session: &Session,
        id: &Value,
        method: &str,
        params: &Value,
        call: &Arc<Call>,
        outlet: &Arc<dyn Outlet>,
    ) {
        let is_tool_call = method == "tools/call";
        if is_tool_call {
            self.crash_if_calls_used_up();
        }
        let outcome = if self.options.stateless {
            self.dispatch_stateless(session, id, method, params, call, outlet)
        } else {
            self.dispatch(session, method, params, call, &**outlet)
        };
        let response = match outcome {
            Ok(result) => Some(success_response(id, result)),
            Err(Stop::Error(error)) => Some(error_response(id, &error)),
            Err(Stop::ToolError(text)) => {
                let mut result = text_result(text);
                result["isError"] = json!(true);
                if self.options.stateless {
                    result = complete_result(result);
                }
                Some(success_response(id, result))
            }
            Err(Stop::InputRequired(result)) => Some(success_response(id, result)),
            Err(Stop::Cancelled) => None,
        };
        // With --crash-after, answering, counting and exiting happen under one
        // lock: a call running beside the last one allowed is never answered by a
        // process that is about to exit.
        let _counting = (is_tool_call && self.options.crash_after.is_some())
            .then(|| self.crash_gate.lock().unwrap_or_else(|p| p.into_inner()));
        if _counting.is_some() {
            self.crash_if_calls_used_up();
        }
        if let Some(response) = &response {
            outlet.finish(response);
        }
        // Only now, so that draining a session waits for the response to be written.
        session.end(id, call);
        if is_tool_call && response.is_some() {
            self.tool_calls_answered.fetch_add(1, Ordering::SeqCst);
            self.crash_if_calls_used_up();
        }
    }

    /// Exits once `--crash-after` tool calls have been answered.
    fn crash_if_calls_used_up(&self) {
        if let Some(limit) = self.options.crash_after {
            if self.tool_calls_answered.load(Ordering::SeqCst) >= limit {
                eprintln!("{}: crashing after {limit} tool calls (--crash-after)", self.options.name);
                process::exit(CRASH_EXIT_CODE);
            }
        }
    }

    /// Appends `method` to the state file, if there is one.
    pub(crate) fn record(&self, method: &str) {
        let Some(path) = &self.options.state_file else { return };
        let line = format!("{}\n", method.escape_debug());
        let appended = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(e) = appended {
            eprintln!("{}: cannot append to {}: {e}", self.options.name, path.display());
        }
    }

    fn dispatch(
        &self,
        session: &Session,
        method: &str,
        params: &Value,
        call: &Arc<Call>,
        outlet: &dyn Outlet,
    ) -> Result<Value, Stop> {
        match method {
            "initialize" => self.initialize(session, params, call),
            "ping" if !self.options.no_ping => Ok(json!({})),
            "tools/list" => Ok(self.tool_page(params)),
            "tools/call" => self.call_tool(session, params, call, outlet, None),
            "resources/list" => Ok(resource_list()),
            "resources/templates/list" => Ok(resource_template_list()),
            "resources/read" => self.read_resource(params, RpcError::resource_not_found),
            "resources/subscribe" => {
                let uri = str_param(params, "uri")?;
                self.resource_text(uri).ok_or_else(|| RpcError::resource_not_found(uri))?;
                lock(&session.subscriptions).insert(uri.to_string());
                Ok(json!({}))
            }
            "resources/unsubscribe" => {
                lock(&session.subscriptions).remove(str_param(params, "uri")?);
                Ok(json!({}))
            }
            "prompts/list" => Ok(prompt_list()),
            "prompts/get" => get_prompt(params),
            "completion/complete" => complete(params),
            "logging/setLevel" => {
                let level = str_param(params, "level")?;
                let rank = LOG_LEVELS
                    .iter()
                    .position(|known| *known == level)
                    .ok_or_else(|| RpcError::invalid_params(format!("unknown log level `{level}`")))?;
                session.log_threshold.store(rank, Ordering::Relaxed);
                Ok(json!({}))
            }
            _ => Err(RpcError::method_not_found(method).into()),
        }
    }

    /// Serves one request of the stateless revision: `initialize` and unknown
    /// methods get -32601, then `_meta` is checked, then the method runs. Every
    /// result is marked complete; lists and reads carry caching hints.
    fn dispatch_stateless(
        &self,
        session: &Session,
        id: &Value,
        method: &str,
        params: &Value,
        call: &Arc<Call>,
        outlet: &Arc<dyn Outlet>,
    ) -> Result<Value, Stop> {
        if method == "initialize" {
            return Err(RpcError::initialize_refused().into());
        }
        if !STATELESS_METHODS.contains(&method) {
            return Err(RpcError::method_not_found(method).into());
        }
        let meta = RequestMeta::parse(params)?;
        let result = match method {
            "server/discover" => self.discover(call)?,
            "tools/list" => cacheable(self.tool_page(params)),
            "tools/call" => self.call_tool(session, params, call, &**outlet, Some(&meta))?,
            "resources/list" => cacheable(resource_list()),
            "resources/templates/list" => cacheable(resource_template_list()),
            "resources/read" => cacheable(self.read_resource(params, RpcError::unknown_resource)?),
            "prompts/list" => cacheable(prompt_list()),
            "prompts/get" => get_prompt(params)?,
            "completion/complete" => complete(params)?,
            "subscriptions/listen" => return Err(self.listen(session, id, params, call, outlet)),
            _ => return Err(RpcError::method_not_found(method).into()),
        };
        Ok(complete_result(result))
    }

    /// Answers `server/discover` (stateless mode), after `--init-delay-ms`.
    fn discover(&self, call: &Call) -> Result<Value, Stop> {
        call.pause(Duration::from_millis(self.options.init_delay_ms))?;
        Ok(cacheable(json!({
            "supportedVersions": [STATELESS_PROTOCOL_VERSION],
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
                "logging": {},
            },
            "instructions": INSTRUCTIONS,
            "_meta": {META_SERVER_INFO: {"name": self.options.name, "version": "1"}},
        })))
    }

    /// `subscriptions/listen` (stateless mode): acknowledges the notifications it
    /// honours, then holds the request open, never to be answered, until the
    /// client cancels it (stdio) or goes away (HTTP). Resource subscriptions are
    /// honoured for the URIs that can be read.
    fn listen(
        &self,
        session: &Session,
        id: &Value,
        params: &Value,
        call: &Arc<Call>,
        outlet: &Arc<dyn Outlet>,
    ) -> Stop {
        let mut filter = match ListenFilter::parse(params) {
            Ok(filter) => filter,
            Err(error) => return error.into(),
        };
        if let Some(uris) = &mut filter.resource_subscriptions {
            uris.retain(|uri| self.resource_text(uri).is_some());
        }
        let acknowledgement = notification(
            "notifications/subscriptions/acknowledged",
            json!({"_meta": {META_SUBSCRIPTION_ID: id}, "notifications": filter.to_json()}),
        );
        let listen = Listen { id: id.clone(), filter, call: Arc::clone(call), outlet: Arc::clone(outlet) };
        session.open_listen(listen, &acknowledgement);
        let stop = self.hold_open(call, &**outlet);
        session.close_listen(call);
        stop
    }

    /// Waits until the call is cancelled or its client is gone, sending a
    /// keep-alive every [`Mock::keep_alive`].
    fn hold_open(&self, call: &Call, outlet: &dyn Outlet) -> Stop {
        loop {
            if let Err(stop) = call.pause(self.keep_alive) {
                return stop;
            }
            if !outlet.keep_alive() {
                return Stop::Cancelled;
            }
        }
    }

    /// Answers `initialize`, once per session, after `--init-delay-ms`.
    fn initialize(&self, session: &Session, params: &Value, call: &Call) -> Result<Value, Stop> {
        if session.initialized.swap(true, Ordering::SeqCst) {
            return Err(RpcError::invalid_request("already initialized").into());
        }
        call.pause(Duration::from_millis(self.options.init_delay_ms))?;
        let requested = params.get("protocolVersion").and_then(Value::as_str);
        let version = requested.filter(|v| SUPPORTED_VERSIONS.contains(v)).unwrap_or(PROTOCOL_VERSION);
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": false},
                "prompts": {"listChanged": false},
                "completions": {},
                "logging": {},
            },
            "serverInfo": {"name": self.options.name, "version": env!("CARGO_PKG_VERSION")},
            "instructions": INSTRUCTIONS,
        }))
    }
}
