//! The decisions of a plan (`hk run --dry-run --until-idle`, docs/parity.md).
//!
//! Owns: [`Recorder`], the [`shared::runtime::Decisions`] the plan hands to every
//! invocation (the handlers call `Invocation::decide`: function, table, id, decision,
//! rule), and [`PlannedDecision`], a decision with what `hk parity` compares: the
//! row's identity values and `updated_at` before the plan (read after the slice's
//! rollback, so from the database as it was) and its state at the end of the slice
//! (`expect`: `absent` or `present`, with the watched columns of its table); and
//! [`TABLES`], per table the columns that identify a row (an id reused by another row
//! differs there), the columns whose value a decision changes and those it reads;
//! [`selection`], the rows a cron function's selection takes at the plan's start,
//! and [`implied`], the authorizations a slice's membership removals leave gone. The
//! row reads here (`to_jsonb` of the row by id) are `hk`'s own, not the functions'.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{json, Map, Value};
use tokio_postgres::GenericClient;

use shared::error::{Error, Result};
use shared::runtime::{Decision, Decisions};

/// What identifies a row of a table besides its id, and which columns a decision
/// changes.
pub struct TableRule {
    /// The table (schema `public`).
    pub table: &'static str,
    /// Columns that identify the row: an id reused by another row differs here.
    pub identity: &'static [&'static str],
    /// Columns a decision sets (`…_at`: compared as set or not; others by value).
    pub watched: &'static [&'static str],
    /// Columns a decision reads (its inputs besides the identity): a row whose
    /// decision disagrees counts as changed meanwhile only when one of these moved
    /// (`hk parity`; `updated_at` alone moves for many reasons).
    pub read: &'static [&'static str],
}

/// A group's deletion state, in every deletion-state model (docs/parity.md): its
/// `namespaces.state` (18.4 on; `null` before), whether it has a
/// `group_deletion_schedules` row, and (18.10 on) whether
/// `namespace_details.deletion_scheduled_at` is set. A group restored and one still
/// scheduled differ here. [`rows`] adds the two that are not `namespaces` columns.
pub const DELETION_STATE: &[&str] = &["state", "deletion_schedule", "deletion_scheduled_at"];

/// Every table a function decides on.
pub const TABLES: &[TableRule] = &[
    TableRule {
        table: "members",
        identity: &["user_id", "source_id", "source_type"],
        watched: &[],
        read: &[
            "expires_at",
            "access_level",
            "source_id",
            "source_type",
            "requested_at",
            "member_namespace_id",
        ],
    },
    TableRule {
        table: "members_deletion_schedules",
        identity: &["namespace_id", "user_id"],
        watched: &[],
        read: &["scheduled_by_id"],
    },
    TableRule {
        table: "namespaces",
        identity: &["type", "created_at"],
        watched: DELETION_STATE,
        read: &[
            "parent_id",
            "state",
            "deletion_schedule",
            "deletion_scheduled_at",
            "deletion_scheduled_by",
        ],
    },
    TableRule {
        table: "users",
        identity: &["created_at"],
        watched: &[],
        read: &["state", "user_type"],
    },
    TableRule {
        table: "personal_access_tokens",
        identity: &["user_id", "created_at"],
        watched: &[
            "seven_days_notification_sent_at",
            "thirty_days_notification_sent_at",
            "sixty_days_notification_sent_at",
            "expire_notification_delivered",
        ],
        read: &["expires_at", "revoked", "impersonation"],
    },
    TableRule {
        table: "web_hooks",
        identity: &["created_at"],
        watched: &[],
        read: &["disabled_until", "recent_failures"],
    },
    TableRule {
        table: "import_placeholder_user_details",
        identity: &["placeholder_user_id"],
        watched: &["deletion_attempts"],
        read: &["namespace_id", "last_deletion_attempt_at"],
    },
];

