//! tether's OAuth client keeping a remote backend's credential alive, end to end:
//! the real `tether` binary (`serve --listen`, `auth login`, `status`), a scripted
//! browser, and a local authorization server that is also the MCP backend
//! ([`OAuthBackend`]), issuing 2-second access tokens with rotating refresh tokens.
//!
//! What it proves: 32 concurrent calls for
//! 60 s with no failed call, one refresh per expiry, no rotated refresh token ever
//! presented twice; a revoked grant turns the backend `requires_reauth` within one
//! call, and `tether auth login` brings it back with no restart. And three
//! replicas on three "machines" sharing one login through Redis
//! (`tether.cluster.store`) refresh each token generation once in all.
//!
//! The load lasts 60 s unless `OAUTH_E2E_SECS` says otherwise, for a quicker run:
//!
//! ```sh
//! OAUTH_E2E_SECS=10 cargo test -p tether-tests --test oauth_e2e -- --nocapture
//! ```
//!
//! Credentials live in the test's own directory (`TETHER_STATE_DIR`). Waits are
//! polls with generous deadlines; the numbers measured are printed at the end.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tether_tests::oauth_backend::{OAuthBackend, Tally, TOOL};
use tether_tests::redis_server::RedisServer;
use tether_tests::{mcp_post, process_running, tether_bin, wait_until, Runtime, Tether};

/// How long the backend's access tokens live.
const LIFETIME: Duration = Duration::from_secs(2);
/// Concurrent MCP clients during the load.
const CLIENTS: usize = 32;
/// The bearer token tether's own HTTP endpoint is started with.
const TOKEN: &str = "tok-oauth-e2e-0123456789abcdef";
/// Long enough for anything that should happen "soon" on a slow, loaded machine
/// (a running tether reads the store every 1.5 s while it waits for a login).
const SOON: Duration = Duration::from_secs(30);
/// The backend's name in the configuration.
const NAME: &str = "remote";

/// How long the load lasts: `OAUTH_E2E_SECS`, else 60 s.
fn load_span() -> Duration {
    let secs = std::env::var("OAUTH_E2E_SECS").ok().and_then(|s| s.trim().parse::<u64>().ok()).unwrap_or(60);
    Duration::from_secs(secs.max(1))
}

