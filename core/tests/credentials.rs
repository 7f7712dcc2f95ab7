//! Scenarios of a remote backend whose OAuth credential tether manages: a stored
//! token loaded before the first connection and refreshed ahead of expiry, one
//! refresh for many refused calls (each resent once), a dead grant that asks for a
//! login, a token endpoint that is down, a first login, a scope step-up bounded
//! to one, and a login done by another process picked up from the store.

mod support;

use serde_json::{json, Value};
use support::*;
use tether_core::credential::{AuthStep, Challenge, CredentialFailure, CredentialUpdate};
use tether_core::{Action, Config, Failure, Input, ServerConfig, SessionId, Status};

const HOUR: u64 = 3_600_000;

fn oauth_config() -> Config {
    let mut web = ServerConfig::http("https://web.example/mcp");
    web.oauth = true;
    Config::default().server("web", web)
}

/// Credential steps asked for `web`, with their times.
fn steps(sim: &Sim) -> Vec<(u64, AuthStep)> {
    sim.actions
        .iter()
        .filter_map(|(at, a)| match a {
            Action::Authorize { server, step } if &**server == "web" => Some((*at, step.clone())),
            _ => None,
        })
        .collect()
}

fn step_names(sim: &Sim) -> Vec<&'static str> {
    steps(sim)
        .iter()
        .map(|(_, s)| match s {
            AuthStep::Load => "load",
            AuthStep::Obtain { .. } => "obtain",
            AuthStep::Refresh => "refresh",
            AuthStep::Login { .. } => "login",
            AuthStep::Discard => "discard",
        })
        .collect()
}

fn report(sim: &mut Sim, update: CredentialUpdate) {
    sim.input(Input::Credential { server: "web".into(), update });
}

fn ready(expires_in_ms: u64) -> CredentialUpdate {
    CredentialUpdate::Ready { expires_in_ms: Some(expires_in_ms), refreshable: true, scope: Some("mcp:read".into()) }
}

fn unauthorized() -> Failure {
    Failure::Unauthorized {
        status: 401,
        challenge: Challenge { error: Some("invalid_token".into()), ..Challenge::default() },
    }
}

fn connects(sim: &Sim) -> usize {
    sim.actions.iter().filter(|(_, a)| matches!(a, Action::ConnectHttp { .. })).count()
}

/// `web` online with a one-hour refreshable token loaded from the store.
fn web_with_token() -> Sim {
    let mut sim = Sim::new(oauth_config());
    assert_eq!(step_names(&sim), ["load"], "the store is read before the first connection");
    let first = sim.actions.iter().position(|(_, a)| matches!(a, Action::Authorize { .. })).unwrap();
    let connect = sim.actions.iter().position(|(_, a)| matches!(a, Action::ConnectHttp { .. })).unwrap();
    assert!(first < connect, "load comes before connect, so the host has the token for it");
    report(&mut sim, ready(HOUR));
    sim.boot("web", &["search"]);
    sim.client_init();
    sim
}