/// The rule of `table`, if a function decides on it.
pub fn table_rule(table: &str) -> Option<&'static TableRule> {
    TABLES.iter().find(|t| t.table == table)
}

/// Collects the decisions of a plan, in order.
#[derive(Default)]
pub struct Recorder(Mutex<Vec<Decision>>);

impl Decisions for Recorder {
    fn record(&self, decision: Decision) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(decision);
    }
}

impl Recorder {
    /// The decisions recorded since the last call.
    pub fn take(&self) -> Vec<Decision> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A decision as the plan writes it (`decisions` of `--json`).
#[derive(Debug, Clone)]
pub struct PlannedDecision {
    /// What was decided.
    pub decision: Decision,
    /// The identity values before the plan (`None`: the row did not exist).
    pub identity: Option<Map<String, Value>>,
    /// `updated_at` before the plan, when the table has one.
    pub updated_at: Option<Value>,
    /// The columns the decision read ([`TableRule::read`]) before the plan.
    pub read: Option<Map<String, Value>>,
    /// The row at the end of the plan's slice: `None` when absent, else the watched
    /// columns.
    pub expect: Option<Map<String, Value>>,
}

impl PlannedDecision {
    /// The decision's JSON object (docs/parity.md).
    pub fn to_json(&self) -> Value {
        let d = &self.decision;
        json!({
            "function": d.function.name(),
            "table": d.table,
            "id": d.id,
            "decision": d.decision,
            "rule": d.rule,
            "identity": self.identity,
            "updated_at": self.updated_at,
            "read": self.read,
            "expect": if self.expect.is_some() { "present" } else { "absent" },
            "watched": self.expect,
        })
    }
}

/// The rows of `table` with these ids, as `to_jsonb` objects by id.
pub async fn rows<C: GenericClient>(
    c: &C,
    table: &str,
    ids: &[i64],
) -> Result<BTreeMap<i64, Map<String, Value>>> {
    let rule = table_rule(table)
        .ok_or_else(|| Error::Invariant(format!("no row identity is known for table {table}")))?;
    let sql = if rule.table == "namespaces" {
        // The deletion state beside the row: the schedule row, and 18.10's
        // `deletion_scheduled_at` (null where the column does not exist).
        "SELECT t.id::bigint, to_jsonb(t) || jsonb_build_object(
                'deletion_schedule', EXISTS (SELECT 1 FROM public.group_deletion_schedules s
                                              WHERE s.group_id = t.id),
                'deletion_scheduled_by', (SELECT s.user_id FROM public.group_deletion_schedules s
                                           WHERE s.group_id = t.id),
                'deletion_scheduled_at', (SELECT to_jsonb(d) -> 'deletion_scheduled_at'
                                            FROM public.namespace_details d
                                           WHERE d.namespace_id = t.id))
           FROM public.namespaces t WHERE t.id = ANY($1::bigint[])"
            .to_string()
    } else {
        format!(
            "SELECT id::bigint, to_jsonb(t) FROM public.{} t WHERE id = ANY($1::bigint[])",
            rule.table
        )
    };
    let mut out = BTreeMap::new();
    for r in c.query(&sql, &[&ids]).await? {
        if let Value::Object(m) = r.get::<_, Value>(1) {
            out.insert(r.get(0), m);
        }
    }
    Ok(out)
}

/// `columns` of `row`, `…_at` columns as whether they are set.
pub fn pick(row: &Map<String, Value>, columns: &[&str], as_set: bool) -> Map<String, Value> {
    columns
        .iter()
        .map(|c| {
            let v = row.get(*c).cloned().unwrap_or(Value::Null);
            let v = if as_set && c.ends_with("_at") {
                Value::Bool(!v.is_null())
            } else {
                v
            };
            (c.to_string(), v)
        })
        .collect()
}