#[test]
fn a_rotating_grant_stays_alive_under_load_and_a_revoked_one_comes_back_with_a_login() {
    let started = Instant::now();
    let span = load_span();
    let backend = OAuthBackend::start(LIFETIME);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("credentials");
    let config = json!({ "mcpServers": { NAME: { "url": backend.mcp_url() } } });
    let config_path = dir.path().join("config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    // The person's browser (for `tether auth login`), and the one the running
    // tether opens by itself: that one only notes the URL, nobody follows it.
    let person = Browser::new(dir.path(), "person");
    let unattended = Browser::new(dir.path(), "unattended");
    let mut printed = Vec::new();

    // A person logs in before tether serves.
    printed.push(log_in(&config_path, &store, &person, &backend));
    let t0 = backend.tally();
    assert_eq!((t0.registrations, t0.logins), (1, 1), "{t0:?}");

    let env: [(&str, &OsStr); 2] =
        [("TETHER_STATE_DIR", store.as_os_str()), ("BROWSER", unattended.script.as_os_str())];
    let t = Tether::start_with_env(
        Runtime::Smol,
        config,
        &["serve", "--listen", "127.0.0.1:0", "--auth-token", TOKEN],
        &env,
    );
    let url = t.logged_url("listening on ");
    let base = url.trim_end_matches("/mcp").to_string();
    let tool = wait_for_tool(&url, &t);
    let mut probe = Session::open(&url);
    if let Err(e) = probe.call(&tool) {
        panic!("the first call failed: {e}\n{}", tail(&t));
    }

    // 32 clients call back to back while tokens expire every 2 s.
    let before = backend.tally();
    let window = Instant::now();
    let (calls, failures) = load(&url, &tool, span);
    let elapsed = window.elapsed();
    let after = backend.tally();
    report("load", &before, &after, calls, elapsed);
    assert!(
        failures.is_empty(),
        "{} of {} calls failed under load; the first ones:\n{}\n{}",
        failures.len(),
        calls + failures.len() as u64,
        failures.iter().take(10).cloned().collect::<Vec<_>>().join("\n"),
        tail(&t)
    );
    assert!(calls >= CLIENTS as u64, "only {calls} calls were made");
    assert_refreshes_track_expiries(&before, &after, elapsed);

    // The grant is revoked: the very next call fails, saying what to do. (A
    // token renewed since the load ended and not yet taken by the backend is
    // first suspected of being the wrong kind, renewed once on the backoff,
    // and then found revoked: the same end a moment later.)
    backend.revoke();
    let refused = probe.call(&tool).expect_err("a call after the grant was revoked succeeded");
    assert_eq!(refused.code, Some(-32004), "{refused}");
    let login = format!("tether auth login {NAME}");
    assert!(refused.message.contains(&login) || refused.message.contains("just issued"), "{refused}");
    wait_for_status(&base, "requires_reauth").unwrap_or_else(|row| panic!("not requires_reauth: {row}\n{}", tail(&t)));
    let mut row = Value::Null;
    let said = wait_until(SOON, || {
        row = status_of(&base)["backends"][0].clone();
        row["last_error"].as_str().unwrap_or_default().contains(&login)
    });
    assert!(said, "the status does not say to log in: {row}");
    // It prepared a login by itself and opened "the browser" on it.
    let opened =
        wait_until(SOON, || unattended.urls().iter().any(|u| u.starts_with(&format!("{}/authorize?", backend.base()))));
    assert!(opened, "the running tether opened no login: {:?}\n{}", unattended.urls(), tail(&t));
    let shown = tether_status(&base);
    assert!(shown.contains("requires_reauth"), "{shown}");
    // Asking again does not hammer the token endpoint: the dead grant was tried once.
    let again = probe.call(&tool).expect_err("a second call after the revocation succeeded");
    assert_eq!(again.code, Some(-32004), "{again}");
    assert_eq!(backend.tally().refused_refreshes, 1, "{:?}", backend.tally());

    // The person logs in again; the running tether picks it up from the store.
    let pid = t.pid();
    printed.push(log_in(t.config_path().as_path(), &store, &person, &backend));
    assert_eq!(backend.tally().logins, 2);
    let relogged = Instant::now();
    let back = wait_until(SOON, || probe.call(&tool).is_ok());
    assert!(back, "calls still fail {SOON:?} after the login\n{}", tail(&t));
    let recovery = relogged.elapsed();
    assert!(process_running(pid) && t.pid() == pid, "tether was restarted");
    wait_for_status(&base, "online").unwrap_or_else(|row| panic!("not online again: {row}"));
    // The login it prepared itself is moot now: its loopback listener is closed.
    let abandoned = unattended.urls().last().and_then(|u| redirect_port(u)).expect("a redirect_uri with a port");
    let closed = wait_until(SOON, || std::net::TcpStream::connect(("127.0.0.1", abandoned)).is_err());
    assert!(closed, "the abandoned login still listens on port {abandoned}\n{}", tail(&t));

    // And the new grant is kept alive like the first (a few lifetimes).
    let span2 = Duration::from_secs((span.as_secs() / 10).max(5));
    let before2 = backend.tally();
    let window2 = Instant::now();
    let (calls2, failures2) = load(&url, &tool, span2);
    let elapsed2 = window2.elapsed();
    let after2 = backend.tally();
    report("after the new login", &before2, &after2, calls2, elapsed2);
    assert!(failures2.is_empty(), "calls failed after the new login:\n{}", failures2.join("\n"));
    assert_refreshes_track_expiries(&before2, &after2, elapsed2);

    let end = backend.tally();
    assert_eq!(end.reused_refresh_tokens, 0, "a rotated refresh token was presented again: {end:?}");
    assert_eq!(end.unknown_refresh_tokens, 0, "a refresh token never issued was presented: {end:?}");
    assert_eq!(end.max_concurrent_refreshes, 1, "refreshes overlapped: {end:?}");
    let log = t.stderr_text();
    assert!(!log.contains("panicked"), "tether panicked:\n{}", tail(&t));
    let outputs = format!("{log}\n{}", printed.join("\n"));
    for secret in backend.issued_secrets() {
        assert!(!outputs.contains(&secret), "an issued token or code reached tether's output: {secret}");
    }
    eprintln!(
        "oauth_e2e: {} calls, {} refreshes, {} expiries, {} lapses (expired token presented) in {:.1} s of load; \
         back {:.1} s after the new login; {:.1} s in all",
        calls + calls2,
        end.refreshes,
        end.expiries,
        end.expired_presented,
        (elapsed + elapsed2).as_secs_f64(),
        recovery.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// Three replicas, each on a "machine" of its own (a state directory), share one
/// login through Redis (`tether.cluster.store`): started before anyone logged
/// in, they all serve the backend within 2 s of one `tether auth login` made
/// elsewhere; under load each token generation is refreshed once in all (never a
/// used refresh token presented, no refreshes overlapping), with no failed call;
/// Redis holds no token in the clear and `/status` shows it up.
#[test]
fn three_replicas_sharing_a_login_through_redis_refresh_each_token_once() {
    let Some(redis) = RedisServer::start() else { return };
    let lifetime = Duration::from_secs(5);
    let backend = OAuthBackend::start(lifetime);
    let shared = SharedLogin::new(&redis, &backend);
    let LoginSetup { dir, config_path, person, unattended, .. } = &shared.parts;
    let replicas = shared.start_replicas();
    let urls: Vec<String> = replicas.iter().map(|t| t.logged_url("listening on ")).collect();
    let bases: Vec<&str> = urls.iter().map(|u| u.trim_end_matches("/mcp")).collect();
    for base in &bases {
        wait_for_status(base, "requires_reauth").unwrap_or_else(|row| panic!("not waiting for a login: {row}"));
    }
    // A person logs in once, with `tether auth login` on a fourth machine: every
    // replica reads the login from the store.
    log_in(config_path, &dir.path().join("admin-machine"), person, &backend);
    let logged_in = Instant::now();
    let mut serving = Vec::new();
    for base in &bases {
        let online = wait_until(SOON, || status_of(base)["backends"][0]["status"] == "online");
        assert!(online, "a replica did not pick the login up: {}", status_of(base));
        serving.push(logged_in.elapsed());
    }
    // The logins the replicas prepared while they waited (their browsers may be
    // opened a moment after their status said so): none may follow.
    std::thread::sleep(Duration::from_secs(1));
    let prepared = unattended.urls().len();
    let slowest = serving.iter().max().copied().unwrap_or_default();
    assert!(slowest < Duration::from_secs(5), "the login reached every replica only after {slowest:?}");
    let tool = wait_for_tool(&urls[0], &replicas[0]);
    for (url, t) in urls.iter().zip(&replicas).skip(1) {
        assert_eq!(wait_for_tool(url, t), tool);
    }
    let span = load_span() / 2;
    let before = backend.tally();
    let window = Instant::now();
    let (calls, failures) = load_across(&urls, 20, &tool, span);
    let elapsed = window.elapsed();
    let after = backend.tally();
    report("three replicas × 20 clients", &before, &after, calls, elapsed);
    let tails = || replicas.iter().map(tail).collect::<Vec<_>>().join("\n-----\n");
    assert!(
        failures.is_empty(),
        "{} calls failed:\n{}\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n"),
        tails()
    );
    assert_eq!(after.reused_refresh_tokens, 0, "a rotated refresh token was presented again: {after:?}");
    assert_eq!(after.unknown_refresh_tokens, 0, "{after:?}");
    assert_eq!(after.refused_refreshes, 0, "{after:?}");
    assert_eq!(after.max_concurrent_refreshes, 1, "refreshes overlapped across replicas: {after:?}");
    assert_refreshes_track(&before, &after, elapsed, lifetime);
    assert_eq!((after.logins, unattended.urls().len()), (1, prepared), "nobody was asked to log in again");
    let store = &status_of(bases[1])["credential_store"];
    assert_eq!((&store["kind"], &store["state"]), (&json!("redis"), &json!("up")), "{store}");
    let keyspace = redis.dump();
    assert!(keyspace.contains("tether:cred:"), "{keyspace}");
    for secret in backend.issued_secrets() {
        assert!(!keyspace.contains(&secret), "an issued token is in Redis in the clear");
    }
    eprintln!(
        "oauth_e2e (three replicas, one login in Redis): serving {:?} after the login; {calls} calls, {} refreshes, \
         {} expiries in {:.1} s",
        serving,
        after.refreshes - before.refreshes,
        after.expiries - before.expiries,
        elapsed.as_secs_f64()
    );
}

/// Three replicas sharing a login through Redis, under load; Redis is killed
/// (-9) right after a refresh rotated the token (and every replica took it)
/// and stays down
/// (`OAUTH_E2E_OUTAGE_SECS`, 20 s unless set): no call fails while the tokens
/// in hand last, every replica's status says the store is down. Redis comes
/// back from its AOF with the newest refresh token: the next refresh presents
/// it (none presented twice, none refused), the status says up, nobody logs in.
#[test]
fn the_shared_store_down_under_load_costs_no_call_and_its_restart_keeps_the_newest_refresh_token() {
    let Some(mut redis) = RedisServer::start() else { return };
    let outage = std::env::var("OAUTH_E2E_OUTAGE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20u64);
    let outage = Duration::from_secs(outage);
    // Long enough to outlast the outage after a refresh just before it.
    let lifetime = outage + Duration::from_secs(10);
    let backend = OAuthBackend::start(lifetime);
    let shared = SharedLogin::new(&redis, &backend);
    let LoginSetup { dir, config_path, person, .. } = &shared.parts;
    log_in(config_path, &dir.path().join("admin-machine"), person, &backend);
    let replicas = shared.start_replicas();
    let urls: Vec<String> = replicas.iter().map(|t| t.logged_url("listening on ")).collect();
    let bases: Vec<String> = urls.iter().map(|u| u.trim_end_matches("/mcp").to_owned()).collect();
    let tool = wait_for_tool(&urls[0], &replicas[0]);
    for (url, t) in urls.iter().zip(&replicas).skip(1) {
        wait_for_tool(url, t);
    }
    let span = lifetime * 2 + outage;
    let load_began = Instant::now();
    let initially = backend.tally();
    let load = {
        let (urls, tool) = (urls.clone(), tool.clone());
        std::thread::spawn(move || load_across(&urls, 5, &tool, span))
    };
    let rotated = wait_until(lifetime + SOON, || backend.tally().refreshes >= 1);
    assert!(rotated, "no refresh within the token's life");
    // The rotation is stored and every replica took it (the store's hint):
    // then the store goes.
    std::thread::sleep(Duration::from_secs(2));
    redis.kill();
    let down_at = Instant::now();
    for base in &bases {
        let down = wait_until(SOON, || status_of(base)["credential_store"]["state"] == "down");
        assert!(down, "the status does not say the store is down: {}", status_of(base)["credential_store"]);
    }
    let told = down_at.elapsed();
    std::thread::sleep(outage.saturating_sub(down_at.elapsed()));
    let before = backend.tally();
    redis.restart();
    for base in &bases {
        let up = wait_until(SOON, || status_of(base)["credential_store"]["state"] == "up");
        assert!(up, "the status does not say the store is back: {}", status_of(base)["credential_store"]);
    }
    let refreshed = wait_until(lifetime + SOON, || backend.tally().refreshes > before.refreshes);
    assert!(
        refreshed,
        "no refresh after the store came back\n{}",
        replicas.iter().map(tail).collect::<Vec<_>>().join("\n---\n")
    );
    let (calls, failures) = load.join().unwrap();
    let after = backend.tally();
    assert!(
        failures.is_empty(),
        "{} of {calls} calls failed:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    assert_eq!(after.reused_refresh_tokens, 0, "{after:?}");
    assert_eq!(after.unknown_refresh_tokens, 0, "{after:?}");
    assert_eq!(after.refused_refreshes, 0, "{after:?}");
    assert_eq!(after.logins, 1, "nobody logged in again: {after:?}");
    assert_eq!(after.max_concurrent_refreshes, 1, "{after:?}");
    assert_refreshes_track(&initially, &after, load_began.elapsed(), lifetime);
    let times: Vec<String> = after
        .refresh_times
        .iter()
        .map(|t| format!("{:.1}", t.saturating_duration_since(load_began).as_secs_f64()))
        .collect();
    eprintln!("refreshes at (s into the load): {}", times.join(", "));
    eprintln!(
        "oauth_e2e (Redis down {:.0} s under load): {calls} calls, none failed; every status said down within {:.1} s; \
         {} refreshes, the one after the restart presented the newest refresh token",
        outage.as_secs_f64(),
        told.as_secs_f64(),
        after.refreshes
    );
}

/// A login started on replica A whose callback the "balancer" sends to B
/// (`tether.cluster.login_redirect_uri` names B): the person opens A's start
/// link (tied to their browser by a cookie), B takes the pending login out of
/// Redis, exchanges the code and stores the credential; A, B and C serve the
/// backend within 2 s. The start link and the callback work once, a browser
/// without the cookie cannot finish it, and the keyspace holds no token,
/// verifier or secret in the clear.
#[test]
fn a_login_started_on_one_replica_is_finished_by_the_one_its_callback_reaches() {
    let Some(redis) = RedisServer::start() else { return };
    let backend = OAuthBackend::start(Duration::from_secs(30));
    let callback_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let callback = format!("http://127.0.0.1:{callback_port}/oauth/callback");
    let mut shared = SharedLogin::new(&redis, &backend);
    shared.config["tether"]["cluster"]["login_redirect_uri"] = json!(callback);
    let replicas = shared.start_replicas_at(&["127.0.0.1:0", &format!("127.0.0.1:{callback_port}"), "127.0.0.1:0"]);
    let urls: Vec<String> = replicas.iter().map(|t| t.logged_url("listening on ")).collect();
    let bases: Vec<&str> = urls.iter().map(|u| u.trim_end_matches("/mcp")).collect();
    // A's status shows its login's URL once the login is prepared.
    let mut login = String::new();
    let shown = wait_until(SOON, || {
        login = status_of(bases[0])["backends"][0]["login_url"].as_str().unwrap_or_default().to_owned();
        !login.is_empty()
    });
    assert!(shown, "A shows no login URL: {}", status_of(bases[0]));
    assert!(login.starts_with(&format!("{callback}?start=")), "A's login is tether's start link: {login}");
    // The person opens it: tether ties the login to this browser (a cookie)
    // and sends it on to the authorization server, which redirects to the
    // public callback, which is B.
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).redirects(0).build();
    let answer = |r: Result<ureq::Response, ureq::Error>| match r {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{e}"),
    };
    let started = answer(agent.get(&login).call());
    assert_eq!(started.status(), 302);
    let cookie = started.header("set-cookie").unwrap_or_default().split(';').next().unwrap_or_default().to_owned();
    assert!(cookie.starts_with("tether_login="), "{cookie}");
    let authorize = started.header("location").unwrap_or_default().to_owned();
    let redirect_uri = format!("redirect_uri=http%3A%2F%2F127.0.0.1%3A{callback_port}%2Foauth%2Fcallback");
    assert!(authorize.contains(&redirect_uri), "{authorize}");
    assert_eq!(answer(agent.get(&login).call()).status(), 400, "a start link opens once");
    let redirect = answer(agent.get(&authorize).call()).header("location").unwrap_or_default().to_owned();
    assert!(redirect.starts_with(&callback), "{redirect}");
    // Another browser (no cookie: say someone who saw the authorization URL)
    // cannot finish it.
    let stranger = answer(agent.get(&redirect).call());
    assert_eq!(stranger.status(), 400);
    assert!(stranger.into_string().unwrap().contains("not started in this browser"));
    let finished = Instant::now();
    let landed = answer(agent.get(&redirect).set("Cookie", &cookie).call());
    let page = landed.into_string().unwrap();
    assert!(page.contains(&format!("Logged in to {NAME}")), "{page}\n{}", tail(&replicas[1]));
    let mut serving = Vec::new();
    for base in &bases {
        let online = wait_until(SOON, || status_of(base)["backends"][0]["status"] == "online");
        assert!(online, "a replica did not pick the login up: {}", status_of(base));
        serving.push(finished.elapsed());
    }
    let slowest = serving.iter().max().copied().unwrap_or_default();
    assert!(slowest < Duration::from_secs(2), "the login reached every replica only after {slowest:?}");
    let tool = wait_for_tool(&urls[0], &replicas[0]);
    for (url, t) in urls.iter().zip(&replicas) {
        Session::open(url).call(&tool).unwrap_or_else(|e| panic!("a replica does not serve: {e}\n{}", tail(t)));
    }
    // The same callback again (a reload, a replay): nothing to finish.
    let again = answer(agent.get(&redirect).set("Cookie", &cookie).call());
    assert_eq!(again.status(), 400, "a callback finishes its login once");
    assert_eq!(backend.tally().logins, 1, "{:?}", backend.tally());
    let keyspace = redis.dump();
    for secret in backend.issued_secrets() {
        assert!(!keyspace.contains(&secret), "an issued token is in Redis in the clear");
    }
    eprintln!("oauth_e2e (login started on A, finished on B): every replica serving after {serving:?}");
}

/// Three replicas sharing a login through Redis; the one holding the lease is
/// killed (-9) in the middle of a refresh, before the authorization server
/// processed it. Another replica refreshes once the dead one's lease lapses,
/// with the refresh token still good: no login is asked, no refresh token is
/// presented twice, and the survivors serve calls again.
///
/// Not in the default run: it passed in CI once and in two runs here, then hung
/// in a CI run beside the other tests of this file (its backend, held, never
/// let its workers go: fixed, so a failure now shows instead of hanging). Until
/// the cause is found it runs by hand:
/// `TETHER_REQUIRE_REDIS=1 cargo test -p tether-tests --test oauth_e2e -- --ignored`.
#[test]
#[ignore = "flaky under CI load: run by hand until its CI hang is understood"]
#[cfg(target_os = "linux")]
fn a_replica_killed_in_the_middle_of_a_refresh_leaves_it_to_another_once_its_lease_lapses() {
    let Some(redis) = RedisServer::start() else { return };
    let lifetime = Duration::from_secs(5);
    let backend = OAuthBackend::start(lifetime);
    let shared = SharedLogin::new(&redis, &backend);
    let LoginSetup { dir, config_path, person, .. } = &shared.parts;
    log_in(config_path, &dir.path().join("admin-machine"), person, &backend);
    let replicas = shared.start_replicas();
    let urls: Vec<String> = replicas.iter().map(|t| t.logged_url("listening on ")).collect();
    let tool = wait_for_tool(&urls[0], &replicas[0]);
    for (url, t) in urls.iter().zip(&replicas).skip(1) {
        wait_for_tool(url, t);
    }
    // The next refresh reaches the authorization server and waits there.
    backend.hold_refreshes();
    let held = wait_until(SOON, || !backend.held_refreshes().is_empty());
    assert!(held, "no refresh came within {SOON:?}");
    let peer = backend.held_refreshes()[0];
    let pid = pid_of_local_port(peer.port()).unwrap_or_else(|| panic!("no process has the connection from {peer}"));
    let (dead, survivors): (Vec<_>, Vec<_>) = replicas.iter().zip(&urls).partition(|(t, _)| t.pid() == pid);
    assert_eq!(dead.len(), 1, "the refresh came from pid {pid}, no replica's");
    let _ = Command::new("kill").args(["-s", "KILL", &pid.to_string()]).status();
    let killed = Instant::now();
    backend.drop_held_refreshes();
    let before = backend.tally();
    // A survivor refreshes once the lease (45 s) lapses; calls work again.
    let refreshed = wait_until(Duration::from_secs(90), || backend.tally().refreshes > before.refreshes);
    let took = killed.elapsed();
    assert!(
        refreshed,
        "no replica refreshed after the holder died\n{}",
        survivors.iter().map(|(t, _)| tail(t)).collect::<Vec<_>>().join("\n---\n")
    );
    for (t, url) in &survivors {
        let mut session = Session::open(url);
        let back = wait_until(SOON, || session.call(&tool).is_ok());
        assert!(back, "a survivor does not serve calls again\n{}", tail(t));
    }
    let after = backend.tally();
    assert_eq!(after.reused_refresh_tokens, 0, "{after:?}");
    assert_eq!(after.refused_refreshes, 0, "{after:?}");
    assert_eq!(after.logins, 1, "nobody was asked to log in again: {after:?}");
    eprintln!(
        "oauth_e2e (lease holder killed mid-refresh): a survivor refreshed {:.1} s after the kill",
        took.as_secs_f64()
    );
}

/// Three replicas' shared setup: a config whose `tether.cluster.store` is
/// `redis`, a person's browser and the one the replicas open by themselves.
struct SharedLogin {
    parts: LoginSetup,
    config: Value,
}

/// What [`SharedLogin`] made, by name.
struct LoginSetup {
    dir: tempfile::TempDir,
    config_path: PathBuf,
    person: Browser,
    unattended: Browser,
}

impl SharedLogin {
    fn new(redis: &RedisServer, backend: &OAuthBackend) -> SharedLogin {
        let dir = tempfile::tempdir().unwrap();
        let key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let cluster = json!({"session_keys": format!("1:{key}"), "store": redis.url()});
        let config = json!({ "mcpServers": { NAME: { "url": backend.mcp_url() } }, "tether": { "cluster": cluster } });
        let config_path = dir.path().join("config.json");
        std::fs::write(&config_path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let (person, unattended) = (Browser::new(dir.path(), "person"), Browser::new(dir.path(), "unattended"));
        SharedLogin { parts: LoginSetup { dir, config_path, person, unattended }, config }
    }

    /// Three replicas, each with a state directory of its own (a "machine").
    fn start_replicas(&self) -> Vec<Tether> {
        self.start_replicas_at(&["127.0.0.1:0"; 3])
    }

    /// One replica per address in `listen`, each with a state directory of its own.
    fn start_replicas_at(&self, listen: &[&str]) -> Vec<Tether> {
        listen
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let state = self.parts.dir.path().join(format!("machine-{i}"));
                let env: [(&str, &OsStr); 2] =
                    [("TETHER_STATE_DIR", state.as_os_str()), ("BROWSER", self.parts.unattended.script.as_os_str())];
                let args = ["serve", "--listen", addr, "--auth-token", TOKEN];
                Tether::start_with_env(Runtime::Smol, self.config.clone(), &args, &env)
            })
            .collect()
    }
}

/// The process that has a TCP socket of local port `port` open (read from
/// `/proc`: the socket's inode in `/proc/net/tcp`, then the process whose file
/// descriptors include it).
#[cfg(target_os = "linux")]
fn pid_of_local_port(port: u16) -> Option<u32> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local_port = u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
        (local_port == port).then(|| fields.get(9).map(|s| s.to_string())).flatten()
    })?;
    let target = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == target) {
                return Some(pid);
            }
        }
    }
    None
}

