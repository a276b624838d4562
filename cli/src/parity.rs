//! `hk parity <plan.json>`: did the database end as the plan decided (docs/parity.md)?
//!
//! Owns: reading a plan as `hk run <fn> --dry-run --until-idle --json` writes it
//! ([`PlanFile::parse`]: JSON lines, the `{"plan": …}` line holding `now` and
//! `decisions`), and the comparison of each planned decision with the row as the
//! database holds it now, read in one `READ ONLY`, `REPEATABLE READ` transaction
//! ([`compare`]): *agreed* (the row is absent as planned, or present with the watched
//! values the plan left), *disagreed* (removed where the plan kept it, kept where it
//! removed it, or changed otherwise), *changed meanwhile* (a disagreement on a row
//! whose `updated_at` is later than the plan's clock: changed by someone else in
//! between, neither side's doing) and *id reused* (a row holds the id but not the
//! identity values the plan saw). [`Report`] counts them per function, decision and
//! rule and lists every finding that is not an agreement.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio_postgres::Client;

use engine::local::decisions::{pick, rows, table_rule, TableRule};
use shared::error::{Error, Result};

/// One decision of a plan file.
#[derive(Debug, Clone, Deserialize)]
pub struct Planned {
    /// The function that decided.
    pub function: String,
    /// The row's table.
    pub table: String,
    /// The row's id.
    pub id: i64,
    /// What was decided.
    pub decision: String,
    /// By which rule.
    pub rule: String,
    /// The identity values before the plan (`null`: the row did not exist).
    pub identity: Option<Map<String, Value>>,
    /// `updated_at` before the plan.
    #[serde(default)]
    pub updated_at: Option<Value>,
    /// The columns the decision read, before the plan (`null` in plans of an `hk`
    /// before issue 47).
    #[serde(default)]
    pub read: Option<Map<String, Value>>,
    /// `absent` or `present`.
    pub expect: String,
    /// The watched columns the plan left (`present` only).
    #[serde(default)]
    pub watched: Option<Map<String, Value>>,
}

/// What `hk parity` reads of a plan.
#[derive(Debug, Clone)]
pub struct PlanFile {
    /// The function planned.
    pub function: Option<String>,
    /// The plan's clock.
    pub now: DateTime<Utc>,
    /// Why the plan stopped early, if it did.
    pub stopped: Option<String>,
    /// Its decisions.
    pub decisions: Vec<Planned>,
    /// When the copy's snapshot was taken (`--read-only` plans): the line after
    /// which a row counts as changed meanwhile (else the plan's clock).
    pub snapshot_at: Option<DateTime<Utc>>,
    /// The cron function's selection at the plan's start: `(function, table, rule,
    /// ids)`.
    pub selection: Option<(String, String, String, Vec<i64>)>,
    /// Why the plan could not read that selection.
    pub selection_error: Option<String>,
    /// The authorizations the plan's removals leave gone: `(function, member,
    /// user_id, project_id)`.
    pub implied: Vec<(String, i64, i64, i64)>,
}

impl PlanFile {
    /// The plan in `text`: the output of `hk run … --dry-run --until-idle --json`
    /// (JSON lines; the one whose object has the key `plan`), or that one object.
    pub fn parse(text: &str) -> std::result::Result<PlanFile, String> {
        let whole = serde_json::from_str::<Value>(text).ok().into_iter();
        let lines = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok());
        let plan = whole
            .chain(lines)
            .find_map(|v| v.get("plan").cloned())
            .ok_or("no {\"plan\": …} object found: give the output of `hk run <function> --dry-run --until-idle --json`")?;
        let now = plan
            .get("now")
            .and_then(Value::as_str)
            .ok_or("the plan has no `now` (written by an hk without decisions?)")?;
        let now = DateTime::parse_from_rfc3339(now)
            .map_err(|e| format!("the plan's `now` is not RFC 3339: {e}"))?
            .with_timezone(&Utc);
        let decisions = plan
            .get("decisions")
            .cloned()
            .ok_or("the plan has no `decisions`")?;
        let decisions: Vec<Planned> = serde_json::from_value(decisions)
            .map_err(|e| format!("the plan's decisions cannot be read: {e}"))?;
        let snapshot_at = plan
            .pointer("/read_only/snapshot_at")
            .and_then(Value::as_str)
            .map(|t| {
                DateTime::parse_from_rfc3339(t)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| format!("the plan's read_only.snapshot_at is not RFC 3339: {e}"))
            })
            .transpose()?;
        let selection_error = plan
            .pointer("/selection/error")
            .and_then(Value::as_str)
            .map(String::from);
        let selection = plan
            .get("selection")
            .filter(|v| !v.is_null() && v.get("error").is_none())
            .map(|v| {
                let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let ids = v
                    .get("ids")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_i64).collect())
                    .unwrap_or_default();
                (s("function"), s("table"), s("rule"), ids)
            });
        let implied = plan
            .get("implied")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| {
                        let n = |k: &str| v.get(k).and_then(Value::as_i64).unwrap_or(0);
                        let f = v.get("function").and_then(Value::as_str).unwrap_or("");
                        (f.to_string(), n("member"), n("user_id"), n("project_id"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(PlanFile {
            snapshot_at,
            selection,
            selection_error,
            implied,
            function: plan
                .get("function")
                .and_then(Value::as_str)
                .map(String::from),
            now,
            stopped: plan
                .get("stopped")
                .and_then(Value::as_str)
                .map(String::from),
            decisions,
        })
    }
}

/// How a planned decision compares with the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The row is as the plan left it.
    Agreed,
    /// It is not, and nobody else changed it after the plan's clock.
    Disagreed,
    /// It is not, but it changed after the plan's clock (`updated_at`).
    ChangedMeanwhile,
    /// A row holds the id with other identity values.
    IdReused,
}

