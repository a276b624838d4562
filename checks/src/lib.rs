//! `hk check`: the read-only preflight against a target database (issues 15, 33), in
//! its own crate so that `hk` and the `hk-check` Lambda function ([`function`]) run
//! one implementation; and `hk grants` ([`grants`]), printed from what the privileges
//! check derives.
//!
//! Owns: the checks and their one-line results ([`Check`]): server version, whether
//! the database takes writes ([`database`]), the GitLab schema version, the statement
//! catalogue ([`catalogue`], through [`shared::preflight`], the same code every
//! function runs at cold start; a lock held elsewhere is a busy, retryable result),
//! the grants each statement needs ([`privileges`], derived by the server: [`tree`]),
//! the GitLab facts the bundle assumes (insert columns, `NOT NULL` by constraint
//! included; `ON CONFLICT` unique indexes; the foreign keys
//! of behaviour §S4 with their `ON DELETE` action, settings rows, the ghost user), the
//! session check (a session advisory lock survives to the next statement on the same
//! backend, which PgBouncer transaction pooling breaks), TLS, and the work waiting per
//! batch (counts only, with the clock bound as a parameter). Both sessions are set to
//! `default_transaction_read_only` first, so every statement runs in a `READ ONLY`
//! transaction of its own (a failing check does not abort the next, and the session
//! check needs statements in separate transactions anyway). Its SQL is in [`sql`];
//! the connection comes from [`target`], the result is a [`report::Report`].

mod blockers;
pub mod catalogue;
pub mod database;
pub mod function;
pub mod grants;
pub mod group_hooks;
pub mod inserts;
pub mod privileges;
pub mod report;
pub mod side_effects;
pub mod sql;
pub mod target;
pub mod tree;
pub mod triggers;

pub use inserts::catalogue_inserts;

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::{Client, SimpleQueryMessage};

use shared::batches::pat_expiring::Interval;
use shared::batches::placeholder_user_cleanup as b70;
use shared::gitlab::group_deletion;

/// One check's result: one output line.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked, e.g. `server version` or `catalogue batches::x::PAGE`.
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// Whether a failure makes `hk check` exit non-zero.
    pub required: bool,
    /// What was found.
    pub detail: String,
    /// What to do when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// A failure that is the database being busy (a lock held elsewhere): retry.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
}

impl Check {
    fn pass(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok: true,
            required: true,
            detail: detail.into(),
            fix: None,
            busy: false,
        }
    }

    fn fail(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.into(),
            ok: false,
            required: true,
            detail: detail.into(),
            fix: Some(fix.into()),
            busy: false,
        }
    }

    fn advisory(mut self) -> Check {
        self.required = false;
        self
    }

    fn busy(mut self) -> Check {
        self.busy = true;
        self
    }

    /// The output line: `✓ name: detail`, `✗ name: detail — fix`, or `⚠ …` for a
    /// failed check that is advisory.
    pub fn line(&self) -> String {
        if !self.ok && !self.required {
            return match &self.fix {
                Some(fix) => format!("⚠ {}: {} — {}", self.name, self.detail, fix),
                None => format!("⚠ {}: {}", self.name, self.detail),
            };
        }
        match (&self.fix, self.ok) {
            (Some(fix), false) => format!("✗ {}: {} — {}", self.name, self.detail, fix),
            (_, false) => format!("✗ {}: {}", self.name, self.detail),
            _ => format!("✓ {}: {}", self.name, self.detail),
        }
    }
}

/// Whether every required check passed.
pub fn all_required_pass(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.ok || !c.required)
}

/// Whether the required checks that failed all failed because the database was busy
/// (retry), and at least one did.
pub fn only_busy(checks: &[Check]) -> bool {
    let mut failed = checks.iter().filter(|c| !c.ok && c.required).peekable();
    failed.peek().is_some() && failed.all(|c| c.busy)
}

/// A foreign key the bundle relies on (behaviour §S4): `table.column → references`
/// with its `ON DELETE` action.
struct Fk {
    table: &'static str,
    column: &'static str,
    references: &'static str,
    /// Accepted `confdeltype` values (`c` cascade, `n` set null; `r`/`a` restrict or
    /// no action, which block alike).
    actions: &'static str,
    /// A missing key fails the check (GitLab may have no FK on some author columns).
    required: bool,
}