/// One refresh per expiry: the refreshes granted in a window of `elapsed` track
/// the access tokens that ran out in it, and come at the pace tether refreshes at
/// (a fifth of the lifetime early, so every 1.6 s plus the refresh's round trip):
/// never faster than that (no refresh per call, no storm of refreshes), never
/// slower than once a lifetime (the credential never lapses for long).
fn assert_refreshes_track_expiries(before: &Tally, after: &Tally, elapsed: Duration) {
    assert_refreshes_track(before, after, elapsed, LIFETIME);
}

/// [`assert_refreshes_track_expiries`] for tokens living `lifetime`.
fn assert_refreshes_track(before: &Tally, after: &Tally, elapsed: Duration, lifetime_of_token: Duration) {
    let refreshes = after.refreshes - before.refreshes;
    let expiries = after.expiries - before.expiries;
    let lifetime = lifetime_of_token.as_secs_f64();
    let early = lifetime * 0.8;
    let window = elapsed.as_secs_f64();
    let (most, least) = (window / early + 2.0, window / lifetime - 2.0);
    assert!(
        (refreshes as f64) <= most && (refreshes as f64) >= least,
        "{refreshes} refreshes in {window:.1} s: expected between {least:.1} and {most:.1}"
    );
    assert!(refreshes.abs_diff(expiries) <= 2, "{refreshes} refreshes for {expiries} expiries");
    let times = &after.refresh_times[before.refresh_times.len()..];
    let closest = times.windows(2).map(|w| w[1] - w[0]).min();
    if let Some(closest) = closest {
        assert!(closest >= lifetime_of_token / 4, "two refreshes {closest:?} apart: more than one per expiry");
    }
}

