//! `hk parity` (issue 36, docs/parity.md): a plan made on a copy
//! (`hk run <cron> --dry-run --until-idle --json`), then the real run on the original
//! standing in for GitLab's cron, agrees decision by decision for every cron function
//! on the demo data, also when that run meets chaos (duplicates, reordering, crashes);
//! the same plan against the untouched copy does not; and each kind of perturbation
//! (a row removed that the plan kept, a row kept that it removed, a row changed
//! meanwhile, an id reused) is reported exactly, with its exit code.

use std::path::{Path, PathBuf};
use std::process::Output;

use hk::parity::PlanFile;
use integration_tests::state::demo_without_ghost;
use integration_tests::{t, TestDb};
use serde_json::Value;

mod common;
use common::hk_on;

const NOW: &str = "2026-03-01T00:10:00Z";
/// A day after the plan's clock: a change someone made in between.
const LATER: &str = "2026-03-02T00:00:00Z";
/// Each cron function and the functions that decide in its run on the demo data
/// (itself and its children; `schedule-prune-deletions` only sends).
const CRONS: [(&str, &[&str]); 5] = [
    (
        "remove-expired-members",
        &["delete-user", "remove-expired-members"],
    ),
    ("schedule-prune-deletions", &["prune-deletions"]),
    (
        "adjourned-group-deletion",
        &["adjourned-group-deletion", "delete-user", "group-destroy"],
    ),
    (
        "placeholder-user-cleanup",
        &[
            "delete-placeholder-user",
            "delete-user",
            "placeholder-user-cleanup",
        ],
    ),
    ("pat-expiring", &["deliver-notification", "pat-expiring"]),
];

