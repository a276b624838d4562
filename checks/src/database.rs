//! `hk check`'s database-level facts: the database accepts writes, its GitLab schema
//! version is in the supported range, and every `ON CONFLICT` target of the catalogue
//! has the unique index it needs.
//!
//! Owns: the writable check (a replica, `pg_is_in_recovery()`, or
//! `default_transaction_read_only` as the role and database configure it, read before
//! `hk check` makes its own session read only), the release classification of
//! GitLab's `schema_migrations` by the marker versions of docs/gitlab-source-notes.md
//! §A.1 ([`release_of`], [`schema_version_check`]), and the `ON CONFLICT` arbiter
//! check (PREPARE does not plan, so a missing unique index shows only when the
//! statement runs), and the instance binding of storage removal (`instance`:
//! `application_settings.uuid` against `GITLAB_INSTANCE_UUID`).

use anyhow::Result;
use tokio_postgres::Client;

use super::{sql, Check};

use shared::gitlab::release::{self, Fit};
pub use shared::gitlab::release::{release_of, MARKERS, NEWEST, OLDEST, PAST_NEWEST};

/// The schema version line for the newest `schema_migrations` version (`None`: the
/// table is empty; `table` false: there is no such table); `accepted` is
/// `GITLAB_SCHEMA_ACCEPTED`. A release past the tested range fails, as the functions'
/// cold start refuses it, unless the operator accepted that schema.
pub fn schema_version_check(table: bool, newest: Option<&str>, accepted: Option<&str>) -> Check {
    let name = "GitLab schema";
    let range = format!("supported {}", release::range());
    let Some(v) = newest.filter(|_| table) else {
        return Check::fail(
            name,
            if table {
                "schema_migrations holds no migration version".to_string()
            } else {
                "not a GitLab database (no schema_migrations)".to_string()
            },
            format!("point DATABASE_URL at GitLab's database (gitlabhq_production), migrated by GitLab {}", release::range()),
        );
    };
    let next = release::PAST_NEWEST;
    match release::classify(v, accepted) {
        Fit::Tested("18.9") => Check::pass(
            name,
            format!("GitLab 18.9 to 18.11 found (newest migration {v}, before 19.0's; {range})"),
        ),
        Fit::Tested(r) => Check::pass(name, format!("GitLab {r} found (newest migration {v}; {range})")),
        Fit::Newer { accepted: true } => Check::pass(
            name,
            format!(
                "GitLab newer than {NEWEST} found (newest migration {v}): newer than tested ({range}), \
                 accepted by GITLAB_SCHEMA_ACCEPTED={}",
                accepted.unwrap_or_default()
            ),
        ),
        Fit::Newer { accepted: false } => Check::fail(
            name,
            format!("GitLab newer than {NEWEST} found (newest migration {v}, at or past {next}): newer than tested ({range}); every function refuses it at cold start"),
            format!(
                "read the release notes of every GitLab release after {NEWEST} for the tables this bundle touches; \
                 if nothing it relies on changed, set GITLAB_SCHEMA_ACCEPTED={v} (stack parameter GitlabSchemaAccepted; \
                 `hk check --accept-schema {v}`), else wait for a bundle tested on it"
            ),
        ),
        Fit::Older(found) => Check::fail(
            name,
            format!(
                "GitLab {} found (newest migration {v}): older than the {range}",
                found.map_or("before 18.0".to_string(), str::to_string)
            ),
            format!(
                "upgrade GitLab to {OLDEST} or later: its migrations from {} on are missing",
                release::marker(OLDEST)
            ),
        ),
    }
}

/// The GitLab schema version line, read from `schema_migrations`. A role that may not
/// read it fails the line, naming the grant: the functions read it too (the release
/// gate at cold start).
pub async fn schema_version(c: &Client, accepted: Option<&str>) -> Result<Check> {
    let (table, newest) = match release::read(c).await? {
        release::Read::Version(v) => (true, Some(v)),
        release::Read::Empty => (true, None),
        release::Read::NoTable => (false, None),
        release::Read::NotPermitted => {
            let role: String = c.query_one(sql::ROLE, &[]).await?.get(0);
            return Ok(Check::fail(
                "GitLab schema",
                format!("role {role} may not read schema_migrations: the GitLab version is not known"),
                format!("GRANT SELECT ON schema_migrations TO {role} (`hk grants` prints it: every function reads GitLab's schema version there at cold start)"),
            ));
        }
    };
    Ok(schema_version_check(table, newest.as_deref(), accepted))
}

/// The writable line, from `(in recovery, default_transaction_read_only,
/// transaction_read_only, source of the default)` as a new session of the role has
/// them.
pub fn writable_check(recovery: bool, default_ro: &str, ro: &str, source: &str) -> Check {
    let name = "writable";
    if recovery {
        return Check::fail(
            name,
            "the server is a replica (pg_is_in_recovery()): every write fails",
            "point DATABASE_URL at the primary",
        );
    }
    if default_ro == "on" || ro == "on" {
        let how = match source {
            "database" => "ALTER DATABASE <db> RESET default_transaction_read_only",
            "user" => "ALTER ROLE <role> RESET default_transaction_read_only",
            "database user" => {
                "ALTER ROLE <role> IN DATABASE <db> RESET default_transaction_read_only"
            }
            _ => "set default_transaction_read_only = off where it is set (server configuration, connection options or pooler)",
        };
        return Check::fail(
            name,
            format!("sessions start read only (default_transaction_read_only = {default_ro}, set by {source}): every write fails"),
            how,
        );
    }
    Check::pass(name, "a primary; sessions of this role start read-write")
}

