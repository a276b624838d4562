//! `hk check` tells the truth (issue 33): a role with SELECT only fails naming each
//! missing grant and the statements that need it; a sequence a column default draws
//! from needs USAGE; a database whose sessions start read only fails; a column NOT
//! NULL by a `CHECK` constraint that an insert leaves out fails; an `ON CONFLICT`
//! target without its unique index fails; GitLab's schema version is read from
//! `schema_migrations`; a lock held by another session is a busy result (exit 1,
//! retry), not an incompatible schema (exit 2).

use std::process::Output;

use integration_tests::TestDb;

mod common;
use common::{hk_on, text};

const NOW: &str = "2026-03-01T00:00:00Z";
/// GitLab 18.8's marker version (docs/gitlab-source-notes.md §A.1).
const GITLAB_18_8: &str = "20251231013427";
/// GitLab 18.1's newest marker.
const GITLAB_18_1: &str = "20250610152957";

fn hk_check(url: &str) -> Output {
    hk_on(url)
        .args(["check", "--now", NOW])
        .env("DB_LOCK_TIMEOUT_MS", "300")
        .output()
        .expect("hk runs")
}

/// The failed required lines.
fn failures(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('✗'))
        .map(str::to_string)
        .collect()
}

/// GitLab's `schema_migrations` holding `versions` (the test model may have it).
async fn gitlab_versions(db: &TestDb, versions: &[&str]) {
    db.exec(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version character varying PRIMARY KEY);
         DELETE FROM schema_migrations;",
    )
    .await;
    for v in versions {
        db.exec(&format!("INSERT INTO schema_migrations VALUES ('{v}')"))
            .await;
    }
}

/// A database that passes every check: GitLab 18.8's marker recorded.
async fn passing_db() -> TestDb {
    let db = TestDb::new().await;
    gitlab_versions(&db, &[GITLAB_18_8]).await;
    let o = hk_check(&db.url);
    assert!(failures(&o).is_empty(), "{}", text(&o));
    db
}

/// A login role `name` on the test cluster (roles are cluster-wide: the name is the
/// database's) and `db.url` connecting as it.
async fn role_url(db: &TestDb, grants: &str) -> String {
    let role = format!("r_{}", db.name);
    db.exec(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN;
         GRANT CONNECT ON DATABASE {db} TO {role}; GRANT USAGE ON SCHEMA public TO {role};
         {grants}",
        db = db.name,
        grants = grants.replace("{role}", &role),
    ))
    .await;
    db.url.replacen("postgres@", &format!("{role}@"), 1)
}

#[tokio::test]
async fn a_select_only_role_fails_naming_each_missing_grant() {
    let db = passing_db().await;
    let url = role_url(
        &db,
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};",
    )
    .await;
    let o = hk_check(&url);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    let f = failures(&o);
    let members = f
        .iter()
        .find(|l| l.starts_with("✗ privileges on members:"))
        .unwrap_or_else(|| panic!("no members line:\n{out}"));
    assert!(
        members.contains("lacks UPDATE, DELETE")
            && members.contains(&format!("GRANT UPDATE, DELETE ON members TO r_{}", db.name))
            && members.contains("batches::remove_expired_members::"),
        "{members}"
    );
    let users = f
        .iter()
        .find(|l| l.starts_with("✗ privileges on users:"))
        .unwrap_or_else(|| panic!("no users line:\n{out}"));
    assert!(
        users.contains("lacks INSERT, UPDATE, DELETE")
            && users.contains("DELETE by 1 statement(s): workers::delete_user::DELETE_USER"),
        "{users}"
    );
    // Every failure is a grant: the schema itself fits.
    assert!(f.iter().all(|l| l.starts_with("✗ privileges on ")), "{out}");
    assert!(out.contains("✓ catalogue: all "), "{out}");

    // With the grants, the same role passes (GitLab's ids draw from sequences).
    db.exec(&format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO r_{0};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO r_{0}",
        db.name
    ))
    .await;
    let o = hk_check(&url);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("✓ privileges: role r_"), "{}", text(&o));
}

