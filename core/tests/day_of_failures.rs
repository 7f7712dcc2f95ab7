//! A day of failures: 50 backends (stdio and HTTP), 24 simulated hours, a client
//! calling tools throughout, and a world that crashes, hangs, refuses, rejects
//! credentials, answers 5xx, slows down, hibernates and reloads the config.
//!
//! Ten of the HTTP backends are OAuth-managed (`oauth: true`). For them the world
//! plays the host, the authorization server and the person: access tokens live a
//! few minutes (some servers do not say how long, some expire them early), every
//! refresh rotates the refresh token, the token endpoint goes down for a while,
//! grants are revoked, and a person logs in again (in the browser the engine asks
//! for, or with `tether auth login` in a terminal, which lands in the store).
//!
//! After every input the engine's invariants must hold; at the end every call
//! has exactly one answer. Every call that no fault, crash, token problem or
//! sleep excuses (from `SETTLE` before it began until its answer) succeeds; each
//! recovery stays within the bound the design promises for its fault (see
//! `recovery_bound`); and once the world heals, every backend is online again
//! within the longest of those bounds. For the OAuth backends the world also checks the
//! credential rules: one refresh in flight per backend, each presenting the newest
//! (rotated) refresh token; after `invalid_grant` the credential is discarded at
//! once, nothing is sent with it again and no refresh is tried until a new token
//! arrives, and the backend waits in `requires_reauth` for the person; no backend
//! asks for a person while the host holds a live token; and a call to a backend
//! whose server works and whose grant is alive never fails because its token
//! expired (it waits for the refresh and is resent once).
//!
//! A summary per seed is printed (`cargo test -- --nocapture`).
//! `SIM_SEEDS=N cargo test --release -p tether-core --test day_of_failures -- --nocapture`
//! runs more seeds.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use tether_core::credential::{AuthStep, Challenge, CredentialFailure, CredentialUpdate};
use tether_core::{
    Action, AdminCommand, Config, Failure, Gateway, Input, Instant, Rng, ServerConfig, ServerName, SessionId, Status,
};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;
const CLIENT: SessionId = SessionId(1);
/// How long after a disturbance of an OAuth backend (a fault, an outage of its
/// token endpoint, a revocation, a login, a reconnect by the user) its calls are
/// not held to the rule that they succeed: longer than the longest reconnect wait
/// (180 s + 10 %) and a breaker cooldown. Calls in flight across a hibernation are
/// not held to it either; calls made after waking (with tokens that expired in
/// the sleep) are.
const SETTLE: u64 = 10 * MINUTE;

/// What is wrong with a backend right now, as the world sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// The process crashed once (stdio).
    Crash,
    /// The next process crashes at once on start (stdio), until `until`.
    CrashLoop,
    /// Requests are never answered.
    Hang,
    /// Connections are refused (HTTP).
    Refuse,
    /// Credentials rejected until an operator reconnects (HTTP with static headers).
    Auth,
    /// Every request answered with HTTP 503.
    ServerError,
    /// Answers take 20 s.
    Slow,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::CrashLoop => "crash loop",
            Fault::Hang => "hang",
            Fault::Refuse => "refused",
            Fault::Auth => "401",
            Fault::ServerError => "5xx",
            Fault::Slow => "slow",
        }
    }
}

/// What the world will deliver to the gateway later.
enum Due {
    /// A frame from the backend.
    Frame(String),
    /// The process exits.
    Exit,
    /// A transport failure of one request.
    Failed(u64, Failure),
    /// The host reports on a credential.
    Update(CredentialUpdate),
    /// The token endpoint answers the refresh or obtain in flight.
    TokenAnswer,
    /// The person finished the browser login with this number.
    LoginDone(u64),
    /// The person gave up on the browser login with this number (it times out).
    LoginAbandoned(u64),
    /// The person ran `tether auth login` in a terminal: the store has a token.
    TerminalLogin,
}

/// An access token as the host holds it and the resource server judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Token {
    /// The login it descends from.
    grant: u64,
    /// The refresh token that comes with it (rotated on every refresh).
    refresh: u64,
    /// When the authorization server says it expires.
    expires_at: u64,
}

/// One OAuth-managed backend's credential, as the world sees it: its
/// authorization server, what the host holds and stores, and what is in flight.
struct Account {
    /// Access token lifetime.
    lifetime: u64,
    /// Whether token answers carry `expires_in`.
    says_expiry: bool,
    /// The resource server treats tokens as expired this long before they say.
    skew: u64,
    /// Authorization server: the newest grant (a login makes one).
    grant: u64,
    /// Authorization server: that grant was revoked.
    revoked: bool,
    /// Authorization server: the only refresh token it accepts now.
    newest_refresh: u64,
    /// Authorization server: the token endpoint fails until then.
    outage_until: u64,
    /// Host: the credential in memory, put on every request.
    held: Option<Token>,
    /// Host: the credential in the store.
    stored: Option<Token>,
    /// The refresh (or obtain) in flight: the refresh token it presented.
    token_call: Option<Option<u64>>,
    /// The browser login prepared and not finished, by number (a new one
    /// replaces it, as the host does).
    login: Option<u64>,
    /// Logins prepared so far.
    logins: u64,
    /// The engine asked for a login and has heard neither a token nor a failure since.
    engine_awaits_login: bool,
    /// The engine was told this grant is dead and has not had a new token since.
    dead: Option<u64>,
    /// An `invalid_grant` was just reported: the engine must discard.
    expect_discard: bool,
}

