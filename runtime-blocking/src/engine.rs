//! The engine driver behind a lock: whichever thread has an input (a backend's
//! reader, the client's stdin reader, an embedder's thread) takes the lock,
//! feeds the [`Driver`] (which executes the actions the core returns in place),
//! then lets go. A timer thread sleeps until the core's next deadline and feeds
//! it `Tick`.
//!
//! So a frame crosses no thread boundary inside tether: the thread that read it
//! from one pipe writes the result to the next (non-blocking writes; whatever
//! could block goes to a writer thread). Two things are not done in place:
//! processes are started by a long-lived spawner thread (a child's parent-death
//! signal is tied to the thread that forked it), and inputs raised while the lock
//! is held (a stdin overflow, a step the credentials take at once) are queued and
//! fed right after.
//!
//! Nothing here decides anything; it moves bytes and time.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;

use tether_core::{BackendStatus, ClientRoute, Event, Gateway, Input, SessionId};
use tether_host::backlog::Backlog;
use tether_host::clock::Clock;
use tether_host::driver::{Connection, Driver, Place, Runtime};
use tether_host::http_backend::{InputSink, Spawner};
use tether_host::lifecycle::{stop_blocking, sweep, Ladder};
use tether_host::recorder::Recorder;

use crate::stdio_backend::{start_process, InputPort, Launch, Started, StdioBackend};

/// Where one client session's frames go. Called with the engine locked, on
/// whichever thread fed the input: hand the frame on, never call back into the host.
pub type ClientSink = Box<dyn FnMut(String, &ClientRoute) + Send>;

/// Called with every event the core emits, with the engine locked, on whichever
/// thread fed the input: keep it short, never call back into the host.
pub type EventSink = Box<dyn FnMut(&Event) + Send>;

thread_local! {
    /// This thread holds the engine lock (inputs it raises are queued).
    static IN_ENGINE: Cell<bool> = const { Cell::new(false) };
}

/// A process to start, and where to send it (or the error).
type SpawnRequest = (Box<dyn FnOnce() -> std::io::Result<Started> + Send>, SyncSender<std::io::Result<Started>>);

/// The engine and everything it drives.
pub(crate) struct Engine {
    state: Mutex<State>,
    /// Wakes the timer thread when the next deadline moved earlier or on stop.
    timer: Condvar,
    /// Inputs raised by the thread holding the lock, fed before it lets go.
    raised: Mutex<Vec<Input>>,
    spawner: Mutex<Option<SyncSender<SpawnRequest>>>,
    /// The output backlogs of bounded clients: backend readers wait for room in
    /// each before handing on a frame.
    outflows: Mutex<HashMap<SessionId, Arc<Backlog>>>,
}

struct State {
    driver: Driver<ThreadIo>,
    /// The deadline the timer thread sleeps until (`None`: no deadline).
    timer_at: Option<tether_core::Instant>,
    stopping: bool,
}

/// The I/O this runtime does for the [`Driver`].
struct ThreadIo {
    /// The engine itself, for the threads the actions start.
    engine: Weak<Engine>,
    on_event: Option<EventSink>,
    clients: HashMap<SessionId, ClientSink>,
}

/// How backend threads (and everyone else) hand inputs to the engine.
#[derive(Clone)]
pub struct InputSender(pub(crate) Weak<Engine>);

impl InputSender {
    /// Feeds an input; `false` once the host has stopped.
    pub fn send(&self, input: Input) -> bool {
        self.0.upgrade().is_some_and(|engine| engine.feed(input))
    }

    /// Waits until every bounded client's output backlog has room (never call
    /// it with the engine locked).
    pub fn wait_room(&self) {
        let Some(engine) = self.0.upgrade() else { return };
        let full: Vec<Arc<Backlog>> = {
            let outflows = engine.outflows.lock().unwrap_or_else(|p| p.into_inner());
            outflows.values().filter(|o| o.is_full()).cloned().collect()
        };
        drop(engine);
        for outflow in full {
            outflow.wait_room();
        }
    }
}

impl InputPort for InputSender {
    fn send(&self, input: Input) -> bool {
        InputSender::send(self, input)
    }

    fn wait_room(&self) {
        InputSender::wait_room(self);
    }
}

/// The threads an engine runs besides its callers'.
pub(crate) struct EngineThreads {
    timer: JoinHandle<()>,
    spawner: JoinHandle<()>,
}