impl Kind {
    /// The name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Agreed => "agreed",
            Kind::Disagreed => "disagreed",
            Kind::ChangedMeanwhile => "changed_meanwhile",
            Kind::IdReused => "id_reused",
        }
    }

    const ALL: [Kind; 4] = [
        Kind::Agreed,
        Kind::Disagreed,
        Kind::ChangedMeanwhile,
        Kind::IdReused,
    ];
}

/// A decision that did not agree, with what the database shows.
#[derive(Debug, Clone)]
pub struct Finding {
    /// How it compares.
    pub kind: Kind,
    /// The planned decision.
    pub planned: Planned,
    /// What the database shows: `null` when the row is absent, else its identity,
    /// watched values and `updated_at`.
    pub found: Value,
    /// One sentence: what was planned and what happened.
    pub what: String,
}

/// The comparison of a whole plan.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plan's clock.
    pub now: DateTime<Utc>,
    /// Why the plan stopped early, if it did.
    pub stopped: Option<String>,
    /// Per (function, decision, rule): counts per [`Kind`] in `Kind::ALL` order.
    pub by_rule: BTreeMap<(String, String, String), [u64; 4]>,
    /// Every finding that is not an agreement, in plan order.
    pub findings: Vec<Finding>,
    /// Why the plan as a whole cannot be in agreement (empty, stopped early).
    pub problems: Vec<String>,
}

impl Report {
    /// Decisions of kind `k`.
    pub fn count(&self, k: Kind) -> u64 {
        self.by_rule.values().map(|c| c[k as usize]).sum()
    }

    /// Full agreement: nothing disagreed and no id was reused (rows changed
    /// meanwhile are nobody's decision).
    pub fn agrees(&self) -> bool {
        self.count(Kind::Disagreed) == 0
            && self.count(Kind::IdReused) == 0
            && self.problems.is_empty()
    }

    /// The report as one JSON object (`--json`).
    pub fn to_json(&self) -> Value {
        let counts = |c: &[u64; 4]| {
            Kind::ALL
                .iter()
                .map(|k| (k.name().to_string(), json!(c[*k as usize])))
                .collect::<Map<_, _>>()
        };
        let total: u64 = self.by_rule.values().flatten().sum();
        json!({"parity": {
            "now": shared::clock::rfc3339(self.now),
            "stopped": self.stopped,
            "agrees": self.agrees(),
            "problems": self.problems,
            "decisions": total,
            "totals": counts(&Kind::ALL.map(|k| self.count(k))),
            "by_rule": self.by_rule.iter().map(|((f, d, r), c)| {
                let mut m = counts(c);
                m.insert("function".into(), json!(f));
                m.insert("decision".into(), json!(d));
                m.insert("rule".into(), json!(r));
                Value::Object(m)
            }).collect::<Vec<_>>(),
            "findings": self.findings.iter().map(|f| json!({
                "kind": f.kind.name(),
                "function": f.planned.function,
                "table": f.planned.table,
                "id": f.planned.id,
                "identity": f.planned.identity,
                "decision": f.planned.decision,
                "rule": f.planned.rule,
                "expect": f.planned.expect,
                "watched": f.planned.watched,
                "found": f.found,
                "what": f.what,
            })).collect::<Vec<_>>(),
        }})
    }
}