/// Prints what a window measured (visible with `--nocapture`).
fn report(what: &str, before: &Tally, after: &Tally, calls: u64, elapsed: Duration) {
    let times = &after.refresh_times[before.refresh_times.len()..];
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let gap = |d: Option<&Duration>| d.map_or_else(|| "-".to_string(), |d| format!("{:.2} s", d.as_secs_f64()));
    eprintln!(
        "oauth_e2e {what}: {calls} calls ({:.0}/s) in {:.1} s; {} refreshes (gaps {} to {}), \
         {} expiries, {} lapses, {} backend calls",
        calls as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        after.refreshes - before.refreshes,
        gap(gaps.iter().min()),
        gap(gaps.iter().max()),
        after.expiries - before.expiries,
        after.expired_presented - before.expired_presented,
        after.calls - before.calls,
    );
}

// ---------------------------------------------------------------- the person

/// A `$BROWSER` that opens nothing: it notes each URL it is given in a file.
struct Browser {
    script: PathBuf,
    log: PathBuf,
}

impl Browser {
    fn new(dir: &Path, name: &str) -> Browser {
        let script = dir.join(format!("{name}-browser.sh"));
        let log = dir.join(format!("{name}-opened.txt"));
        let quoted = log.to_str().expect("utf-8 path").replace('\'', r"'\''");
        std::fs::write(&script, format!("#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{quoted}'\n")).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Browser { script, log }
    }