impl Engine {
    /// Wraps `gw` and starts the timer and spawner threads.
    pub fn start(
        gw: Gateway,
        clock: Clock,
        record: Option<Recorder>,
        on_event: Option<EventSink>,
        credentials: tether_host::credentials::Credentials,
    ) -> std::io::Result<(Arc<Engine>, EngineThreads)> {
        let (spawn_tx, spawn_rx) = sync_channel::<SpawnRequest>(0);
        let engine = Arc::new_cyclic(|engine: &Weak<Engine>| {
            let io = ThreadIo { engine: engine.clone(), on_event, clients: HashMap::new() };
            let mut driver = Driver::new(gw, clock, io);
            driver.set_credentials(credentials);
            if let Some(record) = record {
                driver.set_recorder(record);
            }
            Engine {
                state: Mutex::new(State { driver, timer_at: None, stopping: false }),
                timer: Condvar::new(),
                raised: Mutex::new(Vec::new()),
                spawner: Mutex::new(Some(spawn_tx)),
                outflows: Mutex::new(HashMap::new()),
            }
        });
        let spawner = std::thread::Builder::new().name("tether-spawn".into()).spawn(move || spawn_loop(spawn_rx))?;
        let e = engine.clone();
        let timer = std::thread::Builder::new().name("tether-timer".into()).spawn(move || e.timer_loop())?;
        // The start-up actions (spawns, connects) run now, on this thread.
        engine.with_state(|_| {});
        Ok((engine, EngineThreads { timer, spawner }))
    }

    /// Feeds one input and executes the actions; `false` once stopped.
    pub fn feed(self: &Arc<Self>, input: Input) -> bool {
        if IN_ENGINE.with(Cell::get) {
            self.raised.lock().expect("raised inputs").push(input);
            return true;
        }
        let mut fed = true;
        self.with_state(|state| {
            if state.stopping {
                fed = false;
            } else {
                state.driver.feed(input);
            }
        });
        fed
    }

    /// Opens a client session whose frames go to `sink`; with an `outflow`
    /// (the bytes `sink` has queued and not yet delivered), backend readers wait
    /// while it is full.
    pub fn attach(self: &Arc<Self>, session: SessionId, sink: ClientSink, outflow: Option<Arc<Backlog>>) {
        if let Some(outflow) = outflow {
            self.outflows.lock().unwrap_or_else(|p| p.into_inner()).insert(session, outflow);
        }
        self.with_state(|state| {
            state.driver.runtime.clients.insert(session, sink);
            state.driver.feed(Input::ClientConnected { session, expires: false });
        });
    }

    /// Every backend's status now.
    pub fn statuses(&self) -> Vec<BackendStatus> {
        self.lock().driver.gateway().statuses()
    }

    /// The `/status` document now (see [`tether_host::status_document`]).
    pub fn status_document(&self) -> serde_json::Value {
        let state = self.lock();
        let driver = &state.driver;
        tether_host::status_document::document(driver.gateway(), driver.clock().now().as_millis())
    }

    /// The last `lines` of a backend's recent log (`None`: no such backend).
    pub fn recent_log(&self, server: &str, lines: usize) -> Option<Vec<tether_core::LogLine>> {
        self.lock().driver.gateway().recent_log(server, lines)
    }

