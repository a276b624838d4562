//! `hk check`'s line "blockers under groups due for deletion": for every group whose
//! deletion is due (the cron's own due-group pages), the rows of each blocking foreign
//! key under its tree ([`shared::gitlab::blockers`]), summed per key, with the operator
//! action of the keys that block; rows group-destroy deletes itself are named as such.
//! Advisory: such rows stop one group's deletion (it ends `blocked`, whole), not the
//! bundle.

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use tokio_postgres::Client;

use shared::gitlab::blockers::{self, Handling};
use shared::gitlab::group_deletion;

use super::Check;

/// Due groups read per page.
const PAGE: i64 = 500;

/// One key's rows under the due groups.
#[derive(Default)]
struct Sum {
    rows: i64,
    groups: Vec<i64>,
    action: Option<&'static str>,
}

/// The blockers line at `now`.
pub async fn check(c: &Client, now: DateTime<Utc>) -> Check {
    let name = "blockers under groups due for deletion";
    match sums(c, now).await {
        Ok((due, sums)) => line(name, due, &sums),
        Err(e) => Check::fail(name, format!("{e:#}"), "see the catalogue lines above").advisory(),
    }
}

async fn sums(c: &Client, now: DateTime<Utc>) -> Result<(usize, BTreeMap<(bool, String), Sum>)> {
    let today = shared::clock::today(now);
    let period = group_deletion::deletion_adjourned_period(c)
        .await
        .unwrap_or(group_deletion::DEFAULT_PERIOD_DAYS);
    let cutoff = group_deletion::cutoff(today, period);
    let keys = blockers::keys(c).await?;
    let model = shared::gitlab::deletion_model::probe(c).await?;
    let mut sums: BTreeMap<(bool, String), Sum> = BTreeMap::new();
    let mut due = 0;
    let mut after = None;
    loop {
        let page = group_deletion::due_page(c, model, cutoff, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.group_id);
        for s in &page {
            due += 1;
            let tree = blockers::tree(c, s.group_id).await?;
            for f in blockers::scan(c, &keys, &tree).await? {
                let (blocks, action) = match f.key.handling {
                    Handling::NeedsService { action } => (true, Some(action)),
                    _ => (false, None),
                };
                let e = sums.entry((!blocks, f.key.name())).or_default();
                e.rows += f.rows();
                e.groups.push(s.group_id);
                e.action = action;
            }
        }
    }
    Ok((due, sums))
}

fn line(name: &str, due: usize, sums: &BTreeMap<(bool, String), Sum>) -> Check {
    let groups = |s: &Sum| {
        let ids: Vec<String> = s.groups.iter().take(10).map(|g| g.to_string()).collect();
        let more = s.groups.len().saturating_sub(10);
        if more > 0 {
            format!("group(s) {} … {more} more", ids.join(", "))
        } else {
            format!("group(s) {}", ids.join(", "))
        }
    };
    let mut blocking = Vec::new();
    let mut fixes = Vec::new();
    let mut own = Vec::new();
    for ((deleted_first, key), s) in sums {
        let text = format!("{key}: {} row(s) under {}", s.rows, groups(s));
        if *deleted_first {
            own.push(text);
        } else {
            if let Some(a) = s.action {
                fixes.push(format!("{key}: {a}"));
            }
            blocking.push(text);
        }
    }
    let own = if own.is_empty() {
        String::new()
    } else {
        format!(
            "; deleted by group-destroy itself before their parent: {}",
            own.join("; ")
        )
    };
    if blocking.is_empty() {
        return Check::pass(
            name,
            format!("no row needing an outside service under the {due} due group(s){own}"),
        )
        .advisory();
    }
    Check::fail(
        name,
        format!(
            "these groups will end `blocked`, whole, until an operator acts: {}{own}",
            blocking.join("; ")
        ),
        format!(
            "{}; the deletion resumes at the next cron run",
            fixes.join("; ")
        ),
    )
    .advisory()
}