/// The writable line for session `c`, before it is made read only.
pub async fn writable(c: &Client) -> Result<Check> {
    let r = c.query_one(sql::WRITABLE, &[]).await?;
    Ok(writable_check(
        r.get(0),
        r.get::<_, String>(1).as_str(),
        r.get::<_, String>(2).as_str(),
        r.get::<_, String>(3).as_str(),
    ))
}

/// `(table, conflict columns, statement)` of every `INSERT INTO t … ON CONFLICT
/// (columns)` of the catalogue.
pub fn conflict_targets() -> Vec<(String, Vec<String>, String)> {
    let mut out = Vec::new();
    for s in shared::catalogue::all() {
        let mut table = None;
        let mut rest = s.text;
        loop {
            let ins = rest.find("INSERT INTO ");
            let conf = rest.find("ON CONFLICT (");
            match (ins, conf) {
                (Some(i), c) if c.is_none_or(|c| i < c) => {
                    let after = &rest[i + "INSERT INTO ".len()..];
                    table = Some(
                        after
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect::<String>(),
                    );
                    rest = after;
                }
                (_, Some(c)) => {
                    let after = &rest[c + "ON CONFLICT (".len()..];
                    if let (Some(t), Some(end)) = (&table, after.find(')')) {
                        let cols = after[..end]
                            .split(',')
                            .map(|c| c.trim().to_string())
                            .collect();
                        out.push((t.clone(), cols, format!("{}::{}", s.module, s.name)));
                    }
                    rest = after;
                }
                _ => break,
            }
        }
    }
    out
}

/// One line per `ON CONFLICT` target without a unique index on exactly its columns,
/// or one line saying all have one.
pub async fn conflict_arbiters(c: &Client) -> Result<Vec<Check>> {
    let targets = conflict_targets();
    let mut out = Vec::new();
    for (table, cols, stmt) in &targets {
        let n: i64 = c
            .query_one(sql::ARBITER_INDEXES, &[table, cols])
            .await?
            .get(0);
        if n == 0 {
            out.push(Check::fail(
                format!("on conflict {stmt}"),
                format!("no unique index or constraint on exactly {table} ({})", cols.join(", ")),
                "the statement fails when it runs (there is no unique or exclusion constraint matching the ON CONFLICT specification): restore GitLab's unique index",
            ));
        }
    }
    if out.is_empty() {
        out.push(Check::pass(
            "on conflict",
            format!(
                "each of the {} ON CONFLICT targets has its unique index",
                targets.len()
            ),
        ));
    }
    Ok(out)
}

/// Storage removal's instance binding (docs/storage-cleanup.md): the database's
/// `application_settings.uuid` against `GITLAB_INSTANCE_UUID` when set.
pub(crate) async fn instance(c: &Client) -> Check {
    use shared::config::storage::INSTANCE_UUID_VAR as VAR;
    let have: Option<String> = match c.query_opt(sql::INSTANCE_UUID, &[]).await {
        Ok(r) => r.and_then(|r| r.get(0)),
        Err(e) => {
            return super::db_failure(
                "instance",
                format!(
                    "cannot read application_settings.uuid: {}",
                    super::db_message(&e)
                ),
                "the column must exist as in GitLab 18",
                &e,
            )
        }
    };
    let shown = have.as_deref().unwrap_or("not set");
    match std::env::var(VAR).ok().filter(|v| !v.trim().is_empty()) {
        Some(want) if have.as_deref() == Some(want.trim()) => Check::pass(
            "instance",
            format!("application_settings.uuid is {VAR} ({shown}): storage removal may run"),
        ),
        Some(want) => Check::fail(
            "instance",
            format!("{VAR} is {} but application_settings.uuid is {shown}: storage-cleanup removes nothing here", want.trim()),
            format!("point DATABASE_URL at the instance whose storage this stack removes, or set {VAR} to this instance's uuid"),
        ),
        None => Check::pass(
            "instance",
            format!("application_settings.uuid is {shown}: the value of {VAR} when a STORAGE_* kind is on"),
        ),
    }
}