/// The credential numbers of one day.
#[derive(Default)]
struct OauthCounts {
    loads: u64,
    refreshes: u64,
    refreshed: u64,
    obtains: u64,
    unavailable: u64,
    invalid_grants: u64,
    discards: u64,
    login_steps: u64,
    logins: u64,
    terminal_logins: u64,
    abandoned: u64,
    revocations: u64,
    outages: u64,
    /// Requests the resource server refused because the token had expired.
    expired_401: u64,
    /// Requests refused because there was no token or its grant was revoked.
    other_401: u64,
    /// Client calls that met an expired token, and of them those that succeeded.
    calls_expired: u64,
    calls_expired_ok: u64,
    /// Client calls to OAuth backends held to the rule that they succeed.
    clean_calls: u64,
    /// Calls resent with a new token after a refusal.
    resent: u64,
    /// Admin reconnects of OAuth backends.
    user_reconnects: u64,
    /// Browser logins whose end reached the engine after a token from the store.
    raced_logins: u64,
}

/// One client call.
struct CallRecord {
    server: ServerName,
    start: u64,
    answers: u32,
    /// Sends to the backend so far.
    sends: u32,
    /// One of its sends was refused because the token had expired.
    expired: bool,
    /// The backend was undisturbed when the call began.
    clean_start: bool,
}

struct World {
    gw: Gateway,
    rng: Rng,
    now: u64,
    names: Vec<ServerName>,
    stdio: BTreeSet<ServerName>,
    accounts: BTreeMap<ServerName, Account>,
    gens: BTreeMap<ServerName, tether_core::Generation>,
    faults: BTreeMap<ServerName, (Fault, u64)>,
    /// What the world will deliver later: (time, server, generation, what).
    pending: Vec<(u64, ServerName, tether_core::Generation, Due)>,
    next_call: u64,
    calls: BTreeMap<u64, CallRecord>,
    answered_ok: u64,
    answered_err: u64,
    /// When each fault ended, per backend, waiting for the backend to be online again.
    recovering: BTreeMap<ServerName, (Fault, u64)>,
    recovery: BTreeMap<&'static str, Vec<u64>>,
    crashes: u64,
    gave_up: BTreeSet<ServerName>,
    reloads: u64,
    hibernations: u64,
    /// Calls are held to the success rule only when they begin at or after this
    /// time (the last disturbance of their backend plus [`SETTLE`]).
    quiet_after: BTreeMap<ServerName, u64>,
    oauth: OauthCounts,
    /// Calls held to the success rule.
    clean_calls: u64,
    /// Recoveries that took longer than the design promises.
    slow_recoveries: Vec<String>,
    /// When the world healed at the end of the day.
    healed_at: u64,
    /// Backends not online within the recovery bound after the world healed.
    down_after_healing: Vec<String>,
    /// Calls that failed although nothing excused it.
    broken: Vec<String>,
}

