//! `hk check`'s line "blockers under groups due for deletion" against real databases:
//! the rows of each blocking foreign key under the groups whose deletion is due, with
//! the operator action (advisory); rows under a group not yet due are not counted; a
//! database without the blocking tables gets a clean line.

use std::process::Output;

use integration_tests::fixtures::U;
use integration_tests::{Fx, TestDb};
use serde_json::Value;

mod common;
use common::{hk_on, text};

const NOW: &str = "2026-03-01T00:00:00Z";
const LINE: &str = "blockers under groups due for deletion";

fn hk_check_json(url: &str) -> (Output, Value) {
    let o = hk_on(url)
        .args(["check", "--now", NOW, "--json"])
        .output()
        .expect("hk runs");
    let j = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    (o, j)
}

fn line(j: &Value) -> Value {
    j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == LINE)
        .cloned()
        .unwrap_or_else(|| panic!("no blockers line: {j}"))
}

/// G100 (due: marked 2026-02-01, period 7) with G101 below it and P200 in G101; G900
/// not yet due (marked 2026-02-28) with P901.
async fn two_groups() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.users(&[U::human(11)]).await;
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.group(900, "later", None).await;
    fx.project(901, 900).await;
    db.exec(
        "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES (1, 7, '2024-01-01', '2024-01-01');
         INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
         VALUES (100, 11, '2026-02-01'), (900, 11, '2026-02-28');",
    )
    .await;
    db
}

#[tokio::test]
async fn the_rows_blocking_due_groups_are_counted_per_key_with_the_action() {
    let db = two_groups().await;
    db.exec(
        "INSERT INTO container_repositories (project_id, name, created_at, updated_at)
         VALUES (200, 'a', '2026-01-01', '2026-01-01'), (200, 'b', '2026-01-01', '2026-01-01'),
                (901, 'c', '2026-01-01', '2026-01-01');
         INSERT INTO packages_debian_group_distributions (group_id, codename, created_at, updated_at)
         VALUES (101, 'bookworm', '2026-01-01', '2026-01-01');
         INSERT INTO project_saved_replies (project_id, name, content, created_at, updated_at)
         VALUES (200, 'r', 'c', '2026-01-01', '2026-01-01');",
    )
    .await;
    let (_, j) = hk_check_json(&db.url);
    let l = line(&j);
    assert_eq!(l["ok"], false, "{l}");
    assert_eq!(l["required"], false, "advisory: {l}");
    assert_eq!(
        l["detail"],
        "these groups will end `blocked`, whole, until an operator acts: \
         container_repositories.project_id (fk_rails_32f7bf5aad, NO ACTION): 2 row(s) under group(s) 100; \
         packages_debian_group_distributions.group_id (fk_rails_0adf75c347, RESTRICT): 1 row(s) under group(s) 100; \
         deleted by group-destroy itself before their parent: \
         project_saved_replies.project_id (fk_rails_0ace76afbb, NO ACTION): 1 row(s) under group(s) 100"
    );
    let fix = l["fix"].as_str().unwrap();
    assert!(fix.contains("container_repositories.project_id (fk_rails_32f7bf5aad, NO ACTION): delete the project's container images in the container registry"), "{fix}");
    assert!(fix.contains("Debian distributions"), "{fix}");
    assert!(
        fix.ends_with("the deletion resumes at the next cron run"),
        "{fix}"
    );
}

#[tokio::test]
async fn without_the_blocking_tables_the_line_is_clean() {
    let db = two_groups().await;
    db.exec(
        "DROP TABLE IF EXISTS container_repositories, project_saved_replies,
           packages_debian_project_distributions, packages_debian_group_distributions,
           project_requirement_compliance_statuses, virtual_registries_container_cache_entries",
    )
    .await;
    let (_, j) = hk_check_json(&db.url);
    let l = line(&j);
    assert_eq!(l["ok"], true, "{l}");
    assert_eq!(
        l["detail"],
        "no row needing an outside service under the 1 due group(s)"
    );
}