const fn fk(
    table: &'static str,
    column: &'static str,
    references: &'static str,
    actions: &'static str,
) -> Fk {
    Fk {
        table,
        column,
        references,
        actions,
        required: true,
    }
}

/// behaviour §S4, one entry per foreign key.
const FKS: &[Fk] = &[
    // members.user_id, notification_settings.user_id and project_authorizations.user_id
    // have no database FK in GitLab (loose FKs: `users_loose_fk_trigger`, checked in
    // `foreign_keys`), nor have ghost_user_migrations.initiator_user_id and
    // notes.author_id.
    fk("personal_access_tokens", "user_id", "users", "c"),
    fk("group_deletion_schedules", "user_id", "users", "c"),
    fk("members_deletion_schedules", "user_id", "users", "c"),
    fk(
        "members_deletion_schedules",
        "scheduled_by_id",
        "users",
        "c",
    ),
    fk(
        "import_placeholder_user_details",
        "placeholder_user_id",
        "users",
        "c",
    ),
    fk("ghost_user_migrations", "user_id", "users", "c"),
    fk("import_source_users", "placeholder_user_id", "users", "n"),
    fk("import_source_users", "reassign_to_user_id", "users", "n"),
    Fk {
        required: false,
        ..fk("issues", "author_id", "users", "n")
    },
    Fk {
        required: false,
        ..fk("merge_requests", "author_id", "users", "n")
    },
    fk("routes", "namespace_id", "namespaces", "c"),
    fk("group_deletion_schedules", "group_id", "namespaces", "c"),
    fk(
        "members_deletion_schedules",
        "namespace_id",
        "namespaces",
        "c",
    ),
    fk("import_source_users", "namespace_id", "namespaces", "c"),
    fk("web_hooks", "group_id", "namespaces", "c"),
    fk("projects", "project_namespace_id", "namespaces", "c"),
    fk("members", "member_namespace_id", "namespaces", "c"),
    fk(
        "import_placeholder_user_details",
        "namespace_id",
        "namespaces",
        "n",
    ),
    fk("namespaces", "parent_id", "namespaces", "ra"),
    fk("projects", "namespace_id", "namespaces", "ra"),
    fk("project_authorizations", "project_id", "projects", "c"),
    fk("web_hooks", "project_id", "projects", "c"),
    fk("issues", "project_id", "projects", "c"),
    fk("merge_requests", "target_project_id", "projects", "c"),
    fk("notes", "project_id", "projects", "c"),
];

fn action_name(a: &str) -> &'static str {
    match a {
        "a" => "NO ACTION",
        "r" => "RESTRICT",
        "c" => "CASCADE",
        "n" => "SET NULL",
        "d" => "SET DEFAULT",
        _ => "unknown",
    }
}

/// The supported server versions: GitLab 18 requires PostgreSQL 16.5 or later and
/// supports 17.
pub fn version_check(num: i32, text: &str) -> Check {
    let name = "server version";
    if (160_005..180_000).contains(&num) {
        Check::pass(name, format!("PostgreSQL {text} (supported: 16.5+ and 17)"))
    } else {
        Check::fail(
            name,
            format!("PostgreSQL {text} is not supported (server_version_num {num})"),
            "GitLab 18 and these functions need PostgreSQL 16 (16.5 or later) or 17",
        )
    }
}

