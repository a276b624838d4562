//! The `hk-check` Lambda function's handler: `hk check` run inside the deployed
//! network, with the functions' own configuration, network path and TLS settings
//! (docs/cutover.md).
//!
//! Owns: one invocation: the configuration read like the functions read it
//! (`DATABASE_SECRET_ARN` or `DATABASE_URL`, `DATABASE_CA_BUNDLE`, the TLS rule:
//! [`super::target`]), every check of [`super::run`], one log line per check and a
//! summary line, and the [`Report`] returned as the invocation's JSON result. The event
//! may give `{"now": "<RFC 3339>"}` for the work-waiting counts (default: the system
//! clock). A configuration or connection failure is a report too (one failed
//! `connection` check, status 2), so `aws lambda invoke` always shows what happened.
//! Read only, like `hk check`: directly invoked, never on a queue or schedule.

use chrono::{DateTime, SubsecRound, Utc};
use serde_json::Value;

use super::report::Report;
use super::{target, Check};

/// Lambda's entry: the process environment, the system clock.
pub async fn handle(event: Value) -> Value {
    let report = Box::pin(handle_with(|k| std::env::var(k).ok(), &event, Utc::now())).await;
    serde_json::to_value(&report).expect("a report serializes")
}

/// One invocation with the configuration `get` reads; `clock` is the time used when
/// the event names none.
pub async fn handle_with(
    get: impl Fn(&str) -> Option<String>,
    event: &Value,
    clock: DateTime<Utc>,
) -> Report {
    let now = match event.get("now").and_then(Value::as_str) {
        None => clock.trunc_subsecs(6),
        Some(s) => match DateTime::parse_from_rfc3339(s) {
            Ok(t) => t.with_timezone(&Utc),
            Err(e) => {
                return log(Report::new(
                    clock,
                    vec![Check::fail(
                        "event",
                        format!("`now` is not an RFC 3339 time: {e}"),
                        "invoke with `{}` or `{\"now\": \"2026-03-01T00:00:00Z\"}`",
                    )],
                ))
            }
        },
    };
    let checks = match target::from_lookup(get).await {
        Ok(t) => super::run(&t, now).await,
        Err(e) => Err(e),
    };
    let checks = checks.unwrap_or_else(|e| {
        vec![Check::fail(
            "connection",
            format!("{e:#}"),
            "from inside the VPC: the database's security group must admit the functions' security group on its port, the route must reach it (VPN, Direct Connect, peering), and DATABASE_SECRET_ARN must name the right host, port, user and password (docs/cutover.md)",
        )]
    });
    log(Report::new(now, checks))
}

/// One log line per check (warn for a failed one), then the summary.
fn log(report: Report) -> Report {
    for c in &report.checks {
        let fix = c.fix.as_deref().unwrap_or("");
        if c.ok {
            tracing::info!(check = %c.name, ok = c.ok, required = c.required, detail = %c.detail, "check");
        } else {
            tracing::warn!(check = %c.name, ok = c.ok, required = c.required, detail = %c.detail, fix, "check");
        }
    }
    tracing::info!(
        ok = report.ok,
        status = report.status,
        exit_code = report.exit_code,
        summary = %report.summary(),
        "hk-check done"
    );
    report
}
