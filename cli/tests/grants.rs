//! `hk grants` (issue 35) on real PostgreSQL: a login role with nothing at all (even
//! PUBLIC's default CONNECT and schema USAGE revoked) that is given exactly the
//! printed GRANTs passes `hk check`, PREPAREs every catalogue statement, and runs
//! every cron function with its children over the demo data for real (the executor
//! checks each privilege as it runs); without one printed grant it fails `hk check`,
//! named. The same holds for the column-level script (`--columns`).

use std::process::Output;

use integration_tests::TestDb;
use shared::db::Connector;
use shared::Function;

mod common;
use common::{hk_on, text};

const NOW: &str = "2026-03-01T00:00:00Z";
/// GitLab 18.8's marker version (docs/gitlab-source-notes.md §A.1).
const GITLAB_18_8: &str = "20251231013427";

fn hk(url: &str, args: &[&str]) -> Output {
    hk_on(url)
        .args(args)
        .env("DB_LOCK_TIMEOUT_MS", "300")
        .output()
        .expect("hk runs")
}

/// A test database whose GitLab schema version is in range, and a login role on it
/// with nothing: PUBLIC's CONNECT on the database and USAGE on `public` are revoked
/// too. Returns the role and its URL.
async fn bare_role(db: &TestDb, prefix: &str) -> (String, String) {
    db.exec(&format!(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version character varying PRIMARY KEY);
         DELETE FROM schema_migrations; INSERT INTO schema_migrations VALUES ('{GITLAB_18_8}');"
    ))
    .await;
    let role = format!("{prefix}_{}", db.name);
    db.exec(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN;
         REVOKE ALL ON DATABASE {db} FROM PUBLIC; REVOKE ALL ON SCHEMA public FROM PUBLIC;",
        db = db.name
    ))
    .await;
    let url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    (role, url)
}

/// `hk grants` as the owner: the script.
fn grants(db: &TestDb, role: &str, columns: bool) -> String {
    let mut args = vec!["grants", "--role", role];
    if columns {
        args.push("--columns");
    }
    let o = hk(&db.url, &args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let script = String::from_utf8_lossy(&o.stdout).to_string();
    for l in script.lines().filter(|l| !l.starts_with("--")) {
        assert!(
            l.starts_with("GRANT ") && l.ends_with(&format!(" TO {role};")),
            "{l}"
        );
        assert!(!l.contains("TRUNCATE"), "{l}");
    }
    script
}

/// `hk check` as the role passes, and every catalogue statement PREPAREs as it.
async fn passes_as(url: &str) {
    let o = hk(url, &["check", "--now", NOW]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("✓ privileges: role "), "{out}");
    let c = Connector::from_url(url)
        .unwrap()
        .connect("t")
        .await
        .unwrap();
    let p = shared::preflight::prepare_catalogue(&c).await.unwrap();
    assert!(p.declared > 100, "{p:?}");
    assert!(p.failed.is_empty(), "{:?}", p.failed);
}

/// Demo data (loaded by the owner), then every cron function until idle as the role:
/// PREPARE does not check table privileges, the executor does.
async fn runs_as(db: &TestDb, role: &str, url: &str) {
    let o = hk(&db.url, &["seed", "demo", "--now", NOW]);
    assert!(o.status.success(), "{}", text(&o));
    // `hk run`'s own marker of a throwaway database (hk_meta), not the functions'.
    db.exec(&format!("GRANT USAGE ON SCHEMA hk_meta TO {role}"))
        .await;
    let users = db.count("users").await;
    for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let o = hk(url, &["run", f.name(), "--now", NOW, "--until-idle"]);
        assert_eq!(o.status.code(), Some(0), "{f} as {role}:\n{}", text(&o));
    }
    assert!(
        db.count("users").await < users,
        "the runs deleted users, so the delete paths ran"
    );
}

/// The privileges lines `hk check` fails with.
fn failures(url: &str) -> (Option<i32>, Vec<String>, String) {
    let o = hk(url, &["check", "--now", NOW]);
    let f = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('✗'))
        .map(str::to_string)
        .collect();
    (o.status.code(), f, text(&o))
}

