//! The statement catalogue: every SQL statement the functions can run against a
//! GitLab database, by module and name.
//!
//! Owns: [`all`], the single list of every module's statements (each `sql`
//! submodule declares its own with `crate::statements::statements!`; an
//! architecture test checks that every `sql` module is listed here). The catalogue test PREPAREs every entry against the migrated
//! schema; `hk check` does the same against an operator's database. No SQL text lives
//! anywhere else in this crate (an architecture test greps for it).

pub use crate::statements::Statement;

/// Every module's statement list, by module path.
const MODULES: &[(&str, &[(&str, &str)])] = &[
    // One line per `sql` submodule: ("path::of::module", crate::path::of::module::sql::ALL).
    (
        "batches::schedule_prune_deletions",
        crate::batches::schedule_prune_deletions::sql::ALL,
    ),
    (
        "batches::pat_expiring",
        crate::batches::pat_expiring::sql::ALL,
    ),
    (
        "workers::deliver_notification",
        crate::workers::deliver_notification::sql::ALL,
    ),
    (
        "gitlab::group_deletion",
        crate::gitlab::group_deletion::sql::ALL,
    ),
    (
        "batches::placeholder_user_cleanup",
        crate::batches::placeholder_user_cleanup::sql::ALL,
    ),
    (
        "workers::delete_placeholder_user",
        crate::workers::delete_placeholder_user::sql::ALL,
    ),
    (
        "workers::group_destroy",
        crate::workers::group_destroy::sql::ALL,
    ),
    (
        "batches::remove_expired_members",
        crate::batches::remove_expired_members::sql::ALL,
    ),
    ("db", crate::db::sql::ALL),
    ("gitlab::authz", crate::gitlab::authz::sql::ALL),
    ("gitlab::blockers", crate::gitlab::blockers::sql::ALL),
    ("gitlab::hierarchy", crate::gitlab::hierarchy::sql::ALL),
    ("gitlab::membership", crate::gitlab::membership::sql::ALL),
    ("gitlab::permissions", crate::gitlab::permissions::sql::ALL),
    (
        "gitlab::user_removal",
        crate::gitlab::user_removal::sql::ALL,
    ),
    ("locks", crate::locks::sql::ALL),
    (
        "workers::delete_user",
        crate::workers::delete_user::sql::ALL,
    ),
    (
        "workers::prune_deletions",
        crate::workers::prune_deletions::sql::ALL,
    ),
];

/// Every statement the functions can run.
pub fn all() -> Vec<Statement> {
    MODULES
        .iter()
        .flat_map(|(module, list)| {
            list.iter()
                .map(move |(name, text)| Statement { module, name, text })
        })
        .collect()
}