    /// The URLs it was asked to open, in order.
    fn urls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).map(|s| s.lines().map(String::from).collect()).unwrap_or_default()
    }
}

/// `tether auth login remote`, finished as a person already signed in at the
/// authorization server would: the browser it opens is followed through the
/// authorization endpoint's redirect to tether's loopback callback. Returns what
/// the command printed.
fn log_in(config: &Path, store: &Path, browser: &Browser, backend: &OAuthBackend) -> String {
    let seen = browser.urls().len();
    let mut command = Command::new(tether_bin());
    command
        .arg("--config")
        .arg(config)
        .args(["auth", "login", NAME])
        .env("TETHER_STATE_DIR", store)
        .env("BROWSER", &browser.script)
        .env_remove("TETHER_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().expect("start tether auth login");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let kill = || {
        let _ = Command::new("kill").args(["-s", "KILL", &pid.to_string()]).status();
    };
    if !wait_until(SOON, || browser.urls().len() > seen) {
        kill();
        let out = rx.recv_timeout(Duration::from_secs(5)).ok().and_then(Result::ok);
        panic!("tether auth login opened no browser:\n{}", out.map(|o| describe(&o)).unwrap_or_default());
    }
    let url = browser.urls()[seen].clone();
    assert!(url.starts_with(&format!("{}/authorize?", backend.base())), "{url}");
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
    let landed = agent.get(&url).call().unwrap_or_else(|e| {
        kill();
        panic!("following {url}: {e}")
    });
    assert!(landed.get_url().starts_with("http://127.0.0.1:"), "{}", landed.get_url());
    let page = landed.into_string().unwrap();
    assert!(page.contains("Authorized: tether is finishing the login"), "{page}");
    let out = match rx.recv_timeout(SOON) {
        Ok(out) => out.expect("tether auth login output"),
        Err(_) => {
            kill();
            panic!("tether auth login did not finish after the redirect");
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "tether auth login failed:\n{}", describe(&out));
    assert!(stdout.contains(&format!("Logged in to {NAME} at {}", backend.base())), "{stdout}");
    assert!(stdout.contains("renews itself"), "{stdout}");
    format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
}

/// The port of the `redirect_uri` in an authorization URL.
fn redirect_port(authorization_url: &str) -> Option<u16> {
    let query = authorization_url.split_once('?')?.1;
    let encoded = query.split('&').find_map(|p| p.strip_prefix("redirect_uri="))?;
    // http%3A%2F%2F127.0.0.1%3A<port>%2Fcallback
    let after = encoded.strip_prefix("http%3A%2F%2F127.0.0.1%3A")?;
    after.split('%').next()?.parse().ok()
}

/// The end of tether's log, for failure messages (the whole log is long at debug level).
fn tail(t: &Tether) -> String {
    let log = t.stderr_text();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

// ---------------------------------------------------------------- MCP clients

/// What a refused call said.
#[derive(Debug)]
struct CallError {
    /// The JSON-RPC error code, if the answer was a JSON-RPC error.
    code: Option<i64>,
    message: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(code) => write!(f, "error {code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// One MCP client session with tether over Streamable HTTP.
struct Session {
    agent: ureq::Agent,
    url: String,
    id: String,
    next: u64,
}

impl Session {
    /// Connects and completes the handshake.
    fn open(url: &str) -> Session {
        Session::try_open(url).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Connects and completes the handshake, or says why it could not.
    fn try_open(url: &str) -> Result<Session, String> {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(120)).build();
        let mut session = Session { agent, url: url.to_string(), id: String::new(), next: 1 };
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"oauth-e2e","version":"1"}}});
        let (status, id, body) = session.post(&init).map_err(|e| format!("initialize: {e}"))?;
        session.id = id.filter(|_| status == 200).ok_or_else(|| format!("initialize: HTTP {status}: {body}"))?;
        let (status, _, body) = session.post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))?;
        if status != 202 {
            return Err(format!("notifications/initialized: HTTP {status}: {body}"));
        }
        Ok(session)
    }

    /// One POST: status, session header, and the body (JSON, or the last event
    /// of an SSE stream).
    fn post(&self, body: &Value) -> Result<(u16, Option<String>, String), String> {
        let session = Some(self.id.as_str()).filter(|id| !id.is_empty());
        mcp_post(&self.agent, &self.url, Some(TOKEN), session, body)
    }

    /// A request; its result, or what went wrong.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        let id = self.next;
        self.next += 1;
        let frame = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
        let (status, _, body) = self.post(&frame).map_err(|message| CallError { code: None, message })?;
        let answer: Value = serde_json::from_str(&body)
            .map_err(|e| CallError { code: None, message: format!("HTTP {status}, not JSON ({e}): {body}") })?;
        if let Some(error) = answer.get("error") {
            let message = error["message"].as_str().unwrap_or_default().to_string();
            return Err(CallError { code: error["code"].as_i64(), message });
        }
        if status != 200 || answer["id"] != json!(id) {
            return Err(CallError { code: None, message: format!("HTTP {status}: {body}") });
        }
        Ok(answer["result"].clone())
    }

    /// Calls `tool`; its text, or why it failed (a tool error counts as a failure).
    fn call(&mut self, tool: &str) -> Result<String, CallError> {
        let result = self.request("tools/call", json!({"name": tool, "arguments": {}}))?;
        let text = result["content"][0]["text"].as_str().unwrap_or_default().to_string();
        if result["isError"] == json!(true) || !text.starts_with("call ") {
            return Err(CallError { code: None, message: format!("tool result: {result}") });
        }
        Ok(text)
    }
}