#[test]
fn a_stored_token_is_loaded_first_and_refreshed_a_minute_before_it_expires() {
    let mut sim = web_with_token();
    assert_eq!(sim.status("web"), Status::Online);
    sim.advance(HOUR - 60_000 - 1);
    assert_eq!(step_names(&sim), ["load"], "nothing before the refresh time");
    sim.advance(1);
    assert_eq!(steps(&sim).last().unwrap(), &(HOUR - 60_000, AuthStep::Refresh));
    sim.note("calls go on with the old token while the refresh runs");
    sim.call(1, "web__search");
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("ok"));
    assert_eq!(sim.response(1)["result"], text_result("ok"));
    sim.advance(500);
    report(&mut sim, ready(HOUR));
    sim.advance(HOUR - 60_000);
    assert_eq!(step_names(&sim), ["load", "refresh", "refresh"], "one refresh per token lifetime");
    assert_eq!(sim.status("web"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn refused_calls_share_one_refresh_and_are_resent_once_with_the_new_token() {
    let mut sim = web_with_token();
    sim.advance(1000);
    sim.note("the token was revoked early: three calls in flight are refused with 401");
    for id in 1..=3 {
        sim.call(id, "web__search");
    }
    let ids: Vec<u64> = sim.requests_to("web", "tools/call").iter().map(|(id, _)| *id).collect();
    for id in &ids {
        sim.fail("web", Some(*id), unauthorized());
    }
    assert_eq!(step_names(&sim), ["load", "refresh"], "one refresh however many calls wait");
    assert!(sim.responses_for(1).is_empty(), "the calls wait for the new token");
    sim.note("a fourth call arrives meanwhile: it goes out with the old token, is refused, and waits too");
    sim.call(4, "web__search");
    let fourth = sim.last_request("web", "tools/call");
    sim.fail("web", Some(fourth), unauthorized());
    assert_eq!(step_names(&sim), ["load", "refresh"]);
    sim.advance(200);
    report(&mut sim, ready(HOUR));
    let resent = &sim.requests_to("web", "tools/call")[4..];
    assert_eq!(resent.len(), 4, "each waiting call is resent once");
    assert_eq!(sim.status("web"), Status::Online, "the connection stayed up");
    sim.note("the server still refuses one resent call: it fails, no second refresh");
    let (again, _) = resent[0];
    sim.fail("web", Some(again), unauthorized());
    let err = error_of(&sim, 1);
    assert_eq!(err["code"], -32004, "{err}");
    assert!(err["message"].as_str().unwrap().contains("refused this call again"), "{err}");
    assert_eq!(step_names(&sim), ["load", "refresh"], "a call is resent once: no loop");
    for (id, _) in &resent[1..] {
        reply(&mut sim, "web", *id, text_result("ok"));
    }
    for id in 2..=4 {
        assert_eq!(sim.response(id)["result"], text_result("ok"));
    }
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_401_on_a_request_sent_before_the_new_token_is_resent_without_another_refresh() {
    let mut sim = web_with_token();
    sim.call(1, "web__search");
    let old = sim.last_request("web", "tools/call");
    sim.call(2, "web__search");
    sim.fail("web", Some(sim.last_request("web", "tools/call")), unauthorized());
    report(&mut sim, ready(HOUR));
    sim.note("the first call's refusal arrives after the new token: it was sent under the old one");
    sim.fail("web", Some(old), unauthorized());
    assert_eq!(step_names(&sim), ["load", "refresh"]);
    assert_eq!(sim.requests_to("web", "tools/call").len(), 4, "both calls resent");
}

#[test]
fn invalid_grant_discards_the_credential_fails_the_waiting_calls_and_prepares_a_login() {
    let mut sim = web_with_token();
    sim.call(1, "web__search");
    sim.fail("web", Some(sim.last_request("web", "tools/call")), unauthorized());
    report(
        &mut sim,
        CredentialUpdate::Failed { reason: CredentialFailure::InvalidGrant, message: "refresh token revoked".into() },
    );
    assert_eq!(step_names(&sim), ["load", "refresh", "discard", "login"], "never reused, a login prepared");
    assert_eq!(sim.status("web"), Status::RequiresReauth);
    let err = error_of(&sim, 1);
    assert_eq!(err["code"], -32004);
    let msg = err["message"].as_str().unwrap();
    assert!(msg.contains("tether auth login web") && msg.contains("refresh token revoked"), "{msg}");
    sim.note("the login URL is ready: the status and the next refusal show it");
    report(&mut sim, CredentialUpdate::LoginPending { url: "https://as.example/authorize?x=1".into() });
    let status = sim.gw.status("web").unwrap();
    assert!(status.last_error.as_deref().unwrap().contains("https://as.example/authorize?x=1"), "{status:?}");
    sim.call(2, "web__search");
    let msg = error_of(&sim, 2)["message"].as_str().unwrap().to_string();
    assert!(msg.contains("open https://as.example/authorize?x=1"), "{msg}");
    assert_eq!(step_names(&sim).iter().filter(|s| **s == "login").count(), 1, "one login at a time");
    sim.note("the person logs in: the backend reconnects by itself and the client hears of its tools");
    let before = connects(&sim);
    report(&mut sim, ready(HOUR));
    assert_eq!(connects(&sim), before + 1);
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn a_token_endpoint_that_is_down_is_retried_with_backoff_while_the_token_lasts() {
    let mut sim = web_with_token();
    sim.advance(HOUR - 60_000);
    assert_eq!(step_names(&sim), ["load", "refresh"]);
    let unavailable =
        CredentialUpdate::Failed { reason: CredentialFailure::Unavailable, message: "token endpoint: HTTP 503".into() };
    report(&mut sim, unavailable.clone());
    assert_eq!(sim.status("web"), Status::Online, "the token still lasts 60 s");
    sim.advance(1_100);
    assert_eq!(step_names(&sim), ["load", "refresh", "refresh"], "retried after about a second");
    report(&mut sim, unavailable);
    let t = sim.now;
    sim.advance(2_200);
    let retries: Vec<u64> = steps(&sim).iter().skip(3).map(|(at, _)| *at - t).collect();
    assert!(retries.len() == 1 && (1_800..=2_200).contains(&retries[0]), "backoff doubles: {retries:?}");
    report(&mut sim, ready(HOUR));
    assert_eq!(sim.status("web"), Status::Online);
}

#[test]
fn a_first_login_is_asked_for_when_the_server_refuses_and_nothing_is_stored() {
    let mut sim = Sim::new(oauth_config());
    report(&mut sim, CredentialUpdate::Missing);
    sim.client_init();
    sim.note("initialize is refused: the connection waits for a credential");
    let challenge = Challenge {
        error: None,
        scope: Some("mcp:read".into()),
        resource_metadata: Some("https://web.example/.well-known/oauth-protected-resource".into()),
        ..Challenge::default()
    };
    sim.refuse_probe("web");
    sim.fail(
        "web",
        Some(sim.last_request("web", "initialize")),
        Failure::Unauthorized { status: 401, challenge: challenge.clone() },
    );
    assert_eq!(steps(&sim).last().unwrap().1, AuthStep::Obtain { challenge: challenge.clone() });
    assert_eq!(sim.status("web"), Status::Connecting);
    sim.client(serde_json::json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
    assert_eq!(connects(&sim), 1, "nothing reconnects while the credential is being obtained");
    report(&mut sim, CredentialUpdate::LoginRequired);
    assert_eq!(steps(&sim).last().unwrap().1, AuthStep::Login { challenge }, "the login asks for the scope");
    assert_eq!(sim.status("web"), Status::RequiresReauth);
    let status = sim.gw.status("web").unwrap();
    assert!(status.last_error.as_deref().unwrap().contains("tether auth login web"), "{status:?}");
    report(&mut sim, CredentialUpdate::LoginPending { url: "https://as.example/authorize".into() });
    sim.advance(30_000);
    assert_eq!(connects(&sim), 1, "nothing reconnects by itself while a person is needed");
    report(&mut sim, ready(HOUR));
    assert_eq!(connects(&sim), 2);
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
    assert_eq!(listed_tools(&mut sim, 9), ["web__search"]);
    insta::assert_snapshot!(sim.log);
}

#[test]
fn insufficient_scope_asks_for_one_login_with_the_wider_scope_then_fails() {
    let mut sim = web_with_token();
    let wider =
        Challenge { error: Some("insufficient_scope".into()), scope: Some("mcp:write".into()), ..Challenge::default() };
    let mut union = wider.clone();
    union.scope = Some("mcp:read mcp:write".into());
    sim.call(1, "web__search");
    sim.fail(
        "web",
        Some(sim.last_request("web", "tools/call")),
        Failure::Unauthorized { status: 403, challenge: wider.clone() },
    );
    assert_eq!(steps(&sim).last().unwrap().1, AuthStep::Login { challenge: union }, "held scopes plus the new one");
    report(&mut sim, CredentialUpdate::LoginPending { url: "https://as.example/authorize".into() });
    assert_eq!(sim.status("web"), Status::Online, "the token in hand still serves other calls");
    sim.call(2, "web__search");
    let other = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", other, text_result("ok"));
    assert_eq!(sim.response(2)["result"], text_result("ok"));
    report(
        &mut sim,
        CredentialUpdate::Ready {
            expires_in_ms: Some(HOUR),
            refreshable: true,
            scope: Some("mcp:read mcp:write".into()),
        },
    );
    let resent = sim.last_request("web", "tools/call");
    assert!(resent > other, "the waiting call is resent with the wider token");
    sim.note("the server asks for a scope already held: no second login, the call fails");
    sim.fail("web", Some(resent), Failure::Unauthorized { status: 403, challenge: wider.clone() });
    let err = error_of(&sim, 1);
    assert!(err["message"].as_str().unwrap().contains("scope"), "{err}");
    sim.call(3, "web__search");
    sim.fail(
        "web",
        Some(sim.last_request("web", "tools/call")),
        Failure::Unauthorized { status: 403, challenge: wider },
    );
    assert_eq!(step_names(&sim).iter().filter(|s| **s == "login").count(), 1, "step-up is bounded");
    assert_eq!(error_of(&sim, 3)["code"], -32004);
}

#[test]
fn a_login_done_by_another_process_is_picked_up_from_the_store() {
    let mut sim = web_with_token();
    sim.call(1, "web__search");
    sim.fail("web", Some(sim.last_request("web", "tools/call")), unauthorized());
    report(&mut sim, CredentialUpdate::Failed { reason: CredentialFailure::InvalidGrant, message: "revoked".into() });
    report(&mut sim, CredentialUpdate::LoginPending { url: "https://as.example/authorize".into() });
    sim.advance(3_000);
    assert_eq!(step_names(&sim).last(), Some(&"load"), "the store is read again while a person is needed");
    report(&mut sim, CredentialUpdate::Missing);
    sim.advance(3_000);
    assert_eq!(step_names(&sim).iter().filter(|s| **s == "load").count(), 3);
    sim.note("`tether auth login web` ran in a terminal: the store has a token now");
    report(&mut sim, ready(HOUR));
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
}

#[test]
fn a_client_that_opens_urls_is_asked_to_open_the_login_and_told_when_it_is_done() {
    let mut sim = web_with_token();
    let opener = SessionId(2);
    sim.session(opener, json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{},"url":{}}},"clientInfo":{"name":"desk","version":"1"}}}));
    sim.session(opener, json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    sim.note("the grant is revoked; the login is prepared");
    sim.call(1, "web__search");
    sim.fail("web", Some(sim.last_request("web", "tools/call")), unauthorized());
    report(&mut sim, CredentialUpdate::Failed { reason: CredentialFailure::InvalidGrant, message: "revoked".into() });
    report(&mut sim, CredentialUpdate::LoginPending { url: "https://as.example/authorize?x=1".into() });
    let login = sim.gw.status("web").unwrap().login_url;
    assert_eq!(login.as_deref(), Some("https://as.example/authorize?x=1"), "status displays link the login");
    sim.note("a call from the client that opens URLs: a URL elicitation carrying the login");
    sim.session(
        opener,
        json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"web__search","arguments":{}}}),
    );
    let answer = sim.frames_to(opener).into_iter().find(|f| f["id"] == 7).expect("answered");
    let err = &answer["error"];
    assert_eq!(err["code"], -32042, "{answer}");
    let elicitation = &err["data"]["elicitations"][0];
    assert_eq!(elicitation["mode"], "url");
    assert_eq!(elicitation["url"], "https://as.example/authorize?x=1");
    assert!(elicitation["message"].as_str().unwrap().contains("tether auth login web"), "{elicitation}");
    assert_eq!(err["data"]["status"], "requires_reauth", "the usual status data is there too: {err}");
    let id = elicitation["elicitationId"].as_str().unwrap().to_string();
    sim.note("a second call from it is the same login");
    sim.session(
        opener,
        json!({"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"web__search","arguments":{}}}),
    );
    let again = sim.frames_to(opener).into_iter().find(|f| f["id"] == 8).expect("answered");
    assert_eq!(again["error"]["data"]["elicitations"][0]["elicitationId"], id.as_str());
    sim.note("a client without URL elicitation gets the instructions");
    sim.call(2, "web__search");
    assert_eq!(error_of(&sim, 2)["code"], -32004);
    sim.note("the person logs in: the client that was asked hears the login is done");
    report(&mut sim, ready(HOUR));
    let done: Vec<Value> =
        sim.frames_to(opener).into_iter().filter(|f| f["method"] == "notifications/elicitation/complete").collect();
    assert_eq!(
        done,
        [json!({"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{"elicitationId":id}})]
    );
    assert!(
        sim.client_frames().iter().all(|f| f["method"] != "notifications/elicitation/complete"),
        "only clients that were asked hear of it"
    );
    sim.boot("web", &["search"]);
    assert_eq!(sim.gw.status("web").unwrap().login_url, None, "no link once logged in");
    sim.session(
        opener,
        json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"web__search","arguments":{}}}),
    );
    let last = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", last, text_result("ok"));
    let ok = sim.frames_to(opener).into_iter().find(|f| f["id"] == 9).expect("answered");
    assert_eq!(ok["result"], text_result("ok"), "the retry after the login succeeds");
}

/// A grant no person can mend (the host reports a refused workload JWT as
/// unavailable) is tried again on the backoff with nothing in hand, the backend
/// saying why meanwhile, and an operator's reconnect tries at once.
#[test]
fn a_grant_refused_with_nothing_in_hand_is_tried_again_on_the_backoff() {
    let mut sim = Sim::new(oauth_config());
    report(&mut sim, CredentialUpdate::Missing);
    sim.client_init();
    sim.refuse_probe("web");
    sim.fail("web", Some(sim.last_request("web", "initialize")), unauthorized());
    assert_eq!(step_names(&sim), ["load", "obtain"]);
    let refused = CredentialUpdate::Failed {
        reason: CredentialFailure::Unavailable,
        message: "token endpoint: invalid_grant (assertion expired)".into(),
    };
    report(&mut sim, refused.clone());
    assert_eq!(sim.status("web"), Status::RequiresReauth);
    let status = sim.gw.status("web").unwrap();
    assert!(status.last_error.as_deref().unwrap().contains("assertion expired"), "{status:?}");
    // No login mends it: the status says tether tries again, and how to hurry it.
    let said = format!("{status:?}");
    assert!(said.contains("again by itself") && said.contains("tether reconnect web"), "{said}");
    assert!(!said.contains("auth login"), "{said}");
    sim.advance(1_100);
    assert_eq!(step_names(&sim), ["load", "obtain", "obtain"], "tried again after about a second");
    report(&mut sim, refused);
    let t = sim.now;
    sim.advance(500);
    sim.input(Input::Admin { command: tether_core::AdminCommand::Reconnect { server: "web".into() } });
    sim.fail("web", Some(sim.last_request("web", "server/discover")), unauthorized());
    let after: Vec<u64> = steps(&sim).iter().skip(3).map(|(at, _)| *at - t).collect();
    assert_eq!(after, [500], "the operator's reconnect tries at once\n{}", sim.log);
    report(&mut sim, ready(HOUR));
    sim.boot("web", &["search"]);
    assert_eq!(sim.status("web"), Status::Online);
}

/// The token endpoint refused a renewal and is tried again on the backoff; the
/// backend then refuses the token in hand: a refused call fails at once, saying
/// why, and asks the token endpoint nothing before the scheduled retry (one grant
/// per refused call would hammer it, and an identity provider behind it).
#[test]
fn while_a_renewal_waits_for_its_retry_a_refused_call_fails_at_once_without_asking_again() {
    let mut sim = web_with_token();
    sim.advance(HOUR - 60_000);
    assert_eq!(step_names(&sim), ["load", "refresh"]);
    let refused = CredentialUpdate::Failed {
        reason: CredentialFailure::Unavailable,
        message: "token endpoint: invalid_grant (trust removed)".into(),
    };
    report(&mut sim, refused);
    for id in 1..=3 {
        sim.call(id, "web__search");
        sim.fail("web", Some(sim.last_request("web", "tools/call")), unauthorized());
        let err = error_of(&sim, id);
        assert_eq!(err["code"], -32004, "{err}");
        assert!(err["message"].as_str().unwrap().contains("trust removed"), "{err}");
        assert!(!err["message"].as_str().unwrap().contains("auth login"), "{err}");
    }
    assert_eq!(step_names(&sim), ["load", "refresh"], "nothing asked before the retry");
    sim.advance(1_100);
    assert_eq!(step_names(&sim), ["load", "refresh", "refresh"], "the retry, on its backoff");
    report(&mut sim, ready(HOUR));
    sim.call(4, "web__search");
    let last = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", last, text_result("ok"));
    assert_eq!(sim.response(4)["result"], text_result("ok"));
}

/// Plays a backend that refuses every token (a wrong audience, say) and an
/// authorization server that issues one at once for every request, for `ms`,
/// with a client call every five seconds. Returns the token requests made.
fn refuse_everything_for(sim: &mut Sim, from: usize, ms: u64) -> usize {
    let refusal = Failure::Unauthorized {
        status: 401,
        challenge: Challenge {
            error: Some("invalid_token".into()),
            description: Some("audience mismatch".into()),
            ..Challenge::default()
        },
    };
    let mut seen = from;
    let start = sim.now;
    let mut next_call = 100;
    let asked_before = steps(sim).len();
    while sim.now < start + ms {
        if sim.now >= start + next_call {
            sim.call(1_000 + next_call, "web__search");
            next_call += 5_000;
        }
        // Everything that went out since last time: refuse requests, issue tokens.
        let fresh: Vec<Action> = sim.actions[seen..].iter().map(|(_, a)| a.clone()).collect();
        seen = sim.actions.len();
        for action in fresh {
            match action {
                Action::SendToBackend { server, frame, .. } if &*server == "web" => {
                    let v: Value = serde_json::from_str(&frame).unwrap();
                    if let Some(id) = v.get("id").and_then(Value::as_u64).filter(|_| v.get("method").is_some()) {
                        sim.fail("web", Some(id), refusal.clone());
                    }
                }
                Action::Authorize { server, step: AuthStep::Refresh | AuthStep::Obtain { .. } }
                    if &*server == "web" =>
                {
                    report(sim, ready(HOUR));
                }
                _ => {}
            }
        }
        if sim.actions.len() == seen {
            sim.advance(50);
        }
        assert!(steps(sim).len() < asked_before + 1_000, "a token loop:\n{}", sim.log);
    }
    steps(sim).len() - asked_before
}

#[test]
fn a_backend_that_refuses_every_fresh_token_is_asked_again_on_the_backoff_only() {
    let mut sim = Sim::new(oauth_config());
    report(&mut sim, ready(HOUR));
    sim.client_init();
    sim.note("the backend refuses every token, the stored one first; the authorization server issues them at once");
    let asked = refuse_everything_for(&mut sim, 0, 60_000);
    // The stored token's refusal asks at once (it may just have expired); each
    // token issued and refused after it waits on the backoff: 1, 2, 4, 8, 16 s...
    assert!(asked <= 8, "{asked} token requests in a minute\n{}", sim.log);
    assert!(asked >= 3, "tether still tries: {asked}");
    assert_eq!(sim.status("web"), Status::RequiresReauth);
    let message = sim.gw.status("web").and_then(|s| s.last_error).unwrap_or_default();
    assert!(message.contains("invalid_token: audience mismatch"), "{message}");
    assert!(message.contains("asks the authorization server again by itself"), "{message}");
    for id in (100..60_000).step_by(5_000) {
        assert_eq!(sim.responses_for(1_000 + id).len(), 1, "call {id} answered once\n{}", sim.log);
    }
    sim.note("a minute later the pace is the backoff's: at most a couple a minute");
    let from = sim.actions.len();
    let later = refuse_everything_for(&mut sim, from, 60_000);
    assert!(later <= 2, "{later} token requests in the second minute");
}

#[test]
fn a_stored_token_found_expired_is_refreshed_before_anything_waits_on_it() {
    let mut sim = Sim::new(oauth_config());
    sim.note("the store holds a token that expired while tether was not running");
    report(&mut sim, CredentialUpdate::Ready { expires_in_ms: Some(0), refreshable: true, scope: None });
    assert_eq!(step_names(&sim), ["load", "refresh"], "renewed at once, not at the first refusal");
    sim.client_init();
    sim.call(1, "web__search");
    sim.note("the first request went out without it (the host never sends an expired token): refused");
    sim.refuse_probe("web");
    let first = sim.requests_to("web", "initialize").last().map(|(id, _)| *id);
    if let Some(id) = first {
        sim.fail("web", Some(id), unauthorized());
    }
    assert_eq!(step_names(&sim), ["load", "refresh"], "no second renewal while the first runs");
    sim.advance(100);
    report(&mut sim, ready(HOUR));
    sim.boot("web", &["search"]);
    sim.advance(3_000);
    let id = sim.last_request("web", "tools/call");
    reply(&mut sim, "web", id, text_result("ok"));
    assert_eq!(sim.response(1)["result"], text_result("ok"), "{}", sim.log);
    assert_eq!(sim.status("web"), Status::Online);
}