/// The session check: a session advisory lock taken by one statement is still held by
/// the same backend in the next, and a second connection neither shares that backend
/// nor gets the lock. `a` and `b` are two connections opened like the functions'.
pub async fn session_check(a: &Client, b: &Client) -> Result<Check> {
    let first = row(a, sql::SESSION_LOCK).await?;
    let other = row(b, sql::SESSION_LOCK).await?;
    let next = row(a, sql::SESSION_HELD).await?;
    let _ = a.simple_query(sql::SESSION_UNLOCK).await;
    let _ = b.simple_query(sql::SESSION_UNLOCK).await;
    let name = "session (advisory locks)";
    let (pid1, got) = (&first[0], first[1] == "true");
    let (pid_b, b_got) = (&other[0], other[1] == "true");
    let (pid2, held) = (&next[0], next[1] == "true");
    let fix = "connect directly or through PgBouncer in `pool_mode = session` (not transaction or statement pooling), no RDS Proxy without pinning, no read replica: the overlap guard and single-flight locks are session advisory locks";
    Ok(if !got {
        Check::fail(
            name,
            "the check's own advisory lock is held by another session",
            "another `hk check` is running; retry when it ends",
        )
    } else if pid1 != pid2 || !held {
        Check::fail(
            name,
            format!("the lock taken on backend {pid1} is not held by the next statement (backend {pid2}): transaction pooling (PgBouncer `pool_mode = transaction`?)"),
            fix,
        )
    } else if pid_b == pid1 || b_got {
        Check::fail(
            name,
            format!("a second connection ran on the same backend {pid1} (lock granted to it: {b_got}): the connection path pools per transaction (PgBouncer `pool_mode = transaction`?)"),
            fix,
        )
    } else {
        Check::pass(name, format!("a session advisory lock stays on backend {pid1} across statements; a second connection has its own backend"))
    })
}

async fn row(c: &Client, q: &str) -> Result<Vec<String>> {
    for m in c.simple_query(q).await.with_context(|| q.to_string())? {
        if let SimpleQueryMessage::Row(r) = m {
            return Ok((0..r.len())
                .map(|i| r.get(i).unwrap_or("").to_string())
                .collect());
        }
    }
    anyhow::bail!("no row from `{q}`")
}

/// Every check, in output order, against `target` (its connector opens sessions like
/// the functions'; `loopback`: the configured host is this machine; its
/// `schema_accepted`: `GITLAB_SCHEMA_ACCEPTED`); `now` the clock.
pub async fn run(target: &target::Target, now: DateTime<Utc>) -> Result<Vec<Check>> {
    let (connector, loopback) = (&target.connector, target.loopback);
    let a = connector
        .connect("hk-check")
        .await
        .context("cannot connect")?;
    let b = connector
        .connect("hk-check")
        .await
        .context("cannot open a second connection")?;
    // The session check first: it takes advisory locks only, in simple queries, and
    // the sessions were opened without a prepared statement. Through a pool per
    // transaction, consecutive statements may land on different backends: the
    // read-only setting below may or may not stick, and a statement prepared in one
    // exchange may be gone in the next, depending on the pool's timing. So when the
    // session check fails, it is the whole report: nothing else runs on such a path.
    let session = session_check(&a, &b).await?;
    drop(b);
    if !session.ok {
        return Ok(vec![session]);
    }
    // As the role and database configure a session: before this one is made read only.
    let writable = database::writable(&a).await?;
    a.simple_query(sql::READ_ONLY).await?;
    let ro = row(&a, sql::IS_READ_ONLY).await?;
    anyhow::ensure!(
        ro[0] == "on",
        "the session did not become read only ({})",
        ro[0]
    );
    let (trees, mut notices) = catalogue::tree_session(connector).await?;
    let pass = catalogue::pass(&trees, &mut notices, &a).await?;
    drop(trees);
    let accepted = target.schema_accepted.as_deref();
    let mut checks = in_read_only(&a, writable, pass, loopback, accepted, now).await?;
    checks.push(side_effects::check(&a, target.audit_events).await);
    checks.push(group_hooks::check(&a, target.group_hooks).await);
    checks.push(session);
    Ok(checks)
}