impl World {
    fn new(seed: u64) -> World {
        let mut config = Config::default();
        let mut names = Vec::new();
        let mut stdio = BTreeSet::new();
        let mut accounts = BTreeMap::new();
        let mut rng = Rng::new(seed);
        for i in 0..50 {
            let name = format!("s{i:02}");
            let server = if i % 5 < 3 {
                stdio.insert(name.as_str().into());
                ServerConfig::stdio("mock", &[&name])
            } else {
                let mut server = ServerConfig::http(&format!("https://{name}.example/mcp"));
                if i % 5 == 4 {
                    server.oauth = true;
                    let lifetime = [2, 5, 10, 15, 30][(rng.next_u64() % 5) as usize] * MINUTE;
                    let says_expiry = rng.next_u64() % 10 < 7;
                    let skew =
                        if rng.next_u64() % 2 == 0 { 0 } else { (30_000 + rng.next_u64() % 90_000).min(lifetime / 2) };
                    // The first one has never been logged in to: a person must. The
                    // second one's stored token expired while tether was not running.
                    let expires_at = if i == 9 { 0 } else { lifetime };
                    let stored = (i != 4).then_some(Token { grant: 1, refresh: 1, expires_at });
                    accounts.insert(
                        name.as_str().into(),
                        Account {
                            lifetime,
                            says_expiry,
                            skew,
                            grant: 1,
                            revoked: false,
                            newest_refresh: 1,
                            outage_until: 0,
                            held: None,
                            stored,
                            token_call: None,
                            login: None,
                            logins: 0,
                            engine_awaits_login: false,
                            dead: None,
                            expect_discard: false,
                        },
                    );
                }
                server
            };
            config.servers.insert(name.clone(), server);
            names.push(name.into());
        }
        let gw = Gateway::new(config, seed, Instant::ZERO).expect("config");
        let mut w = World {
            gw,
            rng,
            now: 0,
            names,
            stdio,
            accounts,
            gens: BTreeMap::new(),
            faults: BTreeMap::new(),
            pending: Vec::new(),
            next_call: 100,
            calls: BTreeMap::new(),
            answered_ok: 0,
            answered_err: 0,
            recovering: BTreeMap::new(),
            recovery: BTreeMap::new(),
            crashes: 0,
            gave_up: BTreeSet::new(),
            reloads: 0,
            hibernations: 0,
            quiet_after: BTreeMap::new(),
            oauth: OauthCounts::default(),
            clean_calls: 0,
            slow_recoveries: Vec::new(),
            healed_at: 0,
            down_after_healing: Vec::new(),
            broken: Vec::new(),
        };
        w.drain();
        w.input(Input::ClientFrame {
            session: CLIENT,
            frame: r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}"#.into(),
            param_headers: None,
        });
        w.input(Input::ClientFrame {
            session: CLIENT,
            frame: r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(),
            param_headers: None,
        });
        w
    }

    fn fault(&self, server: &str) -> Option<Fault> {
        self.faults.get(server).filter(|(_, until)| *until > self.now).map(|(f, _)| *f)
    }

    fn input(&mut self, input: Input) {
        self.gw.handle(Instant::from_millis(self.now), input).expect("host contract");
        self.drain();
    }

    fn drain(&mut self) {
        let mut actions = Vec::new();
        while let Some(a) = self.gw.poll_action() {
            actions.push(a);
        }
        if let Err(e) = self.gw.check_invariants() {
            panic!("invariant broken at {} ms: {e}", self.now);
        }
        for a in actions {
            self.react(a);
        }
        self.note_recoveries();
    }

    /// The world's answer to what the gateway asks of it.
    fn react(&mut self, action: Action) {
        match action {
            Action::Spawn { server, generation, .. } => {
                self.gens.insert(server.clone(), generation);
                if self.fault(&server) == Some(Fault::CrashLoop) {
                    self.crashes += 1;
                    self.pending.push((self.now + 50, server, generation, Due::Exit));
                }
            }
            Action::ConnectHttp { server, generation, .. } => {
                self.gens.insert(server, generation);
            }
            Action::SendToBackend { server, generation, frame, request, .. } => {
                let v: Value = serde_json::from_str(&frame).unwrap();
                let presented = self.presented(&server);
                let Some(id) = request else { return };
                let method = v["method"].as_str().unwrap_or("").to_string();
                let call = v["params"]["arguments"]["call"].as_u64();
                if let Some(record) = call.and_then(|c| self.calls.get_mut(&c)) {
                    record.sends += 1;
                    if record.sends > 1 && record.expired {
                        self.oauth.resent += 1;
                    }
                }
                let fault = self.fault(&server);
                let http = !self.stdio.contains(&server);
                let refusal = |error: &str| Failure::Unauthorized {
                    status: 401,
                    challenge: Challenge { error: Some(error.into()), ..Challenge::default() },
                };
                let (delay, answer) = match fault {
                    Some(Fault::Hang) => return,
                    Some(Fault::Refuse) if http => (5, Due::Failed(id, Failure::Refused)),
                    Some(Fault::Auth) if http => (20, Due::Failed(id, Failure::Http { status: 401 })),
                    Some(Fault::ServerError) if http => (20, Due::Failed(id, Failure::Http { status: 503 })),
                    _ if presented == Some(Presented::Expired) => {
                        self.oauth.expired_401 += 1;
                        if let Some(record) = call.and_then(|c| self.calls.get_mut(&c)) {
                            record.expired = true;
                        }
                        (20, Due::Failed(id, refusal("invalid_token")))
                    }
                    _ if matches!(presented, Some(Presented::Dead | Presented::None)) => {
                        self.oauth.other_401 += 1;
                        (20, Due::Failed(id, refusal("invalid_token")))
                    }
                    Some(Fault::Slow) => (20_000, Due::Frame(self.result(id, &method))),
                    _ => (5 + self.rng.next_u64() % 200, Due::Frame(self.result(id, &method))),
                };
                self.pending.push((self.now + delay, server, generation, answer));
            }
            Action::SendToClient { frame, .. } => {
                let v: Value = serde_json::from_str(&frame).unwrap();
                if v.get("method").is_some() {
                    return;
                }
                let Some(id) = v["id"].as_u64() else { return };
                if let Some(record) = self.calls.get_mut(&id) {
                    record.answers += 1;
                    let ok = v.get("error").is_none();
                    if ok {
                        self.answered_ok += 1;
                    } else {
                        self.answered_err += 1;
                    }
                    self.judge_call(id, ok, &v);
                }
            }
            Action::Emit { event: tether_core::Event::ServerPermanentlyFailed { server, crashes, window_ms } } => {
                // The design's crash limit: three crashes within five minutes.
                assert_eq!(
                    (crashes, window_ms),
                    (3, 300_000),
                    "{server} gave up at {} ms after {crashes} crashes in {window_ms} ms; the design says 3 in 5 min",
                    self.now
                );
                self.gave_up.insert(server);
            }
            Action::Emit {
                event: tether_core::Event::ServerStatusChanged { server, to: Status::RequiresReauth, message, .. },
            } => {
                // From here it waits for a person, not for tether: no recovery
                // bound holds for it.
                self.recovering.remove(&server);
                // A person is asked for only when no live token is at hand.
                if let Some(acct) = self.accounts.get(&server) {
                    if let Some(t) = acct.held.filter(|t| !(acct.revoked && t.grant == acct.grant)) {
                        assert!(
                            self.now >= t.expires_at,
                            "{server}: requires_reauth at {} ms while the host holds a token of live grant {} \
                             that lasts until {} ms ({message:?})",
                            self.now,
                            t.grant,
                            t.expires_at
                        );
                    }
                }
            }
            Action::Authorize { server, step } => self.authorize(server, step),
            _ => {}
        }
    }

    /// What the host puts on a request to `server` now, as its resource server
    /// judges it (`None` for a backend without a managed credential). Nothing may
    /// go out with a credential the engine was told is dead.
    fn presented(&self, server: &str) -> Option<Presented> {
        let acct = self.accounts.get(server)?;
        let Some(token) = acct.held else { return Some(Presented::None) };
        if acct.dead == Some(token.grant) {
            panic!(
                "{server}: a request went out at {} ms with the credential of revoked grant {}",
                self.now, token.grant
            );
        }
        Some(if acct.revoked && token.grant == acct.grant {
            Presented::Dead
        } else if self.now + acct.skew >= token.expires_at {
            Presented::Expired
        } else {
            Presented::Valid
        })
    }

    /// A call to an OAuth backend was answered: unless something excuses it, it
    /// must have succeeded (an expired token is no excuse).
    /// A call is held to succeeding when nothing excuses a failure: no fault of
    /// its backend (nor a crash, a token problem, a hibernation) from `SETTLE`
    /// before it began until its answer.
    fn judge_call(&mut self, id: u64, ok: bool, answer: &Value) {
        let record = &self.calls[&id];
        let server = record.server.clone();
        let clean = record.clean_start
            && !self.disturbed(&server)
            && self.quiet_after.get(&server).copied().unwrap_or(0) <= record.start;
        let oauth = self.accounts.contains_key(&server);
        if record.expired {
            self.oauth.calls_expired += 1;
            if ok {
                self.oauth.calls_expired_ok += 1;
            }
        }
        if clean {
            self.clean_calls += 1;
            if oauth {
                self.oauth.clean_calls += 1;
            }
            if !ok {
                self.broken.push(format!(
                    "call {id} to {server} (began at {} ms, sent {} times, met an expired token: {}) failed at {} ms: {}",
                    record.start, record.sends, record.expired, self.now, answer["error"]
                ));
            }
        }
    }

    /// Whether something other than token expiry stands in the way of `server`'s
    /// calls now: a fault, its token endpoint being down, or its grant being gone.
    fn disturbed(&self, server: &str) -> bool {
        let Some(acct) = self.accounts.get(server) else { return self.fault(server).is_some() };
        self.fault(server).is_some()
            || acct.outage_until > self.now
            || acct.held.is_none()
            || (acct.revoked && acct.held.is_some_and(|t| t.grant == acct.grant))
            || acct.login.is_some()
            || acct.dead.is_some()
    }

    fn quiet_after_at_least(&mut self, server: &str, at: u64) {
        let q = self.quiet_after.entry(server.into()).or_insert(0);
        *q = (*q).max(at);
    }

    /// The host carries out a credential step.
    fn authorize(&mut self, server: ServerName, step: AuthStep) {
        let now = self.now;
        let delay = 20 + self.rng.next_u64() % 480;
        let person = self.rng.next_u64();
        let Some(acct) = self.accounts.get_mut(&server) else { panic!("{server}: credential step {step} unasked") };
        match step {
            AuthStep::Load => {
                // The store is read at once: the connection that follows uses it.
                self.oauth.loads += 1;
                acct.held = acct.stored;
                if acct.stored.is_some() && acct.login.is_some() {
                    // A login made elsewhere: the host ends the one it prepared, which
                    // then reports nothing, unless its end was already on its way.
                    if person % 10 == 0 {
                        self.oauth.raced_logins += 1;
                    } else {
                        acct.login = None;
                    }
                }
                let update = match acct.stored {
                    Some(t) => CredentialUpdate::Ready {
                        expires_in_ms: acct.says_expiry.then(|| t.expires_at.saturating_sub(now)),
                        refreshable: true,
                        scope: Some("mcp".into()),
                    },
                    None => CredentialUpdate::Missing,
                };
                self.pending.push((now, server, tether_core::Generation(0), Due::Update(update)));
            }
            AuthStep::Refresh | AuthStep::Obtain { .. } => {
                if matches!(step, AuthStep::Refresh) {
                    self.oauth.refreshes += 1;
                } else {
                    self.oauth.obtains += 1;
                }
                if let Some(presented) = acct.token_call {
                    panic!(
                        "{server}: {step} at {now} ms while another token request (refresh token {presented:?}) is in flight"
                    );
                }
                if let Some(dead) = acct.dead {
                    assert!(
                        !matches!(step, AuthStep::Refresh),
                        "{server}: refresh at {now} ms after the engine was told grant {dead} is dead"
                    );
                }
                acct.token_call = Some(acct.held.map(|t| t.refresh));
                // A token endpoint that is down answers slowly (a timeout) or with a 503.
                let delay = if acct.outage_until > now { 1_000 + person % 9_000 } else { delay };
                self.pending.push((now + delay, server, tether_core::Generation(0), Due::TokenAnswer));
            }
            AuthStep::Login { .. } => {
                self.oauth.login_steps += 1;
                assert!(!acct.engine_awaits_login, "{server}: a second login at {now} ms while one is pending");
                acct.engine_awaits_login = true;
                acct.logins += 1;
                let login = acct.logins;
                acct.login = Some(login);
                let url = format!("https://as.{server}.example/authorize?state={now}");
                self.pending.push((
                    now + 50,
                    server.clone(),
                    tether_core::Generation(0),
                    Due::Update(CredentialUpdate::LoginPending { url }),
                ));
                match person % 100 {
                    0..=74 => {
                        let done = now + 2 * MINUTE + person % (18 * MINUTE);
                        self.pending.push((done, server, tether_core::Generation(0), Due::LoginDone(login)));
                    }
                    75..=84 => {
                        // The browser login times out; later the person logs in from a terminal.
                        self.pending.push((
                            now + 10 * MINUTE,
                            server.clone(),
                            tether_core::Generation(0),
                            Due::LoginAbandoned(login),
                        ));
                        let terminal = now + 15 * MINUTE + person % (25 * MINUTE);
                        self.pending.push((terminal, server, tether_core::Generation(0), Due::TerminalLogin));
                    }
                    _ => {
                        // The person logs in from a terminal instead; the browser login
                        // the engine prepared is left to time out.
                        let terminal = now + 3 * MINUTE + person % (6 * MINUTE);
                        self.pending.push((terminal, server.clone(), tether_core::Generation(0), Due::TerminalLogin));
                        self.pending.push((
                            now + 10 * MINUTE,
                            server,
                            tether_core::Generation(0),
                            Due::LoginAbandoned(login),
                        ));
                    }
                }
            }
            AuthStep::Discard => {
                self.oauth.discards += 1;
                assert!(acct.expect_discard, "{server}: discard at {now} ms with no invalid_grant before it");
                acct.expect_discard = false;
                acct.held = None;
                if acct.stored.map(|t| t.grant) == acct.dead {
                    acct.stored = None;
                }
            }
        }
    }

    /// The authorization server answers the token request in flight.
    fn token_answer(&mut self, server: &str) -> CredentialUpdate {
        let now = self.now;
        let acct = self.accounts.get_mut(server).expect("oauth");
        let presented = acct.token_call.take().unwrap_or_else(|| panic!("{server}: a token answer with no request"));
        if acct.outage_until > now {
            self.oauth.unavailable += 1;
            return CredentialUpdate::Failed {
                reason: CredentialFailure::Unavailable,
                message: "token endpoint: HTTP 503".into(),
            };
        }
        let Some(refresh) = presented else { return CredentialUpdate::LoginRequired };
        let held = acct.held.expect("a refresh token was presented");
        if acct.revoked && held.grant == acct.grant {
            self.oauth.invalid_grants += 1;
            acct.dead = Some(held.grant);
            acct.expect_discard = true;
            return CredentialUpdate::Failed {
                reason: CredentialFailure::InvalidGrant,
                message: "token endpoint: HTTP 400: invalid_grant".into(),
            };
        }
        // Rotation: only the newest refresh token is accepted, once.
        assert_eq!(
            refresh, acct.newest_refresh,
            "{server}: a refresh at {now} ms presented refresh token {refresh}, already rotated to {}",
            acct.newest_refresh
        );
        acct.newest_refresh += 1;
        let token = Token { grant: held.grant, refresh: acct.newest_refresh, expires_at: now + acct.lifetime };
        acct.held = Some(token);
        acct.stored = Some(token);
        self.oauth.refreshed += 1;
        Self::ready(acct)
    }

    fn ready(acct: &Account) -> CredentialUpdate {
        CredentialUpdate::Ready {
            expires_in_ms: acct.says_expiry.then_some(acct.lifetime),
            refreshable: true,
            scope: Some("mcp".into()),
        }
    }

    /// A person logged in: a new grant, its first token.
    fn new_grant(&mut self, server: &str, hold: bool) -> CredentialUpdate {
        let now = self.now;
        let acct = self.accounts.get_mut(server).expect("oauth");
        acct.grant += 1;
        acct.revoked = false;
        acct.newest_refresh += 1;
        let token = Token { grant: acct.grant, refresh: acct.newest_refresh, expires_at: now + acct.lifetime };
        acct.stored = Some(token);
        if hold {
            acct.held = Some(token);
        }
        Self::ready(acct)
    }

    fn result(&self, id: u64, method: &str) -> String {
        let result = match method {
            "initialize" => json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}),
            "tools/list" => json!({"tools":[{"name":"work","annotations":{"idempotentHint":true}},{"name":"write"}]}),
            _ => json!({"content":[{"type":"text","text":"ok"}]}),
        };
        json!({"jsonrpc":"2.0","id":id,"result":result}).to_string()
    }

    /// Delivers the world's pending answers due by now.
    fn deliver(&mut self) {
        loop {
            let Some(pos) = self.pending.iter().position(|p| p.0 <= self.now) else { return };
            let (_, server, generation, due) = self.pending.swap_remove(pos);
            let input = match due {
                Due::Exit => Input::BackendExited { server, generation, code: Some(1) },
                Due::Failed(id, failure) => Input::BackendFailed { server, generation, request: Some(id), failure },
                Due::Frame(frame) => Input::BackendFrame { server, generation, frame },
                Due::Update(update) => self.credential_input(server, update),
                Due::TokenAnswer => {
                    let update = self.token_answer(&server);
                    self.credential_input(server, update)
                }
                Due::LoginDone(login) => {
                    if !self.end_login(&server, login) {
                        continue;
                    }
                    self.oauth.logins += 1;
                    let update = self.new_grant(&server, true);
                    self.quiet_after_at_least(&server, self.now + SETTLE);
                    self.credential_input(server, update)
                }
                Due::LoginAbandoned(login) => {
                    if !self.end_login(&server, login) {
                        continue;
                    }
                    self.oauth.abandoned += 1;
                    let update = CredentialUpdate::Failed {
                        reason: CredentialFailure::Rejected,
                        message: "the login timed out".into(),
                    };
                    self.credential_input(server, update)
                }
                Due::TerminalLogin => {
                    // Lands in the store only; the engine reads it on its next check.
                    // (Not needed if the person logged in meanwhile.)
                    let acct = &self.accounts[&server];
                    if acct.held.is_some() || acct.stored.is_some() {
                        continue;
                    }
                    self.oauth.terminal_logins += 1;
                    self.new_grant(&server, false);
                    self.quiet_after_at_least(&server, self.now + SETTLE);
                    continue;
                }
            };
            let invalid_grant = matches!(
                &input,
                Input::Credential {
                    update: CredentialUpdate::Failed { reason: CredentialFailure::InvalidGrant, .. },
                    ..
                }
            );
            let name = match &input {
                Input::Credential { server, .. } => Some(server.clone()),
                _ => None,
            };
            self.input(input);
            if let (true, Some(server)) = (invalid_grant, name) {
                let acct = &self.accounts[&server];
                assert!(!acct.expect_discard, "{server}: invalid_grant at {} ms and no discard", self.now);
                let status = self.gw.status(&server).map(|s| s.status);
                assert_eq!(status, Some(Status::RequiresReauth), "{server}: after invalid_grant at {} ms", self.now);
            }
        }
    }

    /// A browser login ended: false if a newer one replaced it (the host cancelled it).
    fn end_login(&mut self, server: &str, login: u64) -> bool {
        let acct = self.accounts.get_mut(server).expect("oauth");
        if acct.login != Some(login) {
            return false;
        }
        acct.login = None;
        true
    }

    /// A credential report; a new token ends the engine's knowledge of a dead grant.
    fn credential_input(&mut self, server: ServerName, update: CredentialUpdate) -> Input {
        let acct = self.accounts.get_mut(&server).expect("oauth");
        match update {
            CredentialUpdate::Ready { .. } => {
                acct.dead = None;
                acct.engine_awaits_login = false;
            }
            CredentialUpdate::Failed { .. } => acct.engine_awaits_login = false,
            _ => {}
        }
        Input::Credential { server, update }
    }

    /// Moves to `target`, firing gateway timers and world answers in time order.
    fn run_until(&mut self, target: u64) {
        loop {
            let timer = self.gw.poll_timeout().map(|t| t.as_millis());
            let answer = self.pending.iter().map(|p| p.0).min();
            let next = [timer, answer].into_iter().flatten().min();
            match next {
                Some(at) if at <= target => {
                    self.now = self.now.max(at);
                    self.deliver();
                    self.input(Input::Tick);
                }
                _ => break,
            }
        }
        self.now = self.now.max(target);
    }

    fn note_recoveries(&mut self) {
        let back: Vec<ServerName> = self
            .recovering
            .keys()
            .filter(|s| self.gw.status(s).is_some_and(|st| matches!(st.status, Status::Online | Status::Dormant)))
            .cloned()
            .collect();
        for server in back {
            let (fault, since) = self.recovering.remove(&server).unwrap();
            let took = self.now - since;
            let bound = recovery_bound(fault, self.stdio.contains(&server));
            if took > bound {
                self.slow_recoveries.push(format!(
                    "{server}: back {took} ms after its {} ended at {since} ms, over the design's {bound} ms",
                    fault.name()
                ));
            }
            self.recovery.entry(fault.name()).or_default().push(took);
        }
    }

    fn call(&mut self) {
        let server = self.names[(self.rng.next_u64() % self.names.len() as u64) as usize].clone();
        let tool = if self.rng.next_u64() % 3 == 0 { "write" } else { "work" };
        let id = self.next_call;
        self.next_call += 1;
        let clean_start = !self.disturbed(&server) && self.quiet_after.get(&server).copied().unwrap_or(0) <= self.now;
        let record =
            CallRecord { server: server.clone(), start: self.now, answers: 0, sends: 0, expired: false, clean_start };
        self.calls.insert(id, record);
        let frame = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":format!("{server}__{tool}"),"arguments":{"call":id}}});
        self.input(Input::ClientFrame { session: CLIENT, frame: frame.to_string(), param_headers: None });
    }

    fn inject(&mut self) {
        let server = self.names[(self.rng.next_u64() % self.names.len() as u64) as usize].clone();
        let stdio = self.stdio.contains(&server);
        let oauth = self.accounts.contains_key(&server);
        let r = self.rng.next_u64();
        match self.rng.next_u64() % 10 {
            0 | 1 if stdio => {
                // A single crash.
                if let Some(generation) = self.gens.get(&server).copied() {
                    self.crashes += 1;
                    self.quiet_after_at_least(&server, self.now + SETTLE);
                    self.recovering.entry(server.clone()).or_insert((Fault::Crash, self.now));
                    self.pending.push((self.now, server, generation, Due::Exit));
                }
            }
            0 if oauth => {
                // An impatient user presses reconnect, whatever the backend's state
                // (waiting for a login too: nothing may go out with a dead credential).
                self.oauth.user_reconnects += 1;
                self.quiet_after_at_least(&server, self.now + SETTLE);
                self.input(Input::Admin { command: AdminCommand::Reconnect { server } });
            }
            2 if stdio => self.set_fault(&server, Fault::CrashLoop, 60_000 + r % 600_000),
            3 => self.set_fault(&server, Fault::Hang, 30_000 + r % 300_000),
            4 | 5 if !stdio => self.set_fault(&server, Fault::Refuse, 10_000 + r % (2 * HOUR)),
            6 if oauth => {
                // The grant is revoked (at the authorization server, by the user or an
                // admin): its tokens stop working and its refresh token is dead.
                self.oauth.revocations += 1;
                self.accounts.get_mut(&server).expect("oauth").revoked = true;
                self.quiet_after_at_least(&server, self.now + SETTLE);
            }
            6 if !stdio => self.set_fault(&server, Fault::Auth, 30 * 60_000),
            7 if !stdio => self.set_fault(&server, Fault::ServerError, 60_000 + r % 600_000),
            8 => self.set_fault(&server, Fault::Slow, 60_000 + r % 600_000),
            9 if oauth => {
                // The token endpoint is down for a while.
                self.oauth.outages += 1;
                let until = self.now + MINUTE + r % (40 * MINUTE);
                self.accounts.get_mut(&server).expect("oauth").outage_until = until;
                self.quiet_after_at_least(&server, until + SETTLE);
            }
            _ => {}
        }
    }

    fn set_fault(&mut self, server: &str, fault: Fault, duration: u64) {
        let until = self.now + duration;
        self.faults.insert(server.into(), (fault, until));
        // Recovery is measured from the end of the fault (see `operator`).
        self.recovering.remove(server);
        self.quiet_after_at_least(server, until + SETTLE);
    }

    /// Faults that ended start their recovery clock; the operator fixes what
    /// needs a person (re-authentication of a backend with static credentials, a
    /// backend that gave up). OAuth backends need no operator: a person logs in.
    fn operator(&mut self) {
        // A backend that gave up after single crashes (no fault left to end) is
        // restarted when the operator notices it.
        let gave_up: Vec<ServerName> = self
            .names
            .iter()
            .filter(|s| !self.faults.contains_key(*s))
            .filter(|s| self.gw.status(s).is_some_and(|st| st.status == Status::PermanentlyFailed))
            .cloned()
            .collect();
        for server in gave_up {
            self.input(Input::Admin { command: AdminCommand::Restart { server } });
        }
        let ended: Vec<(ServerName, Fault, u64)> = self
            .faults
            .iter()
            .filter(|(_, (_, until))| *until <= self.now)
            .map(|(s, (f, until))| (s.clone(), *f, *until))
            .collect();
        for (server, fault, until) in ended {
            self.faults.remove(&server);
            if fault != Fault::Slow {
                self.recovering.insert(server.clone(), (fault, until));
            }
            let status = self.gw.status(&server).map(|s| s.status);
            let person_needed = status == Some(Status::RequiresReauth) && !self.accounts.contains_key(&server);
            if person_needed || status == Some(Status::PermanentlyFailed) {
                let command = if status == Some(Status::PermanentlyFailed) {
                    AdminCommand::Restart { server: server.clone() }
                } else {
                    AdminCommand::Reconnect { server: server.clone() }
                };
                self.input(Input::Admin { command });
            }
        }
    }

    fn reload(&mut self) {
        self.reloads += 1;
        let mut config = self.gw.config().clone();
        let i = (self.rng.next_u64() % 50) as usize;
        let name = self.names[i].clone();
        if let Some(server) = config.servers.get_mut(&*name) {
            server.vital = !server.vital;
            server.policy.request_timeout_ms = Some(30_000 + self.rng.next_u64() % 60_000);
        }
        self.input(Input::ConfigReloaded { config });
    }

    fn day(&mut self) {
        let mut next_call = 0;
        let mut next_fault = 60_000;
        let mut next_reload = 4 * HOUR;
        let mut next_hibernate = 6 * HOUR;
        while self.now < DAY {
            let next = next_call.min(next_fault).min(next_reload).min(next_hibernate).min(DAY);
            self.run_until(next);
            self.operator();
            if self.now >= next_call {
                self.call();
                next_call = self.now + 5_000 + self.rng.next_u64() % 25_000;
            }
            if self.now >= next_fault {
                self.inject();
                next_fault = self.now + 60_000 + self.rng.next_u64() % (10 * 60_000);
            }
            if self.now >= next_reload {
                self.reload();
                next_reload = self.now + 3 * HOUR + self.rng.next_u64() % (3 * HOUR);
            }
            if self.now >= next_hibernate {
                // The laptop sleeps: nothing runs, then everything wakes at once.
                self.hibernations += 1;
                let gap = HOUR + self.rng.next_u64() % (3 * HOUR);
                self.now += gap;
                self.pending.iter_mut().for_each(|p| p.0 = p.0.max(self.now));
                // Recovery clocks do not run while the machine sleeps.
                self.recovering.values_mut().for_each(|r| r.1 += gap);
                self.faults.values_mut().for_each(|f| f.1 += gap);
                // Calls in flight across the sleep time out on waking; calls made
                // after it are held to the rules (tokens expired while it slept).
                let now = self.now;
                for (server, (_, until)) in self.faults.clone() {
                    self.quiet_after_at_least(&server, until + SETTLE);
                }
                for server in self.names.clone() {
                    self.quiet_after_at_least(&server, now);
                }
                self.input(Input::Tick);
                next_hibernate = self.now + 5 * HOUR + self.rng.next_u64() % (4 * HOUR);
            }
        }
        // The world heals: every fault ends now, and the operator fixes what
        // needs a person. Within the longest recovery the design allows, every
        // backend not waiting for a person's login is online again.
        for (_, until) in self.faults.values_mut() {
            *until = self.now;
        }
        self.accounts.values_mut().for_each(|a| a.outage_until = 0);
        self.operator();
        // A login nobody started (its token revoked, and no call came since to ask
        // for one) is started by the operator, as a person would from the status page.
        let unasked: Vec<tether_core::ServerName> = self
            .names
            .iter()
            .filter(|s| self.accounts.get(*s).is_some_and(|a| a.login.is_none()))
            .filter(|s| self.gw.status(s).map(|s| s.status) == Some(Status::RequiresReauth))
            .cloned()
            .collect();
        for server in unasked {
            self.input(Input::Admin { command: AdminCommand::Reconnect { server } });
        }
        self.healed_at = self.now;
        self.run_until(self.now + LONGEST_RECOVERY);
        self.operator();
        self.down_after_healing = self
            .names
            .iter()
            .filter(|s| self.accounts.get(*s).map_or(true, |a| a.login.is_none()))
            .filter_map(|s| {
                let status = self.gw.status(s)?.status;
                (!matches!(status, Status::Online | Status::Dormant)).then(|| format!("{s}: {status:?}"))
            })
            .collect();
        // Then let every timer fire so every call is answered, and every person
        // who was asked to log in has done so.
        self.run_until(self.now + 2 * HOUR);
    }

    fn summary(&self, seed: u64) -> String {
        let mut s = format!(
            "seed {seed}: {} calls, {} ok, {} errors ({} held to succeeding, all did); {} crashes, {} reloads, {} hibernations; gave up (then restarted by the operator): {}",
            self.calls.len(),
            self.answered_ok,
            self.answered_err,
            self.clean_calls,
            self.crashes,
            self.reloads,
            self.hibernations,
            self.gave_up.len()
        );
        for (kind, times) in &self.recovery {
            let max = times.iter().max().copied().unwrap_or(0);
            let mut sorted = times.clone();
            sorted.sort_unstable();
            let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0);
            s.push_str(&format!(
                "\n  recovery after {kind}: {} times, median {} ms, max {} ms",
                times.len(),
                median,
                max
            ));
        }
        let o = &self.oauth;
        s.push_str(&format!(
            "\n  oauth ({} backends): {} loads, {} refreshes ({} ok, {} token endpoint down), {} obtains; \
             {} revocations -> {} invalid_grant, {} discards; {} outages of a token endpoint; {} reconnects by the user",
            self.accounts.len(),
            o.loads,
            o.refreshes,
            o.refreshed,
            o.unavailable,
            o.obtains,
            o.revocations,
            o.invalid_grants,
            o.discards,
            o.outages,
            o.user_reconnects
        ));
        s.push_str(&format!(
            "\n  oauth logins: {} asked for, {} done in the browser, {} left to time out, {} from a terminal \
             ({} browser logins ended after the store had a token)",
            o.login_steps, o.logins, o.abandoned, o.terminal_logins, o.raced_logins
        ));
        s.push_str(&format!(
            "\n  oauth calls: {} refused for an expired token, {} for a dead or missing one; {} calls met an expired token, \
             {} of them succeeded, {} resends; {} calls held to the rule, all answered ok",
            o.expired_401, o.other_401, o.calls_expired, o.calls_expired_ok, o.resent, o.clean_calls
        ));
        s
    }
}