/// The last of the decisions on each row by each function, in order (a retried
/// transaction, or a later slice, decides again).
fn distinct<T>(items: Vec<T>, decision: impl Fn(&T) -> &Decision) -> Vec<T> {
    let mut last: BTreeMap<(&'static str, &'static str, i64), usize> = BTreeMap::new();
    for (i, x) in items.iter().enumerate() {
        let d = decision(x);
        last.insert((d.function.name(), d.table, d.id), i);
    }
    let keep: std::collections::BTreeSet<usize> = last.into_values().collect();
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, x)| x)
        .collect()
}

/// The last decision of each function on each row, over the whole plan.
pub fn last_of_each(planned: Vec<PlannedDecision>) -> Vec<PlannedDecision> {
    distinct(planned, |p| &p.decision)
}

/// Ids by table.
fn by_table(decisions: &[Decision]) -> BTreeMap<&'static str, Vec<i64>> {
    let mut t: BTreeMap<&'static str, Vec<i64>> = BTreeMap::new();
    for d in decisions {
        t.entry(d.table).or_default().push(d.id);
    }
    t
}

/// The end of a slice, inside its transaction: each decision with the state it left
/// its row in. [`before`] adds the identity once the slice is rolled back.
pub async fn after_slice<C: GenericClient>(
    c: &C,
    decisions: Vec<Decision>,
) -> Result<Vec<PlannedDecision>> {
    let decisions = distinct(decisions, |d| d);
    let mut after = BTreeMap::new();
    for (table, ids) in by_table(&decisions) {
        after.insert(table, rows(c, table, &ids).await?);
    }
    Ok(decisions
        .into_iter()
        .map(|d| {
            let watched = table_rule(d.table).map_or(&[][..], |r| r.watched);
            let expect = after[d.table].get(&d.id).map(|r| pick(r, watched, true));
            PlannedDecision {
                decision: d,
                identity: None,
                updated_at: None,
                read: None,
                expect,
            }
        })
        .collect())
}

/// After the slice's rollback: the identity values and `updated_at` of each row as
/// the database holds it without the plan.
pub async fn before<C: GenericClient>(c: &C, planned: &mut [PlannedDecision]) -> Result<()> {
    let decisions: Vec<Decision> = planned.iter().map(|p| p.decision.clone()).collect();
    let mut now = BTreeMap::new();
    for (table, ids) in by_table(&decisions) {
        now.insert(table, rows(c, table, &ids).await?);
    }
    for p in planned {
        let d = &p.decision;
        if let Some(row) = now[d.table].get(&d.id) {
            let identity = table_rule(d.table).map_or(&[][..], |r| r.identity);
            let read = table_rule(d.table).map_or(&[][..], |r| r.read);
            p.identity = Some(pick(row, identity, false));
            p.read = Some(pick(row, read, false));
            p.updated_at = row.get("updated_at").cloned();
        }
    }
    Ok(())
}

/// Decisions per function, decision and rule (the plan's text output).
pub fn counts(planned: &[PlannedDecision]) -> BTreeMap<(String, String, String), u64> {
    let mut t = BTreeMap::new();
    for p in planned {
        let d = &p.decision;
        *t.entry((
            d.function.name().to_string(),
            d.decision.to_string(),
            d.rule.to_string(),
        ))
        .or_default() += 1;
    }
    t
}