#[tokio::test]
async fn a_sequence_a_default_draws_from_needs_usage() {
    let db = passing_db().await;
    let url = role_url(
        &db,
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};",
    )
    .await;
    // A sequence created after the grants: the role may not use it.
    db.exec(
        "ALTER TABLE ghost_user_migrations ALTER COLUMN id DROP IDENTITY IF EXISTS;
         CREATE SEQUENCE ghost_user_migrations_id_seq2;
         ALTER TABLE ghost_user_migrations
           ALTER COLUMN id SET DEFAULT nextval('ghost_user_migrations_id_seq2'::regclass)",
    )
    .await;
    let o = hk_check(&url);
    let f = failures(&o);
    assert_eq!(f.len(), 1, "{}", text(&o));
    assert!(
        f[0].starts_with("✗ privileges on ghost_user_migrations_id_seq2:")
            && f[0].contains("GRANT USAGE ON SEQUENCE ghost_user_migrations_id_seq2")
            && f[0].contains("gitlab::user_removal::INSERT_MIGRATION"),
        "{}",
        f[0]
    );
    assert_eq!(o.status.code(), Some(2));
}

#[tokio::test]
async fn a_database_whose_sessions_start_read_only_fails() {
    let db = passing_db().await;
    db.exec(&format!(
        "ALTER DATABASE {} SET default_transaction_read_only = on",
        db.name
    ))
    .await;
    let o = hk_check(&db.url);
    let f = failures(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        f.len() == 1
            && f[0].starts_with("✗ writable: sessions start read only")
            && f[0].contains("set by database")
            && f[0].contains("ALTER DATABASE"),
        "{}",
        text(&o)
    );
}

#[tokio::test]
async fn a_check_enforced_not_null_column_left_out_of_an_insert_fails() {
    let db = passing_db().await;
    db.exec(
        "ALTER TABLE users ADD COLUMN tier_id bigint;
         ALTER TABLE users ADD CONSTRAINT check_tier_id_not_null CHECK (tier_id IS NOT NULL) NOT VALID",
    )
    .await;
    let o = hk_check(&db.url);
    let f = failures(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        f.iter().any(
            |l| l.starts_with("✗ insert into users (gitlab::user_removal::")
                && l.contains(
                    "users.tier_id (NOT NULL by CHECK constraint check_tier_id_not_null)"
                )
        ),
        "{}",
        text(&o)
    );
}