    /// Runs `f` with the engine locked, then executes pending actions and feeds
    /// the inputs raised meanwhile, and wakes the timer if its deadline moved.
    fn with_state(self: &Arc<Self>, f: impl FnOnce(&mut State)) {
        let mut state = self.lock();
        IN_ENGINE.with(|c| c.set(true));
        f(&mut state);
        loop {
            state.driver.run(Place::Home);
            let raised = std::mem::take(&mut *self.raised.lock().expect("raised inputs"));
            if raised.is_empty() {
                break;
            }
            for input in raised {
                state.driver.feed(input);
            }
        }
        IN_ENGINE.with(|c| c.set(false));
        let next = state.driver.gateway().poll_timeout();
        if next.is_some() && (state.timer_at.is_none() || next < state.timer_at) {
            self.timer.notify_one();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Sleeps until the core's next deadline (or a wake-up), then feeds `Tick`.
    fn timer_loop(self: Arc<Self>) {
        let mut state = self.lock();
        loop {
            if state.stopping {
                return;
            }
            let next = state.driver.gateway().poll_timeout();
            state.timer_at = next;
            let Some(deadline) = next else {
                state = self.timer.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            let wait = state.driver.clock().at(deadline).saturating_duration_since(std::time::Instant::now());
            if wait.is_zero() {
                drop(state);
                self.feed(Input::Tick);
                state = self.lock();
                continue;
            }
            state = self.timer.wait_timeout(state, wait).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Starts a process on the spawner thread and waits for it.
    fn start_process(&self, launch: &Launch<'_>) -> std::io::Result<Started> {
        let spawner = self.spawner.lock().expect("spawner").clone();
        let Some(spawner) = spawner else { return Err(std::io::Error::other("the host is stopping")) };
        let (command, lineage) = launch.command();
        let job = Box::new(move || start_process(command, lineage));
        let (tx, rx) = sync_channel(1);
        spawner.send((job, tx)).map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
        rx.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
    }

    /// Stops every backend: stdin closed, then SIGTERM, then SIGKILL to each
    /// process tree, waiting up to a second after each, then whatever is left
    /// of the trees; HTTP sessions are deleted. Joins the timer and spawner
    /// threads and the waiters of every process that is gone.
    pub fn shutdown(self: &Arc<Self>, threads: EngineThreads) {
        let connections = {
            let mut state = self.lock();
            state.stopping = true;
            state.driver.runtime.clients.clear();
            state.driver.take_connections()
        };
        self.timer.notify_all();
        self.spawner.lock().expect("spawner").take();
        let mut processes = Vec::new();
        for connection in connections {
            match connection {
                Connection::Stdio(mut b) => {
                    b.close_stdin();
                    processes.push(b);
                }
                Connection::Http(b) => b.close(),
            }
        }
        stop_blocking(&mut processes, Ladder::shutdown());
        sweep(&processes);
        for b in processes {
            if b.has_exited() {
                b.join();
            }
        }
        let _ = threads.timer.join();
        let _ = threads.spawner.join();
    }
}

impl ThreadIo {
    fn inputs(&self) -> InputSender {
        InputSender(self.engine.clone())
    }

    fn spawn_thread(name: &'static str) -> Spawner {
        Arc::new(move |job| {
            if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(job) {
                tracing::error!("cannot start an {name} thread: {e}");
            }
        })
    }
}

impl Runtime for ThreadIo {
    type Stdio = StdioBackend;

    fn start_stdio(&mut self, launch: Launch<'_>) -> (Option<StdioBackend>, Input) {
        let started = match self.engine.upgrade() {
            Some(engine) => engine.start_process(&launch),
            None => Err(std::io::Error::other("the host is stopping")),
        };
        StdioBackend::attach(launch, started, &(Arc::new(self.inputs()) as _))
    }

    /// Called on the backend's own threads: a frame waits there while a
    /// client's output backlog is full.
    fn http_inputs(&self) -> InputSink {
        let inputs = self.inputs();
        Arc::new(move |input| {
            if matches!(input, Input::BackendFrame { .. } | Input::BackendEvent { .. }) {
                inputs.wait_room();
            }
            inputs.send(input)
        })
    }

    fn auth_inputs(&self) -> InputSink {
        let inputs = self.inputs();
        Arc::new(move |input| inputs.send(input))
    }

    fn spawner(&self, purpose: &'static str) -> Spawner {
        ThreadIo::spawn_thread(purpose)
    }

    fn deliver(&mut self, session: SessionId, route: ClientRoute, frame: String, _burst: bool) {
        if let Some(sink) = self.clients.get_mut(&session) {
            sink(frame, &route);
        }
    }

    fn close_client(&mut self, session: SessionId) {
        self.clients.remove(&session);
        if let Some(engine) = self.engine.upgrade() {
            engine.outflows.lock().unwrap_or_else(|p| p.into_inner()).remove(&session);
        }
    }

    fn emit(&mut self, event: Event) {
        if let Some(on_event) = self.on_event.as_mut() {
            on_event(&event);
        }
    }
}

/// Starts processes for the engine until the engine is dropped.
fn spawn_loop(requests: Receiver<SpawnRequest>) {
    while let Ok((job, reply)) = requests.recv() {
        let _ = reply.send(job());
    }
}
