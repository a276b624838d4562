//! The statement catalogue: every SQL statement the functions can run against a
//! GitLab database, by module and name.
//!
//! Owns: [`all`], the single list of every module's statements (each `sql`
//! submodule declares its own with `crate::statements::statements!`; an
//! architecture test checks that every `sql` module is listed here). The catalogue test PREPAREs every entry against the migrated
//! schema; `hk check` does the same against an operator's database. No SQL text lives
//! anywhere else in this crate (an architecture test greps for it).

pub use crate::statements::Statement;

use crate::gitlab::deletion_model::{DeletionModel, Models};

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
    (
        "gitlab::deletion_model",
        crate::gitlab::deletion_model::sql::ALL,
    ),
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

/// One `sql` module's `ALL`: `(name, text)` per statement.
type StatementList = &'static [(&'static str, &'static str)];

/// The statements that need a newer deletion-state model than GitLab 18.2's, with the
/// models they are declared for (every statement of [`MODULES`] is for every model).
/// Each of these lists is a nested module of its owner's `sql`.
const MODEL_MODULES: &[(&str, Models, StatementList)] = &[
    (
        "gitlab::group_deletion",
        Models::STATE,
        crate::gitlab::group_deletion::sql::state::ALL,
    ),
    (
        "gitlab::group_deletion",
        Models::SCHEDULED_AT,
        crate::gitlab::group_deletion::sql::scheduled_at::ALL,
    ),
    (
        "workers::group_destroy",
        Models::SCHEDULED_AT,
        crate::workers::group_destroy::sql::scheduled_at::ALL,
    ),
];

/// Every statement the functions can run, on any model.
pub fn all() -> Vec<Statement> {
    let any = MODULES.iter().map(|(m, list)| (*m, Models::ANY, *list));
    any.chain(MODEL_MODULES.iter().copied())
        .flat_map(|(module, models, list)| {
            list.iter().map(move |(name, text)| Statement {
                module,
                name,
                text,
                models,
            })
        })
        .collect()
}

/// The statements declared for `model`: the ones a database of that model must PREPARE.
pub fn for_model(model: DeletionModel) -> Vec<Statement> {
    all()
        .into_iter()
        .filter(|s| s.models.contains(model))
        .collect()
}