async fn in_read_only(
    c: &Client,
    writable: Check,
    pass: catalogue::Pass,
    loopback: bool,
    accepted: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Vec<Check>> {
    let mut checks = Vec::new();
    let v = c.query_one(sql::SERVER_VERSION, &[]).await?;
    checks.push(version_check(v.get(0), v.get(1)));
    checks.push(writable);
    let hidden = pass.schema_hidden;
    if !hidden {
        checks.push(database::schema_version(c, accepted).await?);
    }
    checks.extend(pass.checks);
    checks.extend(privileges::check(c, &pass.needs, pass.without_tree, pass.busy).await?);
    if hidden {
        checks.push(Check::fail(
            "GitLab facts",
            "not checked (schema version, insert columns, ON CONFLICT indexes, foreign keys): the role may not use the tables' schema",
            "grant USAGE on the schema (see the catalogue line), then run `hk check` again",
        ));
    } else {
        checks.extend(inserts::insert_columns(c).await?);
        checks.extend(database::conflict_arbiters(c).await?);
        checks.extend(foreign_keys(c).await?);
    }
    checks.extend(settings_and_ghost(c).await);
    checks.push(tls(c, loopback).await?);
    checks.extend(waiting(c, now).await);
    checks.push(blockers::check(c, now).await);
    Ok(checks)
}

async fn foreign_keys(c: &Client) -> Result<Vec<Check>> {
    let mut bad = Vec::new();
    for k in FKS {
        let rows = c
            .query(sql::FK_ACTIONS, &[&k.table, &k.column, &k.references])
            .await?;
        let want = k
            .actions
            .chars()
            .map(|a| action_name(&a.to_string()))
            .collect::<Vec<_>>()
            .join(" or ");
        let obj = format!("{}.{} → {}", k.table, k.column, k.references);
        if rows.is_empty() {
            let mut f = Check::fail(
                format!("foreign key {obj}"),
                format!("missing (expected ON DELETE {want})"),
                "deleting a row would leave orphans the batches do not remove: restore the foreign key",
            );
            if !k.required {
                f = f.advisory();
            }
            bad.push(f);
            continue;
        }
        for r in rows {
            let (name, act): (String, String) = (r.get(0), r.get(1));
            if !k.actions.contains(act.as_str()) {
                bad.push(Check::fail(
                    format!("foreign key {obj}"),
                    format!("{name} is ON DELETE {}, expected {want}", action_name(&act)),
                    "the batches rely on this action (behaviour S4): restore it as GitLab 18 defines it",
                ));
            }
        }
    }
    if c.query_opt(sql::USERS_LOOSE_FK_TRIGGER, &[])
        .await?
        .is_none()
    {
        bad.push(Check::fail(
            "loose foreign keys of users",
            "users_loose_fk_trigger is missing",
            "GitLab records deleted users in loose_foreign_keys_deleted_records through this trigger;              without it GitLab never cleans up what the batches leave to it (members, notification settings, …)",
        ));
    }
    if bad.iter().all(|b| !b.required) {
        bad.insert(
            0,
            Check::pass(
                "foreign keys",
                format!(
                    "the {} foreign keys the batches rely on have their ON DELETE action",
                    FKS.iter().filter(|k| k.required).count()
                ),
            ),
        );
    }
    Ok(bad)
}

async fn settings_and_ghost(c: &Client) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(match c.query_one(sql::SETTINGS_ROWS, &[]).await {
        Ok(r) if r.get::<_, i64>(0) > 0 => Check::pass("settings", "application_settings has a row (its deletion_adjourned_period is used)"),
        Ok(_) => Check::pass("settings", format!(
            "application_settings is empty: the defaults apply (deletion_adjourned_period {} days, the column default of this release)",
            group_deletion::deletion_adjourned_period(c).await.unwrap_or(group_deletion::DEFAULT_PERIOD_DAYS)
        )),
        Err(e) => db_failure("settings", format!("cannot read application_settings: {}", db_message(&e)), "the table must exist as in GitLab 18", &e),
    });
    out.push(database::instance(c).await);
    out.push(database::system_hooks(c).await);
    let ghost = c.query_opt(sql::GHOST, &[]).await;
    let orgs = c.query_one(sql::ORGANIZATIONS, &[]).await;
    out.push(match (ghost, orgs) {
        (Ok(Some(g)), _) => {
            Check::pass("ghost user", format!("exists (id {})", g.get::<_, i64>(0)))
        }
        (Ok(None), Ok(o)) if o.get::<_, i64>(0) > 0 => Check::pass(
            "ghost user",
            "none yet; it can be created on the first user deletion (an organization exists)",
        ),
        (Ok(None), Ok(_)) => Check::fail(
            "ghost user",
            "none, and no organization for its namespace",
            "GitLab creates its default organization at installation: is DATABASE_URL GitLab's database? (the bundle creates the ghost user in the first organization)",
        ),
        (Err(e), _) | (_, Err(e)) => db_failure(
            "ghost user",
            db_message(&e).to_string(),
            "the users and organizations tables must exist as in GitLab 18",
            &e,
        ),
    });
    out
}