#[tokio::test]
async fn an_on_conflict_target_without_its_unique_index_fails() {
    let db = passing_db().await;
    db.exec(
        "DO $$ DECLARE r record; BEGIN
           FOR r IN SELECT i.indexrelid::regclass::text AS idx, c.conname::text AS con
                    FROM pg_index i
                    LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
                    WHERE i.indrelid = 'ghost_user_migrations'::regclass AND i.indisunique
                      AND NOT i.indisprimary LOOP
             IF r.con IS NOT NULL THEN
               EXECUTE format('ALTER TABLE ghost_user_migrations DROP CONSTRAINT %I', r.con);
             ELSE EXECUTE format('DROP INDEX %s', r.idx); END IF;
           END LOOP; END $$",
    )
    .await;
    let o = hk_check(&db.url);
    let f = failures(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // Both forms of the row's insert (before 19.1, and with 19.1's user_type) name it.
    assert!(
        f.len() == 2
            && f[0].starts_with("✗ on conflict gitlab::user_removal::INSERT_MIGRATION:")
            && f[1].starts_with("✗ on conflict gitlab::user_removal::INSERT_MIGRATION_TYPED:")
            && f.iter()
                .all(|l| l.contains("ghost_user_migrations (user_id)")),
        "{}",
        text(&o)
    );
}

#[tokio::test]
async fn the_gitlab_version_is_read_from_schema_migrations() {
    let db = passing_db().await;
    let o = hk_check(&db.url);
    assert!(
        text(&o).contains(&format!(
            "✓ GitLab schema: GitLab 18.8 found (newest migration {GITLAB_18_8}"
        )),
        "{}",
        text(&o)
    );
    gitlab_versions(&db, &["20250502102329", GITLAB_18_1]).await;
    let o = hk_check(&db.url);
    let f = failures(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        f.len() == 1
            && f[0].starts_with(&format!(
                "✗ GitLab schema: GitLab 18.1 found (newest migration {GITLAB_18_1})"
            ))
            && f[0].contains("20250709143510"),
        "{}",
        text(&o)
    );
    db.exec("DROP TABLE schema_migrations").await;
    let o = hk_check(&db.url);
    assert!(
        text(&o).contains("✗ GitLab schema: not a GitLab database (no schema_migrations)"),
        "{}",
        text(&o)
    );
}

#[tokio::test]
async fn a_lock_held_on_a_catalogue_table_is_busy_not_incompatible() {
    let db = passing_db().await;
    let other = db.session().await;
    other
        .batch_execute("BEGIN; LOCK TABLE members IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let o = hk_check(&db.url);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "retryable:\n{out}");
    let f = failures(&o);
    assert!(
        f.iter()
            .any(|l| l.starts_with("✗ catalogue: database busy: lock held on members (retry)")),
        "{out}"
    );
    assert!(!out.contains("(a missing migration?)"), "{out}");
    assert!(
        out.contains("the database is busy, retry"),
        "the summary says so: {out}"
    );
    other.batch_execute("ROLLBACK").await.unwrap();
    let o = hk_check(&db.url);
    assert_eq!(o.status.code(), Some(0), "released: {}", text(&o));
}

/// A trigger function that runs as the role (GitLab's loose-foreign-key trigger on
/// `users`) needs the role's grants on what it writes: the statements that fire it
/// need them.
#[tokio::test]
async fn a_trigger_that_runs_as_the_role_needs_its_grants() {
    let db = passing_db().await;
    db.exec(
        "CREATE TABLE deleted_user_records (id bigserial PRIMARY KEY, user_id bigint);
         CREATE FUNCTION record_deleted_users() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO deleted_user_records (user_id) SELECT old_table.id FROM old_table;
           RETURN NULL;
         END $$;
         CREATE TRIGGER users_record_deleted AFTER DELETE ON users
           REFERENCING OLD TABLE AS old_table FOR EACH STATEMENT
           EXECUTE FUNCTION record_deleted_users();",
    )
    .await;
    let url = role_url(
        &db,
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};
         REVOKE INSERT ON deleted_user_records FROM {role};",
    )
    .await;
    let o = hk_check(&url);
    let f = failures(&o);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        f.len() == 1
            && f[0].starts_with("✗ privileges on deleted_user_records:")
            && f[0].contains("lacks INSERT")
            && f[0].contains("workers::delete_user::DELETE_USER (trigger users_record_deleted)"),
        "{}",
        text(&o)
    );
    // The same function as SECURITY DEFINER runs as its owner: no grant needed.
    db.exec("ALTER FUNCTION record_deleted_users() SECURITY DEFINER")
        .await;
    let o = hk_check(&url);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// A table in a schema the role may not use is "does not exist" to the server: the
/// line names the grant (USAGE on the schema), not a missing migration.
#[tokio::test]
async fn a_schema_the_role_may_not_use_is_a_grant_not_a_migration() {
    let db = passing_db().await;
    db.exec("REVOKE USAGE ON SCHEMA public FROM PUBLIC").await;
    let role = format!("r_{}", db.name);
    let url = role_url(
        &db,
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
         REVOKE USAGE ON SCHEMA public FROM {role};",
    )
    .await;
    let o = hk_check(&url);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    let f = failures(&o);
    let line = f
        .iter()
        .find(|l| l.starts_with("✗ catalogue: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("statement(s) name tables of schema public, which role")
            && line.contains(&format!("GRANT USAGE ON SCHEMA public TO {role}")),
        "{line}"
    );
    assert_eq!(
        f.iter().filter(|l| l.starts_with("✗ catalogue")).count(),
        1,
        "one line for the schema: {out}"
    );
    assert!(!out.contains("(a missing migration?)"), "{out}");
}