#[tokio::test]
async fn the_printed_grants_are_what_a_role_with_nothing_needs() {
    let db = TestDb::new().await;
    let (role, url) = bare_role(&db, "g").await;
    let o = hk(&url, &["check", "--now", NOW]);
    assert!(!o.status.success(), "a role with nothing: {}", text(&o));

    let script = grants(&db, &role, false);
    for want in [
        format!("GRANT CONNECT ON DATABASE {} TO {role};", db.name),
        format!("GRANT USAGE ON SCHEMA public TO {role};"),
        format!("GRANT SELECT, UPDATE, DELETE ON members TO {role};"),
        format!("GRANT INSERT ON loose_foreign_keys_deleted_records TO {role};"),
        format!("GRANT USAGE ON SEQUENCE users_id_seq TO {role};"),
        // For `hk check` itself: GitLab's schema version.
        format!("GRANT SELECT ON schema_migrations TO {role};"),
    ] {
        assert!(
            script.lines().any(|l| l == want),
            "no `{want}` in:\n{script}"
        );
    }
    db.exec(&script).await;
    passes_as(&url).await;
    runs_as(&db, &role, &url).await;

    // One printed line less: the check names the table, what it lacks and the GRANT.
    let line = format!("GRANT SELECT, UPDATE, DELETE ON members TO {role};");
    db.exec(
        &line
            .replacen("GRANT", "REVOKE", 1)
            .replace(" TO ", " FROM "),
    )
    .await;
    let (code, f, out) = failures(&url);
    assert_eq!(code, Some(2), "{out}");
    assert_eq!(f.len(), 1, "{out}");
    assert!(
        f[0].starts_with(&format!(
            "✗ privileges on members: role {role} lacks SELECT, UPDATE, DELETE — GRANT SELECT, UPDATE, DELETE ON members TO {role}"
        )),
        "{}",
        f[0]
    );
    db.exec(&line).await;
    db.exec(&format!(
        "REVOKE USAGE ON SEQUENCE users_id_seq FROM {role}"
    ))
    .await;
    let (code, f, out) = failures(&url);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        f.len() == 1
            && f[0].starts_with("✗ privileges on users_id_seq:")
            && f[0].contains(&format!("GRANT USAGE ON SEQUENCE users_id_seq TO {role}")),
        "{out}"
    );
    // GitLab's schema version (the functions' cold-start release gate reads it)
    // without its grant: the version line and the privileges line name it, no error.
    db.exec(&format!(
        "GRANT USAGE ON SEQUENCE users_id_seq TO {role}; REVOKE SELECT ON schema_migrations FROM {role}"
    ))
    .await;
    let (code, f, out) = failures(&url);
    assert_eq!(code, Some(2), "{out}");
    let grant = format!("GRANT SELECT ON schema_migrations TO {role}");
    assert!(
        f.len() == 2
            && f[0].starts_with(&format!(
                "✗ GitLab schema: role {role} may not read schema_migrations"
            ))
            && f[1].starts_with("✗ privileges on schema_migrations:")
            && f[1].contains("gitlab::release::NEWEST_MIGRATION")
            && f.iter().all(|l| l.contains(&grant)),
        "{out}"
    );
}

#[tokio::test]
async fn the_column_level_grants_are_enough_too() {
    let db = TestDb::new().await;
    let (role, url) = bare_role(&db, "gc").await;
    let script = grants(&db, &role, true);
    let settings = script
        .lines()
        .find(|l| l.starts_with("GRANT SELECT (") && l.contains(" ON application_settings "))
        .unwrap_or_else(|| panic!("no column-level SELECT on application_settings:\n{script}"));
    assert!(settings.contains("deletion_adjourned_period"), "{settings}");
    // A statement reads members.ctid (no column privilege covers a system column), and
    // DELETE has no column form: both table-level.
    assert!(
        script.lines().any(|l| l.starts_with("GRANT SELECT, ")
            && l.contains("DELETE ON members ")
            && !l.contains('(')),
        "SELECT and DELETE on members stay table-level:\n{script}"
    );
    db.exec(&script).await;
    passes_as(&url).await;
    runs_as(&db, &role, &url).await;
    // One column less: the check fails on that table.
    db.exec(&format!(
        "REVOKE SELECT (deletion_adjourned_period) ON application_settings FROM {role}"
    ))
    .await;
    let (code, f, out) = failures(&url);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        f.iter().any(|l| l.starts_with(&format!(
            "✗ privileges on application_settings: role {role} lacks SELECT"
        ))),
        "{out}"
    );
}
