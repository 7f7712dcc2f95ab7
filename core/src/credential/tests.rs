use super::*;
use alloc::vec;

fn t(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// 1 s doubling to 60 s, no jitter.
fn backoff() -> Backoff {
    Backoff {
        initial: Duration::from_millis(1000),
        multiplier: 2,
        max: Duration::from_millis(60_000),
        jitter_percent: 0,
    }
}

fn valid(scope: &str) -> Credential {
    let mut c = Credential::new(backoff());
    let ready = CredentialUpdate::Ready { expires_in_ms: Some(2_000), refreshable: true, scope: Some(scope.into()) };
    assert_eq!(c.on_update(t(0), &ready, &mut Rng::new(1)), Next::Resend);
    c
}

#[test]
fn a_dpop_nonce_challenge_resends_once_per_token() {
    let mut c = Credential::new(Backoff {
        initial: Duration::from_millis(1_000),
        multiplier: 2,
        max: Duration::from_millis(60_000),
        jitter_percent: 0,
    });
    c.state = CredentialState::Valid;
    c.refreshable = true;
    let nonce = Challenge { error: Some("use_dpop_nonce".into()), ..Challenge::default() };
    assert_eq!(
        c.on_unauthorized(t(0), c.epoch, &nonce, &mut Rng::new(1)),
        Next::Resend,
        "the token is fine: resend with the nonce"
    );
    assert_eq!(
        c.on_unauthorized(t(0), c.epoch, &nonce, &mut Rng::new(1)),
        Next::Step(AuthStep::Refresh),
        "once per token"
    );
}

#[test]
fn a_token_refused_right_after_it_was_issued_is_renewed_on_the_backoff() {
    let mut c = valid("a");
    let mut rng = Rng::new(1);
    let refused = Challenge { error: Some("invalid_token".into()), ..Challenge::default() };
    assert_eq!(c.on_unauthorized(t(100), c.epoch(), &refused, &mut rng), Next::Step(AuthStep::Refresh));
    let ready = CredentialUpdate::Ready { expires_in_ms: Some(3_600_000), refreshable: true, scope: None };
    assert_eq!(c.on_update(t(200), &ready, &mut rng), Next::Resend);
    assert_eq!(c.on_unauthorized(t(300), c.epoch(), &refused, &mut rng), Next::Reauth, "no new token at once");
    assert_eq!(c.deadline(), Some(t(1_300)), "the backoff's first step");
    assert!(c.reauth_reason().unwrap().contains("just issued (1 in a row): invalid_token"));
    assert_eq!(c.on_unauthorized(t(400), c.epoch(), &refused, &mut rng), Next::Reauth, "refusals meanwhile wait");
    assert_eq!(c.on_timer(t(1_300)), Some(AuthStep::Refresh));
    c.on_update(t(1_400), &ready, &mut rng);
    assert_eq!(c.on_unauthorized(t(1_500), c.epoch(), &refused, &mut rng), Next::Reauth);
    assert_eq!(c.deadline(), Some(t(3_500)), "the second step");
    assert_eq!(c.on_timer(t(3_500)), Some(AuthStep::Refresh));
    c.on_update(t(3_600), &ready, &mut rng);
    c.accepted();
    assert_eq!(
        c.on_unauthorized(t(3_700), c.epoch(), &refused, &mut rng),
        Next::Step(AuthStep::Refresh),
        "a token the backend took and then refused is renewed at once"
    );
    c.on_update(t(3_800), &ready, &mut rng);
    assert_eq!(
        c.on_unauthorized(t(3_800 + 10_000), c.epoch(), &refused, &mut rng),
        Next::Step(AuthStep::Refresh),
        "nor is one refused long after it came"
    );
}

#[test]
fn fresh_tokens_refused_every_time_cause_at_most_six_token_requests_a_minute_whatever_the_jitter() {
    // Bases 1, 2, 4, 8, 16, 32 s sum to 63 s: jittered down, a seventh retry
    // would fall inside the first minute.
    let backoff = Backoff {
        initial: Duration::from_millis(1000),
        multiplier: 2,
        max: Duration::from_millis(60_000),
        jitter_percent: 50,
    };
    for seed in 0..50 {
        let mut c = Credential::new(backoff);
        let mut rng = Rng::new(seed);
        let ready = CredentialUpdate::Ready { expires_in_ms: Some(3_600_000), refreshable: true, scope: None };
        c.on_update(t(0), &ready, &mut rng);
        let refused = Challenge { error: Some("invalid_token".into()), ..Challenge::default() };
        // The first refusal renews at once; the token that comes is refused too.
        assert_eq!(c.on_unauthorized(t(10), c.epoch(), &refused, &mut rng), Next::Step(AuthStep::Refresh));
        c.on_update(t(20), &ready, &mut rng);
        let mut asks = alloc::vec![t(10)];
        let mut now = t(30);
        for _ in 0..12 {
            assert_eq!(c.on_unauthorized(now, c.epoch(), &refused, &mut rng), Next::Reauth);
            let due = c.deadline().expect("a retry");
            assert_eq!(c.on_timer(due), Some(AuthStep::Refresh));
            asks.push(due);
            now = due + Duration::from_millis(10);
            c.on_update(now, &ready, &mut rng);
        }
        for (i, first) in asks.iter().enumerate() {
            let within = asks[i..].iter().filter(|at| **at < *first + REFUSAL_ASKS_WINDOW).count();
            assert!(within <= MAX_REFUSAL_ASKS, "seed {seed}: {within} token requests within a minute from {first}");
        }
    }
}

#[test]
fn refusals_cause_at_most_six_token_requests_a_minute() {
    let mut c = valid("a");
    let mut rng = Rng::new(1);
    let ready = CredentialUpdate::Ready { expires_in_ms: Some(3_600_000), refreshable: true, scope: None };
    for i in 0..MAX_REFUSAL_ASKS as u64 {
        let at = 1_000 * i;
        assert_eq!(c.on_unauthorized(t(at), c.epoch(), &Challenge::default(), &mut rng), Next::Step(AuthStep::Refresh));
        c.on_update(t(at + 10), &ready, &mut rng);
        c.accepted(); // taken once, then refused again: never a fresh refusal
    }
    assert_eq!(c.on_unauthorized(t(6_000), c.epoch(), &Challenge::default(), &mut rng), Next::Reauth);
    assert_eq!(c.deadline(), Some(t(60_000)), "when the first of the six leaves the minute");
    assert!(c.reauth_reason().unwrap().contains("refused 6 tokens within a minute"));
    assert_eq!(c.on_timer(t(60_000)), Some(AuthStep::Refresh));
}

#[test]
fn a_refused_client_asks_for_the_configuration_not_a_login() {
    let mut c = valid("a");
    let mut rng = Rng::new(1);
    c.on_unauthorized(t(100), c.epoch(), &Challenge::default(), &mut rng);
    let refused = CredentialUpdate::Failed {
        reason: CredentialFailure::ClientRefused,
        message: "token endpoint: HTTP 401: invalid_client".into(),
    };
    assert_eq!(c.on_update(t(200), &refused, &mut rng), Next::Reauth);
    assert!(c.misconfigured());
    assert_eq!(c.want_login(), None, "no login can mend it");
    c.reset();
    assert!(!c.misconfigured(), "a reload or an operator's reconnect tries again");
}

#[test]
fn tokens_are_refreshed_a_fifth_of_their_life_early_at_most_a_minute() {
    assert_eq!(refresh_margin(2_000), 400);
    assert_eq!(refresh_margin(3_600_000), 60_000);
    let mut c = valid("a");
    assert_eq!(c.deadline(), Some(t(1_600)));
    assert_eq!(c.on_timer(t(1_599)), None);
    assert_eq!(c.on_timer(t(1_600)), Some(AuthStep::Refresh));
    assert_eq!(c.deadline(), None, "nothing else while the refresh runs");
    assert_eq!(
        c.on_unauthorized(t(0), c.epoch(), &Challenge::default(), &mut Rng::new(1)),
        Next::Wait,
        "single flight"
    );
}

#[test]
fn a_step_up_asks_for_the_union_only_when_the_challenge_adds_a_scope() {
    let mut c = valid("mcp:basic");
    let held =
        Challenge { error: Some("insufficient_scope".into()), scope: Some("mcp:basic".into()), ..Default::default() };
    assert_eq!(c.on_insufficient_scope(&held), Next::FailWaiting, "nothing new to ask for");
    let wider = Challenge { scope: Some("mcp:write".into()), ..held };
    let Next::Step(AuthStep::Login { challenge }) = c.on_insufficient_scope(&wider) else { panic!() };
    assert_eq!(challenge.scope.as_deref(), Some("mcp:basic mcp:write"));
}

/// Three refusals in a row, each naming a new scope: two step-ups, then the
/// bound. After a request the backend accepted, step-ups are counted again.
#[test]
fn step_ups_are_bounded_in_a_row_and_counted_again_after_a_success() {
    let refusal = |scope: &str| Challenge {
        error: Some("insufficient_scope".into()),
        scope: Some(scope.into()),
        ..Default::default()
    };
    let step_up = |c: &mut Credential, scope: &str| {
        let next = c.on_insufficient_scope(&refusal(scope));
        if matches!(next, Next::Step(AuthStep::Login { .. })) {
            let granted = CredentialUpdate::Ready { expires_in_ms: Some(3_600_000), refreshable: true, scope: None };
            c.on_update(t(10), &granted, &mut Rng::new(1));
        }
        next
    };
    let mut c = valid("s0");
    assert!(matches!(step_up(&mut c, "s1"), Next::Step(AuthStep::Login { .. })));
    assert!(matches!(step_up(&mut c, "s2"), Next::Step(AuthStep::Login { .. })));
    assert_eq!(step_up(&mut c, "s3"), Next::FailWaiting, "a third in a row is refused");

    let mut c = valid("s0");
    assert!(matches!(step_up(&mut c, "s1"), Next::Step(AuthStep::Login { .. })));
    assert!(matches!(step_up(&mut c, "s2"), Next::Step(AuthStep::Login { .. })));
    c.accepted();
    assert!(matches!(step_up(&mut c, "s3"), Next::Step(AuthStep::Login { .. })), "after a success it is asked");
}

#[test]
fn a_login_left_open_when_a_token_came_from_the_store_does_not_end_it_when_it_fails() {
    let mut c = valid("a");
    let dead = CredentialUpdate::Failed { reason: CredentialFailure::InvalidGrant, message: "revoked".into() };
    c.on_unauthorized(t(0), c.epoch(), &Challenge::default(), &mut Rng::new(1));
    assert_eq!(c.on_update(t(10), &dead, &mut Rng::new(1)), Next::Step(AuthStep::Discard));
    assert!(c.want_login().is_some());
    let pending = CredentialUpdate::LoginPending { url: "https://as.example/authorize".into() };
    assert_eq!(c.on_update(t(20), &pending, &mut Rng::new(1)), Next::Reauth);
    assert_eq!(c.on_timer(t(3_020)), Some(AuthStep::Load), "the store is read again");
    let stored = CredentialUpdate::Ready { expires_in_ms: Some(3_600_000), refreshable: true, scope: None };
    assert_eq!(c.on_update(t(3_030), &stored, &mut Rng::new(1)), Next::Resend, "logged in from a terminal");
    let timed_out = CredentialUpdate::Failed {
        reason: CredentialFailure::Rejected,
        message: "the login was not finished within 10 minutes".into(),
    };
    assert_eq!(c.on_update(t(600_020), &timed_out, &mut Rng::new(1)), Next::Wait, "the browser login timed out");
    assert_eq!(c.state(), &CredentialState::Valid);
    assert_eq!(
        c.on_unauthorized(t(0), c.epoch(), &Challenge::default(), &mut Rng::new(1)),
        Next::Step(AuthStep::Refresh)
    );
    let rejected = CredentialUpdate::Failed { reason: CredentialFailure::Rejected, message: "invalid_client".into() };
    assert_eq!(c.on_update(t(600_030), &rejected, &mut Rng::new(1)), Next::Reauth, "a refused refresh still ends it");
}

#[test]
fn a_dead_grant_is_discarded_and_never_refreshed_again() {
    let mut c = valid("a");
    assert_eq!(
        c.on_unauthorized(t(0), c.epoch(), &Challenge::default(), &mut Rng::new(1)),
        Next::Step(AuthStep::Refresh)
    );
    let dead = CredentialUpdate::Failed { reason: CredentialFailure::InvalidGrant, message: "revoked".into() };
    assert_eq!(c.on_update(t(10), &dead, &mut Rng::new(1)), Next::Step(AuthStep::Discard));
    assert_eq!(c.state(), &CredentialState::Reauth);
    assert_eq!(c.on_unauthorized(t(0), c.epoch(), &Challenge::default(), &mut Rng::new(1)), Next::Reauth);
    assert_eq!(c.on_timer(t(3_010)), Some(AuthStep::Load), "only the store is read again");
}

#[test]
fn a_refresh_the_store_cannot_take_is_tried_again_before_the_token_in_hand_ends() {
    let mut c = Credential::new(backoff());
    let mut rng = Rng::new(1);
    let ready = CredentialUpdate::Ready { expires_in_ms: Some(60_000), refreshable: true, scope: None };
    assert_eq!(c.on_update(t(0), &ready, &mut rng), Next::Resend);
    let refresh_at = c.deadline().expect("a refresh is planned");
    assert_eq!(c.on_timer(refresh_at), Some(AuthStep::Refresh));
    let down = CredentialUpdate::Failed {
        reason: CredentialFailure::Unavailable,
        message: "locking the credential store: connection refused".into(),
    };
    // The backoff alone would wait 1, 2, 4, 8, 16 s...: past the token's end.
    let mut now = refresh_at;
    let mut tries = vec![];
    for _ in 0..12 {
        assert_eq!(c.on_update(now, &down, &mut rng), Next::Wait, "the token in hand still serves");
        let next = c.deadline().unwrap();
        if next.as_millis() >= 60_000 {
            break;
        }
        tries.push(next.as_millis());
        assert_eq!(c.on_timer(next), Some(AuthStep::Refresh));
        now = next;
    }
    assert!(tries.len() >= 4, "tried again before the end: {tries:?}");
    assert!(tries.windows(2).all(|w| w[1] - w[0] >= 500), "never closer than 500 ms: {tries:?}");
    assert!(*tries.last().unwrap() >= 59_000, "the last try comes within a second of the end: {tries:?}");
    // The store is back: the token is renewed, and the backoff starts over.
    assert_eq!(c.on_update(now, &ready, &mut rng), Next::Resend);
}