/// How the resource server judges the token on a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Presented {
    /// No token at all.
    None,
    /// Its grant was revoked.
    Dead,
    /// Past its (server-side) expiry.
    Expired,
    /// Good.
    Valid,
}

/// The longest a backend may take to be online again after `fault` ended, as
/// the design promises (its numbers, not the code's defaults, so a changed
/// default fails here too): a stdio backend waits at most the longest restart
/// wait (15 s), an HTTP one the longest reconnect wait (180 s + 10 % jitter),
/// then one attempt within the connect timeout (30 s); after a hang, the
/// handshake that hung first may take its connect timeout too.
fn recovery_bound(fault: Fault, stdio: bool) -> u64 {
    let (restart, reconnect, connect) = (15_000, 198_000, 30_000);
    let wait = if stdio { restart } else { reconnect };
    match fault {
        Fault::Hang => connect + wait + connect,
        _ => wait + connect,
    }
}

/// The longest any backend may take: [`recovery_bound`] at its largest.
const LONGEST_RECOVERY: u64 = 30_000 + 198_000 + 30_000;

fn simulate(seed: u64) {
    let mut world = World::new(seed);
    world.day();
    for (id, record) in &world.calls {
        assert_eq!(record.answers, 1, "seed {seed}: call {id} answered {} times", record.answers);
    }
    // Every call that no fault, crash, token problem or sleep excuses succeeds.
    assert!(
        world.broken.is_empty(),
        "seed {seed}: calls failed with nothing to excuse it:\n{}\n{}",
        world.broken.join("\n"),
        world.summary(seed)
    );
    assert!(world.clean_calls > world.calls.len() as u64 / 2, "seed {seed}: too few calls held to the rule");
    assert!(
        world.slow_recoveries.is_empty(),
        "seed {seed}: recoveries slower than the design promises:\n{}\n{}",
        world.slow_recoveries.join("\n"),
        world.summary(seed)
    );
    assert!(
        world.down_after_healing.is_empty(),
        "seed {seed}: not online {} ms after the world healed at {} ms: {:?}\n{}",
        LONGEST_RECOVERY,
        world.healed_at,
        world.down_after_healing,
        world.summary(seed)
    );
    for server in world.accounts.keys() {
        let status = world.gw.status(server).map(|s| s.status);
        assert_eq!(
            status,
            Some(Status::Online),
            "seed {seed}: {server} at the end of the day\n{}",
            world.summary(seed)
        );
    }
    let o = &world.oauth;
    assert!(
        o.refreshed > 0 && o.logins + o.terminal_logins > 0,
        "seed {seed}: the credential paths ran\n{}",
        world.summary(seed)
    );
    assert_eq!(o.discards, o.invalid_grants, "seed {seed}: every dead grant discarded");
    println!("{}", world.summary(seed));
}

#[test]
fn a_day_of_failures_keeps_every_promise() {
    let seeds: u64 = std::env::var("SIM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for seed in 0..seeds {
        simulate(seed);
    }
}