/// The rows a cron function's selection takes at the plan's start (`hk parity`
/// checks that the plan decided each: a plan cut short, or a table copied empty,
/// leaves some undecided), with the function that decides them and the table. Read
/// with the functions' own statements where they have one: remove-expired-members
/// (behaviour §B38.4: `expires_at` on or before the plan's UTC day, `-infinity`
/// included), every `members_deletion_schedules` row (prune-deletions decides each),
/// the groups adjourned-group-deletion finds due, the placeholder details
/// placeholder-user-cleanup finds eligible, and the human tokens in scope of one of
/// pat-expiring's intervals. `None` for a child worker run on its own.
pub async fn selection<C: GenericClient>(
    c: &C,
    function: shared::Function,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Option<Value>> {
    use shared::batches::{adjourned_group_deletion, pat_expiring, placeholder_user_cleanup};
    use shared::Function as F;
    let today = now.date_naive();
    let ids =
        |rows: Vec<tokio_postgres::Row>| -> Vec<i64> { rows.iter().map(|r| r.get(0)).collect() };
    let (decider, table, rule, ids) = match function {
        F::RemoveExpiredMembers => (
            function,
            "members",
            "expires_at on or before the plan's day",
            ids(c
                .query(
                    "SELECT id::bigint FROM public.members
                      WHERE expires_at IS NOT NULL AND expires_at <= $1::date ORDER BY id",
                    &[&today],
                )
                .await?),
        ),
        F::SchedulePruneDeletions => (
            F::PruneDeletions,
            "members_deletion_schedules",
            "every schedule at the plan's start",
            ids(c
                .query(
                    "SELECT id::bigint FROM public.members_deletion_schedules ORDER BY id",
                    &[],
                )
                .await?),
        ),
        F::AdjournedGroupDeletion => (
            function,
            "namespaces",
            "due on the plan's day",
            adjourned_group_deletion::due_groups(c, today).await?,
        ),
        F::PlaceholderUserCleanup => (
            function,
            "import_placeholder_user_details",
            "eligible at the plan's start",
            placeholder_user_cleanup::eligible_details(c, now).await?,
        ),
        F::PatExpiring => (
            function,
            "personal_access_tokens",
            "human tokens in scope of an interval",
            pat_expiring::human_tokens_in_scope(c, today).await?,
        ),
        _ => return Ok(None),
    };
    Ok(Some(json!({
        "function": decider.name(),
        "table": table,
        "rule": rule,
        "ids": ids,
    })))
}

/// What a slice's removals of memberships imply besides the rows: the
/// `project_authorizations` of their users that the slice left gone, read inside the
/// slice's transaction `tx` (after) and on `other`, a session that sees the database
/// without the slice (before). One object per authorization:
/// `{"function", "member", "user_id", "project_id"}`.
pub async fn implied<C: GenericClient, D: GenericClient>(
    tx: &C,
    other: &D,
    decisions: &[Decision],
) -> Result<Vec<Value>> {
    let removed: Vec<(&'static str, i64)> = decisions
        .iter()
        .filter(|d| d.table == "members" && d.decision == "removed")
        .map(|d| (d.function.name(), d.id))
        .collect();
    if removed.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<i64> = removed.iter().map(|(_, id)| *id).collect();
    let users: Vec<(i64, i64)> = other
        .query(
            "SELECT id::bigint, user_id::bigint FROM public.members WHERE id = ANY($1::bigint[])",
            &[&ids],
        )
        .await?
        .iter()
        // An invitation has no user yet: it authorizes nobody.
        .filter_map(|r| Some((r.get(0), r.get::<_, Option<i64>>(1)?)))
        .collect();
    let user_ids: Vec<i64> = users.iter().map(|(_, u)| *u).collect();
    let auths = "SELECT user_id::bigint, project_id::bigint FROM public.project_authorizations
                  WHERE user_id = ANY($1::bigint[])";
    let pairs = |rows: Vec<tokio_postgres::Row>| -> std::collections::BTreeSet<(i64, i64)> {
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let before = pairs(other.query(auths, &[&user_ids]).await?);
    let after = pairs(tx.query(auths, &[&user_ids]).await?);
    let mut out = Vec::new();
    for (user, project) in before.difference(&after) {
        // The first removed membership of that user names the cause.
        let Some((member, _)) = users.iter().find(|(_, u)| u == user) else {
            continue;
        };
        let function = removed
            .iter()
            .find(|(_, id)| id == member)
            .map_or("", |(f, _)| *f);
        out.push(json!({
            "function": function, "member": member, "user_id": user, "project_id": project,
        }));
    }
    Ok(out)
}
