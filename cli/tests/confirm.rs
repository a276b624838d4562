//! Confirmation before destructive commands (issue 51): `hk run` of a function that
//! deletes, against a database `hk` did not create (no `hk_meta.throwaway`), and `hk
//! replay dlq` of a deletion worker ask on a terminal and, without one (as here), need
//! `--yes`; `--dry-run` never asks; a throwaway database and the notices never ask.
//! Needs `DATABASE_URL` and `MOTO_ENDPOINT`.

use std::process::{Command, Output};

use integration_tests::aws::moto_endpoint;
use integration_tests::TestDb;

mod common;
use common::{hk_on, text};

fn run(c: &mut Command) -> Output {
    let o = c
        .stdin(std::process::Stdio::null())
        .output()
        .expect("hk runs");
    eprintln!("{}", text(&o));
    o
}

#[tokio::test]
async fn a_deleting_run_on_a_database_hk_did_not_create_needs_yes() {
    // A GitLab model without the throwaway marker, as a real database is.
    let db = TestDb::empty().await;
    let o = run(hk_on(&db.url).args(["migrate", "--json"]));
    assert!(o.status.success());
    let now = ["--now", "2026-03-01T00:10:00Z"];
    let o = run(hk_on(&db.url)
        .args(["run", "remove-expired-members"])
        .args(now));
    assert_eq!(o.status.code(), Some(2), "refused without --yes");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not a throwaway") && err.contains("--yes"),
        "{err}"
    );
    assert!(!err.contains("run_id"), "nothing ran: {err}");
    // A dry run never asks; --yes goes on.
    let o = run(hk_on(&db.url)
        .args(["run", "remove-expired-members", "--dry-run"])
        .args(now));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(hk_on(&db.url)
        .args(["run", "remove-expired-members", "--yes"])
        .args(now));
    assert!(o.status.success(), "{}", text(&o));
    // The harness's databases are throwaway: no question there.
    let fresh = TestDb::new().await;
    let o = run(hk_on(&fresh.url)
        .args(["run", "remove-expired-members"])
        .args(now));
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn replaying_a_deletion_workers_dlq_needs_yes_and_a_dry_run_never_asks() {
    let endpoint = moto_endpoint();
    let prefix = format!("cf{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let hk = |args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
        c.args(args).env("RUST_LOG", "warn").env_remove("HK_STACK");
        run(&mut c)
    };
    let env_file = std::env::temp_dir().join(format!("{prefix}.env"));
    let o = hk(&[
        "local",
        "setup",
        "--endpoint",
        &endpoint,
        "--prefix",
        &prefix,
        "--env-file",
        env_file.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let _ = std::fs::remove_file(&env_file);
    let q = [
        "--endpoint",
        &endpoint,
        "--prefix",
        &prefix,
        "--wait-s",
        "1",
        "--window-s",
        "1",
    ];
    for worker in [
        "group-destroy",
        "delete-user",
        "delete-placeholder-user",
        "storage-cleanup",
    ] {
        let o = hk(&[&["replay", "dlq", worker][..], &q[..]].concat());
        assert_eq!(o.status.code(), Some(2), "{worker}: refused without --yes");
        assert!(
            text(&o).contains("--yes") && text(&o).contains(worker),
            "{}",
            text(&o)
        );
        let o = hk(&[&["replay", "dlq", worker, "--dry-run"][..], &q[..]].concat());
        assert!(o.status.success(), "{worker}: {}", text(&o));
        let o = hk(&[&["replay", "dlq", worker, "--yes"][..], &q[..]].concat());
        assert!(o.status.success(), "{worker}: {}", text(&o));
    }
    // A function that does not delete replays without a question.
    let o = hk(&[&["replay", "dlq", "deliver-notification"][..], &q[..]].concat());
    assert!(o.status.success(), "{}", text(&o));
}