/// The server's message of a database error (the error itself otherwise).
fn db_message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string())
}

/// A failed check from a database error: busy (retry) when the error is a lock or
/// statement timeout.
fn db_failure(name: &str, detail: String, fix: &str, e: &tokio_postgres::Error) -> Check {
    let busy = e.code().is_some_and(|c| {
        shared::preflight::Problem::of_sqlstate(c.code()) == shared::preflight::Problem::Busy
    });
    if busy {
        Check::fail(
            name,
            format!("database busy: {detail} (retry)"),
            "another session holds a lock on the table; run `hk check` again when it is released",
        )
        .busy()
    } else {
        Check::fail(name, detail, fix)
    }
}

async fn tls(c: &Client, loopback: bool) -> Result<Check> {
    let r = c.query_opt(sql::TLS, &[]).await?;
    let (ssl, version, cipher) = match &r {
        Some(r) => (
            r.get::<_, bool>(0),
            r.get::<_, String>(1),
            r.get::<_, String>(2),
        ),
        None => (false, String::new(), String::new()),
    };
    Ok(if ssl {
        Check::pass("TLS", format!("{version} {cipher}; certificate chain and host name verified (system roots plus DATABASE_CA_BUNDLE)"))
    } else if loopback {
        Check::pass(
            "TLS",
            "not in use: a loopback connection (the functions require TLS to any other host)",
        )
        .advisory()
    } else {
        Check::fail("TLS", "not in use on this connection (behind PgBouncer this shows the PgBouncer-to-server leg)", "set sslmode=require (verify with DATABASE_CA_BUNDLE) or enable TLS on the server")
    })
}

async fn count(
    c: &Client,
    q: &str,
    p: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> std::result::Result<i64, String> {
    c.query_one(q, p)
        .await
        .map(|r| r.get(0))
        .map_err(|e| shared::Error::from(e).to_string())
}

async fn waiting(c: &Client, now: DateTime<Utc>) -> Vec<Check> {
    let today = shared::clock::today(now);
    let mut out = Vec::new();
    let mut push = |f: &str, r: std::result::Result<i64, String>, what: &str| {
        out.push(match r {
            Ok(n) => Check::pass(format!("waiting {f}"), format!("{n} {what}")).advisory(),
            Err(e) => {
                Check::fail(format!("waiting {f}"), e, "see the catalogue lines above").advisory()
            }
        })
    };
    push(
        "remove-expired-members",
        count(c, sql::WAITING_EXPIRED_MEMBERS, &[&today]).await,
        "memberships expired",
    );
    push(
        "schedule-prune-deletions",
        count(c, sql::WAITING_PRUNE_SCHEDULES, &[]).await,
        "member deletion schedules",
    );
    let period = group_deletion::deletion_adjourned_period(c)
        .await
        .unwrap_or(group_deletion::DEFAULT_PERIOD_DAYS);
    let cutoff = group_deletion::cutoff(today, period);
    push(
        "adjourned-group-deletion",
        count(c, sql::WAITING_ADJOURNED_GROUPS, &[&cutoff]).await,
        &format!("groups due (marked on or before {cutoff})"),
    );
    let retry_before = b70::retry_before(now);
    push(
        "placeholder-user-cleanup",
        count(
            c,
            sql::WAITING_PLACEHOLDERS,
            &[&b70::MAX_ATTEMPTS, &retry_before],
        )
        .await,
        "placeholder users eligible",
    );
    let mut tokens = Ok(0);
    for iv in Interval::ALL {
        let (min, last) = iv.bounds(today);
        tokens = match (
            tokens,
            count(c, sql::WAITING_TOKENS, &[&min, &last, &iv.name()]).await,
        ) {
            (Ok(a), Ok(b)) => Ok(a + b),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
    }
    push("pat-expiring", tokens, "token notices (7/30/60 days)");
    out
}
