//! `hk parity` cannot agree falsely (issue 47, docs/parity.md): a removed row the
//! database kept with only `updated_at` moved, a row of the function's selection the
//! plan never decided, an authorization a removal implies gone that is still there,
//! an empty or stopped plan, and a group whose deletion state differs are each
//! reported as a disagreement with its reason (exit 4).

use std::path::{Path, PathBuf};

use integration_tests::state::demo_without_ghost;
use integration_tests::{t, TestDb};
use serde_json::Value;

mod common;
use common::hk_on;

const NOW: &str = "2026-03-01T00:10:00Z";
/// A day after the plan's clock.
const LATER: &str = "2026-03-02T00:00:00Z";

fn hk(db: &TestDb, args: &[&str]) -> std::process::Output {
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

/// The copy the plan runs on and the original GitLab's cron (here `hk run`) runs on.
async fn pair() -> (TestDb, TestDb) {
    (
        demo_without_ghost(t(NOW)).await,
        demo_without_ghost(t(NOW)).await,
    )
}

/// The plan of `function` on `copy`: its file and its `plan` object.
fn plan(copy: &TestDb, function: &str) -> (PathBuf, Value) {
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
    let path = std::env::temp_dir().join(format!("hk-plan-gaps-{}.json", copy.name));
    std::fs::write(&path, &o.stdout).unwrap();
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .unwrap();
    (path, last["plan"].clone())
}

/// The real run of `function` on `db`.
fn run(db: &TestDb, function: &str) {
    let o = hk(
        db,
        &["run", function, "--now", NOW, "--until-idle", "--json"],
    );
    assert_eq!(o.status.code(), Some(0), "the run of {function}");
}

/// `hk parity --json` of the plan at `path` on `db`: exit code and report.
fn parity(db: &TestDb, path: &Path) -> (i32, Value) {
    let o = hk(db, &["parity", path.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    (o.status.code().unwrap(), v["parity"].clone())
}

/// The findings of `r` as `(kind, table, id, what)`.
fn findings(r: &Value) -> Vec<(String, String, i64, String)> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_string(),
                f["table"].as_str().unwrap().to_string(),
                f["id"].as_i64().unwrap(),
                f["what"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The first decision of `plan` matching `f`.
fn decision(plan: &Value, f: impl Fn(&Value) -> bool) -> Value {
    plan["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| f(d))
        .cloned()
        .expect("such a decision")
}

/// Rewrite the plan file at `path` with `edit` applied to its `plan` object.
fn edit_plan(path: &Path, edit: impl Fn(&mut Value)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    edit(&mut lines.last_mut().unwrap()["plan"]);
    let out: Vec<String> = lines.iter().map(Value::to_string).collect();
    std::fs::write(path, out.join("\n")).unwrap();
}

#[tokio::test]
async fn a_removed_row_kept_with_only_updated_at_moved_disagrees() {
    let f = "remove-expired-members";
    let (copy, original) = pair().await;
    let (path, p) = plan(&copy, f);
    let d = decision(&p, |d| {
        d["table"] == "members" && d["decision"] == "removed"
    });
    let id = d["id"].as_i64().unwrap();
    // GitLab's run "keeps" it: the row comes back as it was, only touched later.
    original
        .exec(&format!(
            "CREATE TABLE kept_member AS SELECT * FROM members WHERE id = {id}"
        ))
        .await;
    run(&original, f);
    original
        .exec(&format!(
            "INSERT INTO members SELECT * FROM kept_member; DROP TABLE kept_member;
             UPDATE members SET updated_at = '{LATER}' WHERE id = {id}"
        ))
        .await;
    let (code, r) = parity(&original, &path);
    assert_eq!(code, 4, "{r:#}");
    let got = findings(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    let (kind, table, fid, what) = &got[0];
    assert_eq!(
        (kind.as_str(), table.as_str(), *fid),
        ("disagreed", "members", id)
    );
    assert!(what.contains("only updated_at moved"), "{what}");
    std::fs::remove_file(&path).ok();
}

/// Every cron's plan records its selection (the deciding function, the table, the
/// ids), and a row of it the plan never decided is a disagreement.
#[tokio::test]
async fn a_row_of_the_selection_the_plan_never_decided_disagrees() {
    for (f, decider, table) in [
        (
            "remove-expired-members",
            "remove-expired-members",
            "members",
        ),
        (
            "schedule-prune-deletions",
            "prune-deletions",
            "members_deletion_schedules",
        ),
        (
            "adjourned-group-deletion",
            "adjourned-group-deletion",
            "namespaces",
        ),
        (
            "placeholder-user-cleanup",
            "placeholder-user-cleanup",
            "import_placeholder_user_details",
        ),
        ("pat-expiring", "pat-expiring", "personal_access_tokens"),
    ] {
        let (copy, original) = pair().await;
        let (path, p) = plan(&copy, f);
        let sel = &p["selection"];
        assert_eq!(
            (sel["function"].as_str(), sel["table"].as_str()),
            (Some(decider), Some(table)),
            "{f}: {sel:#}"
        );
        let selected = sel["ids"].as_array().unwrap();
        assert!(!selected.is_empty(), "{f}: the demo data has work for it");
        let d = decision(&p, |d| {
            d["function"] == decider && d["table"] == table && selected.contains(&d["id"])
        });
        let id = d["id"].as_i64().unwrap();
        // A plan cut short: every decision on that row is missing (and, for a
        // membership, its authorizations).
        edit_plan(&path, |plan| {
            plan["decisions"]
                .as_array_mut()
                .unwrap()
                .retain(|x| x["id"] != id || x["table"] != table);
            plan["implied"]
                .as_array_mut()
                .unwrap()
                .retain(|x| table != "members" || x["member"] != id);
        });
        run(&original, f);
        let (code, r) = parity(&original, &path);
        assert_eq!(code, 4, "{f}: {r:#}");
        let got = findings(&r);
        assert_eq!(got.len(), 1, "{f}: {got:?}");
        let (kind, ftable, fid, what) = &got[0];
        assert_eq!(
            (kind.as_str(), ftable.as_str(), *fid),
            ("disagreed", table, id),
            "{f}"
        );
        assert!(
            what.contains("selection") && what.contains("never decided it"),
            "{f}: {what}"
        );
        std::fs::remove_file(&path).ok();
    }
}

#[tokio::test]
async fn an_authorization_a_removal_implies_gone_that_remains_disagrees() {
    let f = "remove-expired-members";
    let (copy, original) = pair().await;
    let (path, p) = plan(&copy, f);
    let implied = p["implied"].as_array().unwrap();
    assert!(
        !implied.is_empty(),
        "the removals leave authorizations gone"
    );
    let (user, project) = (
        implied[0]["user_id"].as_i64().unwrap(),
        implied[0]["project_id"].as_i64().unwrap(),
    );
    run(&original, f);
    let (code, r) = parity(&original, &path);
    assert_eq!(code, 0, "the real run removed them all: {r:#}");
    // Left behind (a refresh GitLab did not make).
    original
        .exec(&format!(
            "INSERT INTO project_authorizations (user_id, project_id, access_level)
             VALUES ({user}, {project}, 30)"
        ))
        .await;
    let (code, r) = parity(&original, &path);
    assert_eq!(code, 4, "{r:#}");
    let got = findings(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    let (kind, table, fid, what) = &got[0];
    assert_eq!(
        (kind.as_str(), table.as_str(), *fid),
        ("disagreed", "project_authorizations", project)
    );
    assert!(
        what.contains(&format!("user {user}")) && what.contains("still has"),
        "{what}"
    );
    std::fs::remove_file(&path).ok();
}

#[tokio::test]
async fn an_empty_or_stopped_plan_is_not_agreement() {
    let f = "remove-expired-members";
    let (copy, original) = pair().await;
    let (path, _) = plan(&copy, f);
    run(&original, f);
    assert_eq!(parity(&original, &path).0, 0);
    // The whole selection removed, and a plan whose decisions list is empty.
    edit_plan(&path, |plan| {
        plan["decisions"] = Value::Array(vec![]);
        plan["implied"] = Value::Array(vec![]);
        plan["selection"] = Value::Null;
    });
    let (code, r) = parity(&original, &path);
    assert_eq!(code, 4, "{r:#}");
    assert_eq!(r["agrees"], false);
    assert!(
        r["problems"][0]
            .as_str()
            .unwrap()
            .contains("holds no decision"),
        "{r:#}"
    );
    let o = hk(&original, &["parity", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("NOT in agreement: the plan holds no decision")
    );
    // One that stopped before the end of its run.
    let (path2, _) = plan(&copy, f);
    edit_plan(&path2, |plan| {
        plan["stopped"] = Value::String("the lock budget ran out".into());
    });
    let (code, r) = parity(&original, &path2);
    assert_eq!(code, 4, "{r:#}");
    assert!(
        r["problems"][0]
            .as_str()
            .unwrap()
            .contains("stopped before the end"),
        "{r:#}"
    );
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&path2).ok();
}

#[tokio::test]
async fn a_group_whose_deletion_state_differs_disagrees() {
    let f = "adjourned-group-deletion";
    let (copy, original) = pair().await;
    let (path, p) = plan(&copy, f);
    let d = decision(&p, |d| {
        d["table"] == "namespaces" && d["expect"] == "present"
    });
    let id = d["id"].as_i64().unwrap();
    let scheduled = d["watched"]["deletion_schedule"].as_bool().unwrap();
    run(&original, f);
    assert_eq!(parity(&original, &path).0, 0);
    // Still present either way; only its deletion state moves.
    if scheduled {
        original
            .exec(&format!(
                "DELETE FROM group_deletion_schedules WHERE group_id = {id}"
            ))
            .await;
    } else {
        original
            .exec(&format!(
                "INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
                 VALUES ({id}, (SELECT min(id) FROM users), '2026-01-01')"
            ))
            .await;
    }
    let (code, r) = parity(&original, &path);
    assert_eq!(code, 4, "{r:#}");
    let got = findings(&r);
    assert_eq!(got.len(), 1, "{got:?}");
    let (kind, table, fid, what) = &got[0];
    assert_eq!(
        (kind.as_str(), table.as_str(), *fid),
        ("disagreed", "namespaces", id)
    );
    assert!(what.contains("deletion_schedule"), "{what}");
    std::fs::remove_file(&path).ok();
}
