//! remove-expired-members (B38): every acceptance scenario of behaviour §B38.11, plus
//! replay and duplicate delivery, one file per concern:
//!
//! * `selection`: which memberships have expired and go, and what goes with them.
//! * `last_owner`: expired owner rows kept so that no group is left without an owner.
//! * `bots`: an expired project bot is blocked, its tokens revoked, and delete-user
//!   finishes it.
//! * `continuation`: pages, groups of a page, the cursor, the deadline guard and the hop
//!   limit.
//! * `run_guards`: one member's error stays its own; the overlap lock; a malformed
//!   message.
//! * `side_effects`: the events row, highest role, todos, 2FA requirement and audit
//!   events GitLab writes beside a removal, once per removal.
//! * `ee_rows`: EE's protected-branch, protected-environment and SAML identity rows of
//!   the user removed, and a bot's `user_destroyed` audit events.
//!
//! Here: the common fixture and one cron invocation.

use engine::local::Runner;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::{capture, Captured};
use integration_tests::{t, Fx, TestDb};
use serde_json::json;
use shared::config::Settings;
use shared::queue::OutMessage;
use shared::Function;

mod bots;
mod continuation;
mod ee_rows;
mod last_owner;
mod run_guards;
mod selection;
mod side_effects;

const NOW: &str = "2025-03-10T00:10:00Z";

const F: Function = Function::RemoveExpiredMembers;

/// The common fixture of behaviour §B38.11: G100 "acme"; G101 < G100; P200 in G101 (project
/// namespace 300); U10, U11, U12 (human, active); U20 (bot, active); M1: GM G100 U11 50.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.users(&[U::human(10), U::human(11), U::human(12), U::bot(20)])
        .await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    db
}

/// Settings with `AUDIT_EVENTS` on or off (the side-effects and EE-rows tests).
fn audit(on: bool) -> Settings {
    Settings {
        audit_events: on,
        ..Settings::default()
    }
}

/// Invoke the cron message at NOW `times` times (a replay after the first).
async fn cron(db: &TestDb, settings: Settings, times: usize) {
    let mut r = db.runner_with(t(NOW), settings);
    let body = r.cron_message(F).to_body();
    for _ in 0..times {
        r.invoke(F, &body, 1).await.unwrap();
    }
}

/// One invocation of the cron message at NOW; returns the runner and the log.
async fn cron_once(db: &TestDb) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    (r, log)
}