/// A `to_jsonb` timestamp (with or without a zone, taken as UTC).
fn timestamp(v: &Value) -> Option<DateTime<Utc>> {
    let s = v.as_str()?;
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|t| t.and_utc())
        })
}

/// A stand-in decision for a row the plan did not decide itself (a row of the
/// selection it never decided, an authorization its removal implies).
fn stand_in(function: &str, table: &str, id: i64, decision: &str, rule: String) -> Planned {
    Planned {
        function: function.to_string(),
        table: table.to_string(),
        id,
        decision: decision.to_string(),
        rule,
        identity: None,
        updated_at: None,
        read: None,
        expect: "absent".to_string(),
        watched: None,
    }
}

/// Compare `plan` with the database `c` is connected to, in one read-only snapshot:
/// each decision, each row of the function's selection the plan did not decide, and
/// each authorization a removal implies gone. An empty plan or one that stopped
/// early is not in agreement, whatever its decisions.
pub async fn compare(c: &mut Client, plan: &PlanFile) -> Result<Report> {
    let tx = engine::shadow::read_only_transaction(c).await?;
    let mut ids: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for d in &plan.decisions {
        if table_rule(&d.table).is_none() {
            return Err(Error::Config(format!(
                "the plan names table {}, which hk parity does not know",
                d.table
            )));
        }
        ids.entry(d.table.as_str()).or_default().push(d.id);
    }
    // The selection's rows the plan never decided.
    let undecided: Vec<Planned> = match &plan.selection {
        Some((function, table, rule, selected)) if table_rule(table).is_some() => {
            let decided: std::collections::BTreeSet<i64> = plan
                .decisions
                .iter()
                .filter(|d| &d.function == function && &d.table == table)
                .map(|d| d.id)
                .collect();
            selected
                .iter()
                .filter(|id| !decided.contains(id))
                .map(|id| {
                    stand_in(
                        function,
                        table,
                        *id,
                        "undecided",
                        format!("selection ({rule})"),
                    )
                })
                .collect()
        }
        _ => Vec::new(),
    };
    for u in &undecided {
        ids.entry(table_rule(&u.table).expect("checked").table)
            .or_default()
            .push(u.id);
    }
    let mut live = BTreeMap::new();
    for (table, ids) in ids {
        live.insert(table, rows(&tx, table, &ids).await?);
    }
    let mut still_authorized = std::collections::BTreeSet::new();
    if !plan.implied.is_empty() {
        let users: Vec<i64> = plan.implied.iter().map(|i| i.2).collect();
        for r in tx
            .query(
                "SELECT user_id::bigint, project_id::bigint FROM public.project_authorizations
                  WHERE user_id = ANY($1::bigint[])",
                &[&users],
            )
            .await?
        {
            still_authorized.insert((r.get::<_, i64>(0), r.get::<_, i64>(1)));
        }
    }
    tx.commit().await?;
    let mut report = Report {
        now: plan.now,
        stopped: plan.stopped.clone(),
        by_rule: BTreeMap::new(),
        findings: Vec::new(),
        problems: Vec::new(),
    };
    if plan.decisions.is_empty() {
        report.problems.push(
            "the plan holds no decision: there is nothing to compare (a run that found no \
             work, a table copied empty, or a plan file cut short); full agreement needs \
             decisions"
                .to_string(),
        );
    }
    if let Some(e) = &plan.selection_error {
        report.problems.push(format!(
            "the function's selection could not be read when planning ({e}): rows it \
             would have taken but the plan never decided cannot be checked"
        ));
    }
    if let Some(why) = &plan.stopped {
        report.problems.push(format!(
            "the plan stopped before the end of the run ({why}): what it did not plan is not \
             compared"
        ));
    }
    let line = plan.snapshot_at.unwrap_or(plan.now);
    // A stand-in (undecided row, implied authorization) is counted only when it
    // disagrees: the plan's own decisions are what agree.
    let add = |report: &mut Report,
               d: &Planned,
               (kind, found, what): (Kind, Value, String),
               own: bool| {
        if own || kind != Kind::Agreed {
            report
                .by_rule
                .entry((d.function.clone(), d.decision.clone(), d.rule.clone()))
                .or_default()[kind as usize] += 1;
        }
        if kind != Kind::Agreed {
            report.findings.push(Finding {
                kind,
                planned: d.clone(),
                found,
                what,
            });
        }
    };
    for d in &plan.decisions {
        let rule = table_rule(&d.table).expect("checked above");
        let row = live[d.table.as_str()].get(&d.id);
        add(&mut report, d, judge(d, rule, row, line), true);
    }
    for u in &undecided {
        let rule = table_rule(&u.table).expect("checked");
        let row = live[rule.table].get(&u.id);
        let found = row.map_or(Value::Null, |r| {
            json!({"identity": pick(r, rule.identity, false), "updated_at": r.get("updated_at")})
        });
        let what = format!(
            "in {}'s selection at the plan's start ({}) but the plan never decided it (a plan \
             cut short, or a table the copy held empty); the database {}",
            u.function,
            u.rule,
            if row.is_some() {
                "still has it"
            } else {
                "removed it"
            }
        );
        add(&mut report, u, (Kind::Disagreed, found, what), false);
    }
    // A removal that disagrees itself is reported once, not once per authorization.
    let unsettled: std::collections::BTreeSet<i64> = report
        .findings
        .iter()
        .filter(|f| f.planned.table == "members")
        .map(|f| f.planned.id)
        .collect();
    for (function, member, user, project) in &plan.implied {
        if unsettled.contains(member) {
            continue;
        }
        let d = stand_in(
            function,
            "project_authorizations",
            *project,
            "removed",
            format!("implied by member {member}"),
        );
        let mut d = d;
        d.identity = Some(
            json!({"user_id": user, "project_id": project})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        if still_authorized.contains(&(*user, *project)) {
            let what = format!(
                "the plan removed member {member}, which leaves user {user} without access to \
                 project {project}; the database still has that project_authorizations row"
            );
            let found = json!({"user_id": user, "project_id": project});
            add(&mut report, &d, (Kind::Disagreed, found, what), false);
        }
    }
    Ok(report)
}

/// One decision against its row as the database holds it now; `line` is the
/// snapshot's time (or the plan's clock): a disagreement counts as changed
/// meanwhile only when a column the decision read moved **and** `updated_at` is past
/// the line (`updated_at` alone moves for many reasons; a plan without the read
/// columns is judged by `updated_at` alone).
fn judge(
    d: &Planned,
    rule: &TableRule,
    row: Option<&Map<String, Value>>,
    line: DateTime<Utc>,
) -> (Kind, Value, String) {
    let planned = format!("planned {} ({})", d.decision, d.rule);
    let Some(row) = row else {
        return match d.expect.as_str() {
            "absent" => (Kind::Agreed, Value::Null, String::new()),
            _ => (
                Kind::Disagreed,
                Value::Null,
                format!("{planned}, the row kept; the database removed it"),
            ),
        };
    };
    let updated_at = row.get("updated_at").cloned().unwrap_or(Value::Null);
    let found_identity = pick(row, rule.identity, false);
    let found_watched = pick(row, rule.watched, true);
    let found_read = pick(row, rule.read, false);
    let found = json!({
        "identity": found_identity,
        "watched": found_watched,
        "read": found_read,
        "updated_at": updated_at,
    });
    if d.identity.as_ref() != Some(&found_identity) {
        let what = format!(
            "{planned}; the id now belongs to another row (identity {})",
            Value::Object(found_identity.clone())
        );
        return (Kind::IdReused, found, what);
    }
    let (agrees, what) = match d.expect.as_str() {
        "absent" => (
            false,
            format!("{planned}, the row removed; the database kept it"),
        ),
        _ => {
            let same = d.watched.as_ref().unwrap_or(&Map::new()) == &found_watched;
            (
                same,
                format!(
                    "{planned}, the row kept with {}; the database has {}",
                    Value::Object(d.watched.clone().unwrap_or_default()),
                    Value::Object(found_watched.clone())
                ),
            )
        }
    };
    if agrees {
        return (Kind::Agreed, found, String::new());
    }
    let later = timestamp(&updated_at).is_some_and(|t| t > line);
    let moved: Vec<&String> = match &d.read {
        Some(before) => found_read
            .iter()
            .filter(|(k, v)| before.get(*k).unwrap_or(&Value::Null) != *v)
            .map(|(k, _)| k)
            .collect(),
        None => Vec::new(),
    };
    if later && (d.read.is_none() || !moved.is_empty()) {
        let what = format!(
            "{what}, but the row changed after the plan's data was read (updated_at \
             {updated_at}{})",
            if moved.is_empty() {
                String::new()
            } else {
                format!(
                    "; changed: {}",
                    moved
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
        return (Kind::ChangedMeanwhile, found, what);
    }
    if later {
        let what = format!(
            "{what}; only updated_at moved ({updated_at}), no column the decision read, so \
             it is not a change made meanwhile"
        );
        return (Kind::Disagreed, found, what);
    }
    (Kind::Disagreed, found, what)
}

#[cfg(test)]
mod tests;
