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

use crate::local::decisions::{pick, rows, table_rule};
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
        Ok(PlanFile {
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
}

impl Report {
    /// Decisions of kind `k`.
    pub fn count(&self, k: Kind) -> u64 {
        self.by_rule.values().map(|c| c[k as usize]).sum()
    }

    /// Full agreement: nothing disagreed and no id was reused (rows changed
    /// meanwhile are nobody's decision).
    pub fn agrees(&self) -> bool {
        self.count(Kind::Disagreed) == 0 && self.count(Kind::IdReused) == 0
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

/// Compare `plan` with the database `c` is connected to, in one read-only snapshot.
pub async fn compare(c: &mut Client, plan: &PlanFile) -> Result<Report> {
    let tx = crate::shadow::read_only_transaction(c).await?;
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
    let mut live = BTreeMap::new();
    for (table, ids) in ids {
        live.insert(table, rows(&tx, table, &ids).await?);
    }
    tx.commit().await?;
    let mut report = Report {
        now: plan.now,
        stopped: plan.stopped.clone(),
        by_rule: BTreeMap::new(),
        findings: Vec::new(),
    };
    for d in &plan.decisions {
        let rule = table_rule(&d.table).expect("checked above");
        let row = live[d.table.as_str()].get(&d.id);
        let (kind, found, what) = judge(d, rule.identity, rule.watched, row, plan.now);
        report
            .by_rule
            .entry((d.function.clone(), d.decision.clone(), d.rule.clone()))
            .or_default()[kind as usize] += 1;
        if kind != Kind::Agreed {
            report.findings.push(Finding {
                kind,
                planned: d.clone(),
                found,
                what,
            });
        }
    }
    Ok(report)
}

/// One decision against its row as the database holds it now.
fn judge(
    d: &Planned,
    identity: &[&str],
    watched: &[&str],
    row: Option<&Map<String, Value>>,
    now: DateTime<Utc>,
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
    let found_identity = pick(row, identity, false);
    let found_watched = pick(row, watched, true);
    let found = json!({
        "identity": found_identity,
        "watched": found_watched,
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
    if timestamp(&updated_at).is_some_and(|t| t > now) {
        let what =
            format!("{what}, but the row changed after the plan's clock (updated_at {updated_at})");
        return (Kind::ChangedMeanwhile, found, what);
    }
    (Kind::Disagreed, found, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(expect: &str) -> Planned {
        serde_json::from_value(json!({
            "function": "remove-expired-members", "table": "members", "id": 7,
            "decision": "removed", "rule": "expired",
            "identity": {"user_id": 3}, "updated_at": null, "expect": expect, "watched": {}
        }))
        .unwrap()
    }

    #[test]
    fn each_case_is_judged_by_presence_identity_and_updated_at() {
        let now: DateTime<Utc> = "2026-03-01T00:10:00Z".parse().unwrap();
        let row = |user: i64, at: &str| -> Map<String, Value> {
            serde_json::from_value(json!({"id": 7, "user_id": user, "updated_at": at})).unwrap()
        };
        let id = &["user_id"][..];
        let early = row(3, "2026-02-01T00:00:00+00:00");
        let late = row(3, "2026-03-02T00:00:00+00:00");
        let other = row(4, "2026-02-01T00:00:00+00:00");
        let j = |e: &str, r: Option<&Map<String, Value>>| judge(&planned(e), id, &[], r, now).0;
        assert_eq!(j("absent", None), Kind::Agreed);
        assert_eq!(j("present", None), Kind::Disagreed);
        assert_eq!(j("absent", Some(&early)), Kind::Disagreed);
        assert_eq!(j("absent", Some(&late)), Kind::ChangedMeanwhile);
        assert_eq!(j("present", Some(&late)), Kind::Agreed);
        assert_eq!(j("absent", Some(&other)), Kind::IdReused);
    }

    #[test]
    fn a_plan_is_read_from_the_json_lines_of_hk_run() {
        let text = "{\"function\":\"x\"}\n{\"plan\":{\"now\":\"2026-03-01T00:10:00Z\",\"decisions\":[]}}\n";
        let p = PlanFile::parse(text).unwrap();
        assert_eq!(p.now.to_rfc3339(), "2026-03-01T00:10:00+00:00");
        assert!(PlanFile::parse("{\"function\":\"x\"}").is_err());
    }
}