/// The side effects a removal reproduces (docs/gitlab-differences.md, "System hooks"):
/// system hooks are on, to every `SystemHook` row, none while silent mode is on.
pub(crate) async fn system_hooks(c: &Client) -> Check {
    match c.query_one(sql::SYSTEM_HOOKS, &[]).await {
        Ok(r) => {
            let (n, silent): (i64, bool) = (r.get(0), r.get(1));
            let to = if silent {
                "none while silent mode is on".to_string()
            } else {
                format!("{n} SystemHook row(s) receive them")
            };
            Check::pass(
                "system hooks",
                format!(
                    "on (user_remove_from_team/group, group_destroy, project_destroy, user_destroy, through deliver-notification): {to}"
                ),
            )
        }
        Err(e) => super::db_failure(
            "system hooks",
            format!("cannot read the system hooks: {}", super::db_message(&e)),
            "web_hooks and application_settings.silent_mode_enabled must exist as in GitLab 18",
            &e,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_classified_by_the_markers() {
        assert_eq!(release_of("20250502102328"), None);
        assert_eq!(release_of("20250502102329"), Some("18.0"));
        assert_eq!(release_of("20250610152957"), Some("18.1"));
        assert_eq!(release_of("20250709143510"), Some("18.2"));
        assert_eq!(release_of("20251231013427"), Some("18.8"));
        assert_eq!(release_of("20260117000000"), Some("18.8"));
        assert_eq!(release_of("20260117231951"), Some("18.9"));
        assert_eq!(release_of("20260330104732"), Some("19.0"));
        assert_eq!(release_of("20260604185959"), Some("19.0"));
        assert_eq!(release_of("20260604190000"), Some("19.1"));
        assert_eq!(release_of("20260617120000"), Some("19.2"));
        assert_eq!(release_of("20260727141402"), Some("19.3"));
        assert_eq!(release_of("20260818153000"), Some("19.4"));
        assert_eq!(release_of("20260916223000"), Some("19.5"));
        assert_eq!(release_of("20270101000000"), Some("19.5"));
        assert_eq!(release_of("2025"), None, "not a migration version");
    }

    #[test]
    fn the_supported_range_passes_older_fails_and_newer_warns() {
        let c = schema_version_check(true, Some("20250610152957"), None);
        assert!(!c.ok && c.required, "{c:?}");
        assert!(c
            .detail
            .contains("GitLab 18.1 found (newest migration 20250610152957)"));
        assert!(c.fix.as_deref().unwrap().contains("20250709143510"));
        let c = schema_version_check(true, Some("20250709143510"), None);
        assert!(c.ok && c.detail.starts_with("GitLab 18.2 found"), "{c:?}");
        let c = schema_version_check(true, Some("20251231013427"), None);
        assert!(c.ok && c.detail.starts_with("GitLab 18.8 found"), "{c:?}");
        let c = schema_version_check(true, Some("20260117231951"), None);
        assert!(
            c.ok && c.detail.starts_with("GitLab 18.9 to 18.11 found"),
            "18.9 to 18.11: {c:?}"
        );
        for (v, r) in [
            ("20260330104732", "19.0"),
            ("20260604190000", "19.1"),
            ("20260617120000", "19.2"),
            ("20260727141402", "19.3"),
            ("20260818153000", "19.4"),
            ("20260916223000", "19.5"),
            ("20261015235959", "19.5"),
        ] {
            let c = schema_version_check(true, Some(v), None);
            assert!(
                c.ok && c.detail.starts_with(&format!("GitLab {r} found")),
                "{v}: {c:?}"
            );
        }
        let past = shared::gitlab::release::PAST_NEWEST;
        let c = schema_version_check(true, Some(past), None);
        assert!(
            !c.ok && c.required,
            "refused, as the functions refuse it: {c:?}"
        );
        assert!(c.detail.contains("GitLab newer than 19.5"), "{c:?}");
        assert!(
            c.fix
                .as_deref()
                .unwrap()
                .contains(&format!("GITLAB_SCHEMA_ACCEPTED={past}")),
            "{c:?}"
        );
        let c = schema_version_check(true, Some(past), Some(past));
        assert!(
            c.ok && c.detail.contains("accepted by GITLAB_SCHEMA_ACCEPTED"),
            "{c:?}"
        );
        let c = schema_version_check(false, None, None);
        assert!(!c.ok && c.required);
        assert_eq!(c.detail, "not a GitLab database (no schema_migrations)");
        assert!(!schema_version_check(true, None, None).ok);
        assert!(!schema_version_check(true, Some("20240101000000"), None).ok);
    }

    #[test]
    fn a_replica_or_a_read_only_default_fails() {
        assert!(writable_check(false, "off", "off", "default").ok);
        let c = writable_check(true, "off", "on", "default");
        assert!(!c.ok && c.detail.contains("replica"), "{c:?}");
        let c = writable_check(false, "on", "on", "database");
        assert!(!c.ok, "{c:?}");
        assert!(c.fix.as_deref().unwrap().starts_with("ALTER DATABASE"));
        let c = writable_check(false, "on", "on", "user");
        assert!(c.fix.as_deref().unwrap().starts_with("ALTER ROLE"));
    }

    #[test]
    fn the_conflict_targets_of_the_catalogue_are_read() {
        let t = conflict_targets();
        assert!(
            t.iter()
                .any(|(table, cols, _)| table == "project_authorizations"
                    && cols == &["user_id", "project_id", "access_level"]),
            "{t:?}"
        );
        assert!(t
            .iter()
            .all(|(table, cols, _)| !table.is_empty() && !cols.is_empty()));
    }
}
