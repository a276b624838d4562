//! The statement catalogue: every SQL statement the functions can run against a
//! GitLab database, by module and name.
//!
//! Owns: [`all`], the single list of every module's statements (each `sql` submodule
//! declares its own with `crate::statements::statements!`). Tests check that every
//! `sql` module is listed and PREPARE every entry; `hk check` does the same against an
//! operator's database. No SQL text lives anywhere else in this crate. Owns also
//! [`uses`] and [`for_function`]: the statements one function can run, from the
//! modules its job imports (read from the source at build time, `shared/build/uses.rs`).

pub use crate::statements::{Column, Statement};

use crate::function::Function;
use crate::gitlab::deletion_model::{DeletionModel, Models};

/// `USES`: per function name, the modules its job can run code of (generated).
mod generated {
    include!(concat!(env!("OUT_DIR"), "/uses.rs"));
}

/// One `sql` module's `ALL`: `(name, text)` per statement.
type StatementList = &'static [(&'static str, &'static str)];

/// `(path, crate::<path>::sql::ALL)` for each module path, the path written once.
macro_rules! sql_modules {
    ($($first:ident $(:: $rest:ident)*),* $(,)?) => {
        &[$((
            concat!(stringify!($first) $(, "::", stringify!($rest))*),
            crate::$first $(::$rest)*::sql::ALL,
        )),*]
    };
}

/// Every module's statement list, by module path (one line per `sql` submodule).
const MODULES: &[(&str, StatementList)] = sql_modules![
    batches::schedule_prune_deletions,
    batches::pat_expiring,
    workers::deliver_notification,
    gitlab::group_deletion,
    batches::placeholder_user_cleanup,
    workers::delete_placeholder_user,
    workers::group_destroy,
    batches::remove_expired_members,
    db,
    gitlab::authz,
    gitlab::blockers,
    gitlab::deletion_model,
    gitlab::hierarchy,
    gitlab::membership,
    gitlab::permissions,
    gitlab::release,
    gitlab::side_effects,
    gitlab::side_effects::audit,
    gitlab::side_effects::ee,
    gitlab::storage,
    gitlab::system_hooks,
    gitlab::system_hooks::group,
    gitlab::user_removal,
    locks,
    workers::delete_user,
    workers::prune_deletions,
];

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

/// The statements that need a column some supported releases lack, with that column:
/// a database PREPAREs and runs them only where it has the column (the caller probes
/// it, `deletion_model::has_column`). Each list is a nested module of its owner's `sql`.
const COLUMN_MODULES: &[(&str, Column, StatementList)] = &[
    (
        "gitlab::side_effects::audit",
        ("audit_events", "id"),
        crate::gitlab::side_effects::audit::sql::legacy::ALL,
    ),
    (
        "gitlab::user_removal",
        ("ghost_user_migrations", "user_type"),
        crate::gitlab::user_removal::sql::typed::ALL,
    ),
    (
        "gitlab::group_deletion",
        ("namespace_state_propagations", "target_state"),
        crate::gitlab::group_deletion::sql::propagation::ALL,
    ),
    (
        "gitlab::storage",
        ("lfs_objects_projects", "oid"),
        crate::gitlab::storage::sql::oid_links::ALL,
    ),
];

/// Every statement the functions can run, on any model.
pub fn all() -> Vec<Statement> {
    let any = MODULES
        .iter()
        .map(|(m, list)| (*m, Models::ANY, None, *list));
    let by_model = MODEL_MODULES
        .iter()
        .map(|(m, ms, list)| (*m, *ms, None, *list));
    let by_column = COLUMN_MODULES
        .iter()
        .map(|(m, col, list)| (*m, Models::ANY, Some(*col), *list));
    any.chain(by_model)
        .chain(by_column)
        .flat_map(|(module, models, needs, list)| {
            list.iter().map(move |(name, text)| Statement {
                module,
                name,
                text,
                models,
                needs,
            })
        })
        .collect()
}

/// The columns some statements need ([`Statement::needs`]), each once.
pub fn needed_columns() -> Vec<Column> {
    let mut out: Vec<Column> = COLUMN_MODULES.iter().map(|(_, c, _)| *c).collect();
    out.dedup();
    out
}

/// The statements declared for a database of deletion model `model` that has the
/// needed columns `has` (of [`needed_columns`]): the ones it must PREPARE.
pub fn for_model(model: DeletionModel, has: &[Column]) -> Vec<Statement> {
    all()
        .into_iter()
        .filter(|s| s.models.contains(model) && s.needs.is_none_or(|c| has.contains(&c)))
        .collect()
}

/// The modules of `shared` whose code `function`'s job can run: its job module and
/// every module it imports, transitively (read from the source at build time).
pub fn uses(function: Function) -> &'static [&'static str] {
    generated::USES
        .iter()
        .find(|(name, _)| *name == function.name())
        .map(|(_, m)| *m)
        .expect("every function's row is read by the build script")
}

/// [`for_model`] narrowed to the statements `function` can run ([`uses`]): the ones its
/// cold start must PREPARE.
pub fn for_function(function: Function, model: DeletionModel, has: &[Column]) -> Vec<Statement> {
    let uses = uses(function);
    for_model(model, has)
        .into_iter()
        .filter(|s| uses.contains(&s.module))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_function_checks_what_its_job_imports_and_nothing_of_unrelated_jobs() {
        for f in Function::ALL {
            assert!(!uses(*f).is_empty(), "{f}");
        }
        let del = uses(Function::DeleteUser);
        for m in [
            "workers::delete_user",
            "gitlab::user_removal",
            "gitlab::membership",
            "locks",
        ] {
            assert!(del.contains(&m), "delete-user runs {m}: {del:?}");
        }
        let deliver = uses(Function::DeliverNotification);
        for m in [
            "workers::group_destroy",
            "batches::remove_expired_members",
            "workers::delete_user",
        ] {
            assert!(
                !deliver.contains(&m),
                "deliver-notification never runs {m}: {deliver:?}"
            );
        }
        // Every listed module is run by some function, or by the schema check itself.
        let gate = ["gitlab::release", "gitlab::deletion_model"];
        for (m, _) in MODULES {
            assert!(
                gate.contains(m) || Function::ALL.iter().any(|f| uses(*f).contains(m)),
                "no function runs {m}"
            );
        }
    }
}