impl Drop for Session {
    /// Ends the session (tether serves a bounded number at once).
    fn drop(&mut self) {
        if !self.id.is_empty() {
            let _ = self
                .agent
                .delete(&self.url)
                .set("Authorization", &format!("Bearer {TOKEN}"))
                .set("Mcp-Session-Id", &self.id)
                .call();
        }
    }
}

/// The backend's tool as tether lists it, once discovered.
fn wait_for_tool(url: &str, t: &Tether) -> String {
    let mut session = Session::open(url);
    let mut found = None;
    wait_until(SOON, || {
        let tools = session.request("tools/list", json!({})).ok().unwrap_or_default();
        found = tools["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .find(|n| n.ends_with(TOOL))
            .map(String::from);
        found.is_some()
    });
    found.unwrap_or_else(|| panic!("tether never listed the backend's tool\n{}", tail(t)))
}

/// [`CLIENTS`] sessions calling `tool` back to back for `span`: the calls that
/// succeeded, and a line for each that failed.
fn load(url: &str, tool: &str, span: Duration) -> (u64, Vec<String>) {
    load_across(&[url.to_string()], CLIENTS, tool, span)
}

/// `per_url` sessions on each of `urls`, as [`load`].
fn load_across(urls: &[String], per_url: usize, tool: &str, span: Duration) -> (u64, Vec<String>) {
    let start = Arc::new(Barrier::new(per_url * urls.len()));
    let clients: Vec<_> = (0..per_url * urls.len())
        .map(|i| {
            let (url, tool, start) = (urls[i % urls.len()].clone(), tool.to_string(), start.clone());
            std::thread::spawn(move || {
                let opened = Session::try_open(&url);
                start.wait();
                let mut session = match opened {
                    Ok(session) => session,
                    Err(e) => return (0, vec![format!("client {i} could not open a session: {e}")]),
                };
                let began = Instant::now();
                let (mut ok, mut failed) = (0u64, Vec::new());
                while began.elapsed() < span {
                    match session.call(&tool) {
                        Ok(_) => ok += 1,
                        Err(e) => failed.push(format!("client {i} at {:.2} s: {e}", began.elapsed().as_secs_f64())),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let mut calls = 0;
    let mut failures = Vec::new();
    for client in clients {
        let (ok, failed) = client.join().expect("a client thread panicked");
        calls += ok;
        failures.extend(failed);
    }
    (calls, failures)
}

// ---------------------------------------------------------------- status

/// GET `{base}/status` with the token: the JSON.
fn status_of(base: &str) -> Value {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(20)).build();
    let response = match agent.get(&format!("{base}/status")).set("Authorization", &format!("Bearer {TOKEN}")).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {base}/status: {e}"),
    };
    serde_json::from_str(&response.into_string().unwrap()).unwrap_or_default()
}

/// Waits until the backend's `/status` row says `status`: the row, or the last
/// row seen.
fn wait_for_status(base: &str, status: &str) -> Result<Value, Value> {
    let mut row = Value::Null;
    let reached = wait_until(SOON, || {
        let report = status_of(base);
        row = report["backends"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|b| b["server"] == NAME)
            .cloned()
            .unwrap_or_default();
        row["status"] == status
    });
    if reached {
        Ok(row)
    } else {
        Err(row)
    }
}

/// What `tether status` prints about the running tether.
fn tether_status(base: &str) -> String {
    let out = Command::new(tether_bin())
        .args(["status", "--url", base, "--token", TOKEN, "--color", "never"])
        .env_remove("TETHER_STATUS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run tether status");
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}
