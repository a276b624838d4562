//! The `side effects` check: which rows a removal writes beside it
//! (docs/gitlab-differences.md D3) and whether `AUDIT_EVENTS` agrees with the audit
//! events the database holds.

use tokio_postgres::Client;

use crate::Check;

/// Which side effects of a removal the functions write (docs/gitlab-differences.md
/// D3), and whether `AUDIT_EVENTS` agrees with the database: audit events already
/// there mean a licensed instance that writes them; none while it is `on`, probably
/// an unlicensed one. A disagreement is advisory.
pub async fn check(c: &Client, audit_events: bool) -> Check {
    use shared::gitlab::side_effects::audit;
    let rows = "events rows, highest role, todos, 2FA requirement, EE protected-branch and \
                protected-environment access and SAML identities: on";
    let setting = if audit_events { "on" } else { "off" };
    match (audit::instance_has_events(c).await, audit_events) {
        (Ok(true), true) | (Ok(false), false) => Check::pass(
            "side effects",
            format!(
                "{rows}; audit events: {setting} (AUDIT_EVENTS), as the database shows ({})",
                if audit_events { "audit events exist" } else { "no audit event" }
            ),
        ),
        (Ok(true), false) => Check::fail(
            "side effects",
            format!("{rows}; audit events: off (AUDIT_EVENTS), but the database holds audit events"),
            "the instance writes audit events (licensed EE): set the stack's AuditEvents (AUDIT_EVENTS) to on, or the removals go unaudited",
        )
        .advisory(),
        (Ok(false), true) => Check::fail(
            "side effects",
            format!("{rows}; audit events: on (AUDIT_EVENTS), but the database holds no audit event"),
            "is the instance licensed for audit events? If not, set AuditEvents (AUDIT_EVENTS) to off",
        )
        .advisory(),
        (Err(e), _) => Check::fail(
            "side effects",
            format!("{rows}; audit events: {setting} (AUDIT_EVENTS); cannot read the audit tables: {e}"),
            "grant the privileges `hk grants` prints",
        )
        .advisory(),
    }
}