fn hk(db: &TestDb, args: &[&str]) -> Output {
    let o = hk_on(&db.url)
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .expect("hk runs");
    eprintln!(
        "hk {args:?} -> {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Two identical databases of the demo data: the copy the plan runs on, and the
/// original GitLab's cron (here: `hk run`) runs on.
async fn pair() -> (TestDb, TestDb) {
    (
        demo_without_ghost(t(NOW)).await,
        demo_without_ghost(t(NOW)).await,
    )
}

/// The plan of `function` on `copy`, written to a file as the documented form does.
fn plan(copy: &TestDb, function: &str) -> (PathBuf, PlanFile) {
    let (path, p, _) = plan_and_runs(copy, function);
    (path, p)
}

/// [`plan`], with the plan's run lines.
fn plan_and_runs(copy: &TestDb, function: &str) -> (PathBuf, PlanFile, Vec<Value>) {
    let o = hk(
        copy,
        &[
            "run",
            function,
            "--now",
            NOW,
            "--dry-run",
            "--until-idle",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "the plan of {function}");
    let path = std::env::temp_dir().join(format!("hk-plan-{}.json", copy.name));
    std::fs::write(&path, &o.stdout).expect("the plan is written");
    let parsed = PlanFile::parse(&String::from_utf8_lossy(&o.stdout)).expect("the plan parses");
    assert!(!parsed.decisions.is_empty(), "{function} decided nothing");
    let runs = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("every line is JSON"))
        .filter(|v| v.get("plan").is_none())
        .collect();
    (path, parsed, runs)
}

/// The real run of `function` on `db`, with `extra` arguments (`--chaos …`): its
/// last JSON line (with `--chaos`, the chaos statistics).
fn run(db: &TestDb, function: &str, extra: &[&str]) -> Value {
    let mut args = vec!["run", function, "--now", NOW, "--until-idle", "--json"];
    args.extend_from_slice(extra);
    let o = hk(db, &args);
    assert_eq!(o.status.code(), Some(0), "the run of {function}");
    let text = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("null")).unwrap_or(Value::Null)
}

/// `hk parity --json` on `db`: its exit code and report.
fn parity(db: &TestDb, plan: &Path) -> (i32, Value) {
    let o = hk(db, &["parity", plan.to_str().unwrap(), "--json"]);
    let text = String::from_utf8_lossy(&o.stdout);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (o.status.code().unwrap(), v["parity"].clone())
}

/// Plan each cron on a copy, run it on the original (with `extra`), and check full
/// agreement; the same plan against the untouched copy disagrees.
async fn every_cron_agrees(extra: &[&str]) -> (u64, u64) {
    let (mut crashes, mut duplicated) = (0, 0);
    for (f, deciding) in CRONS {
        let (copy, original) = pair().await;
        let (path, planned) = plan(&copy, f);
        let last = run(&original, f, extra);
        crashes += last["stats"]["crashes"].as_u64().unwrap_or(0);
        duplicated += last["stats"]["duplicated"].as_u64().unwrap_or(0);
        let (code, p) = parity(&original, &path);
        assert_eq!(code, 0, "{f}: {p:#}");
        assert_eq!(p["agrees"], true);
        assert_eq!(p["decisions"], planned.decisions.len() as u64);
        assert_eq!(p["totals"]["agreed"], planned.decisions.len() as u64, "{f}");
        assert_eq!(p["findings"], Value::Array(vec![]), "{f}");
        // The decisions of the cron and of each child it sent work to.
        let mut functions: Vec<&str> = p["by_rule"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["function"].as_str().unwrap())
            .collect();
        functions.dedup();
        assert_eq!(functions, deciding, "{f}: {p:#}");
        // Against the copy, where nothing ran, the plan's removals and claims are
        // not there: parity fails.
        let (code, p) = parity(&copy, &path);
        assert_eq!(code, 4, "{f} against the untouched copy: {p:#}");
        assert!(p["totals"]["disagreed"].as_u64().unwrap() > 0);
        std::fs::remove_file(&path).ok();
    }
    (crashes, duplicated)
}

#[tokio::test]
async fn the_plan_agrees_with_the_real_run_of_every_cron_on_the_demo_data() {
    every_cron_agrees(&[]).await;
}

#[tokio::test]
async fn the_plan_agrees_with_a_real_run_under_chaos() {
    let spec = "seed=7,duplicate=0.3,reorder=20,crash=0.1";
    let (crashes, duplicated) = every_cron_agrees(&["--chaos", spec]).await;
    // The chaos happened: handlers were aborted and messages delivered twice.
    assert!(
        crashes > 0 && duplicated > 0,
        "{crashes} crashes, {duplicated} duplicates"
    );
}

#[tokio::test]
async fn the_plan_names_the_rules_of_each_function() {
    let (copy, _) = pair().await;
    let (path, p, runs) = plan_and_runs(&copy, "remove-expired-members");
    std::fs::remove_file(&path).ok();
    // The decisions agree with the runs' counters: removed = updated_rows, kept =
    // skipped_rows.
    let total = |key: &str| -> u64 {
        runs.iter()
            .filter(|r| r["function"] == "remove-expired-members")
            .map(|r| r["report"][key].as_u64().unwrap_or(0))
            .sum()
    };
    let n = |d: &str| {
        p.decisions
            .iter()
            .filter(|x| x.function == "remove-expired-members" && x.decision == d)
            .count() as u64
    };
    assert_eq!(
        (n("removed"), n("kept")),
        (total("updated_rows"), total("skipped_rows"))
    );
    assert!(n("removed") > 0 && n("kept") > 0);
    let has = |f: &str, d: &str, r: &str| {
        p.decisions
            .iter()
            .any(|x| x.function == f && x.decision == d && x.rule == r)
    };
    assert!(has("remove-expired-members", "removed", "expired"));
    assert!(has("remove-expired-members", "kept", "last_owner"));
    assert!(has("delete-user", "deleted", "deleted"));
    let m = p.decisions.iter().find(|x| x.table == "members").unwrap();
    let identity = m.identity.as_ref().expect("the member existed");
    assert!(["user_id", "source_id", "source_type"]
        .iter()
        .all(|k| identity.contains_key(*k)));
    assert_eq!(p.now, t(NOW));
}

/// The ids of the plan's member decisions `(decision, rule)`.
fn members(p: &PlanFile, decision: &str, rule: &str) -> Vec<i64> {
    p.decisions
        .iter()
        .filter(|x| x.table == "members" && x.decision == decision && x.rule == rule)
        .map(|x| x.id)
        .collect()
}

#[tokio::test]
async fn each_perturbation_is_reported_exactly() {
    let f = "remove-expired-members";
    let (copy, original) = pair().await;
    let (path, p) = plan(&copy, f);
    let removed = members(&p, "removed", "expired");
    let kept = members(&p, "kept", "last_owner");
    let (extended, edited, reused) = (removed[0], removed[1], removed[2]);
    // Before GitLab's run: one membership no longer expires (nobody says when: its
    // updated_at stays), another is edited after the plan's clock.
    original
        .exec(&format!(
            "UPDATE members SET expires_at = NULL WHERE id = {extended};
             UPDATE members SET expires_at = NULL, updated_at = '{LATER}' WHERE id = {edited}"
        ))
        .await;
    run(&original, f, &[]);
    // After it: the kept last owner is removed, and a membership no decision concerns
    // takes the id of one the run removed.
    let decided: Vec<String> = p.decisions.iter().map(|d| d.id.to_string()).collect();
    original
        .exec(&format!(
            "DELETE FROM members WHERE id = {};
             UPDATE members SET id = {reused} WHERE id = (SELECT min(id) FROM members
               WHERE id NOT IN ({}))",
            kept[0],
            decided.join(",")
        ))
        .await;
    let (code, r) = parity(&original, &path);
    assert_eq!(code, 4, "{r:#}");
    assert_eq!(r["agrees"], false);
    let findings: Vec<(String, i64)> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["kind"].as_str().unwrap().to_string(),
                x["id"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut want = vec![
        ("disagreed".to_string(), extended),
        ("changed_meanwhile".to_string(), edited),
        ("disagreed".to_string(), kept[0]),
        ("id_reused".to_string(), reused),
    ];
    let mut got = findings.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "{r:#}");
    let n = p.decisions.len() as u64;
    assert_eq!(r["totals"]["agreed"], n - 4);
    assert_eq!(r["totals"]["disagreed"], 2);
    assert_eq!(r["totals"]["changed_meanwhile"], 1);
    assert_eq!(r["totals"]["id_reused"], 1);
    let finding = |id: i64| {
        r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .unwrap()
            .clone()
    };
    // What the database shows, beside our rule.
    let x = finding(extended);
    assert_eq!(
        (x["decision"].as_str(), x["rule"].as_str()),
        (Some("removed"), Some("expired"))
    );
    assert!(x["what"].as_str().unwrap().contains("the database kept it"));
    let x = finding(kept[0]);
    assert_eq!(x["rule"], "last_owner");
    assert_eq!(x["found"], Value::Null);
    assert!(x["what"]
        .as_str()
        .unwrap()
        .contains("the database removed it"));
    assert!(finding(edited)["found"]["updated_at"]
        .as_str()
        .unwrap()
        .starts_with("2026-03-02"));
    // The text form says the same and ends with the verdict.
    let o = hk(&original, &["parity", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("NOT in agreement: 2 disagreed, 1 id(s) reused, 1 changed meanwhile"));
    assert!(text.contains(&format!(
        "ID_REUSED: remove-expired-members members {reused}"
    )));
    std::fs::remove_file(&path).ok();
}

#[tokio::test]
async fn a_row_changed_meanwhile_alone_is_still_full_agreement_and_parity_only_reads() {
    let f = "remove-expired-members";
    let (copy, original) = pair().await;
    let (path, p) = plan(&copy, f);
    let edited = members(&p, "removed", "expired")[0];
    original
        .exec(&format!(
            "UPDATE members SET expires_at = NULL, updated_at = '{LATER}' WHERE id = {edited}"
        ))
        .await;
    run(&original, f, &[]);
    // Parity only reads: it runs where every transaction is read only, and the data
    // is the same afterwards.
    original
        .exec(&format!(
            "ALTER DATABASE {} SET default_transaction_read_only = on",
            original.name
        ))
        .await;
    let before = original.snapshot().await;
    let (code, r) = parity(&original, &path);
    assert_eq!(before, original.snapshot().await);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["totals"]["changed_meanwhile"], 1);
    assert_eq!(r["findings"][0]["id"], edited);
    assert_eq!(r["findings"][0]["kind"], "changed_meanwhile");
    // A plan that is not one is refused as a usage error.
    let bad = std::env::temp_dir().join(format!("hk-not-a-plan-{}.json", copy.name));
    std::fs::write(&bad, "{\"function\": \"x\"}\n").unwrap();
    let o = hk(&original, &["parity", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no {\"plan\": …} object found"));
    std::fs::remove_file(&bad).ok();
    std::fs::remove_file(&path).ok();
}
