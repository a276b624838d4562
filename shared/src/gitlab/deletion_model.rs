//! Which deletion-state model the connected GitLab has (docs/gitlab-source-notes.md §B).
//!
//! Owns: [`DeletionModel`], told apart by the columns the database has ([`probe`]),
//! [`Models`], the models a catalogue statement is declared for (ARCHITECTURE.md,
//! "Statements per deletion model"), and the probe of one column ([`has_column`]: the
//! columns a statement needs, `catalogue::needed_columns`). Its statements are in `sql`.

use tokio_postgres::GenericClient;

use crate::error::Result;

pub(crate) mod sql;

/// How the connected GitLab records group deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeletionModel {
    /// GitLab ≤ 18.3: `group_deletion_schedules` only.
    Schedules,
    /// GitLab 18.4–18.9: plus `namespaces.state` and `namespace_details.state_metadata`.
    StateColumns,
    /// GitLab 18.10 and later: plus `namespace_details.deletion_scheduled_at`.
    ScheduledAt,
}

impl DeletionModel {
    /// Every model, oldest first.
    pub const ALL: [DeletionModel; 3] = [
        DeletionModel::Schedules,
        DeletionModel::StateColumns,
        DeletionModel::ScheduledAt,
    ];

    /// The model's name, as `hk check` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletionModel::Schedules => "schedules",
            DeletionModel::StateColumns => "state-columns",
            DeletionModel::ScheduledAt => "scheduled-at",
        }
    }

    /// What the model reads, in one line (`hk check`).
    pub fn describe(self) -> &'static str {
        match self {
            DeletionModel::Schedules => "group_deletion_schedules only (GitLab before 18.4)",
            DeletionModel::StateColumns => {
                "group_deletion_schedules, namespaces.state and namespace_details.state_metadata (GitLab 18.4 to 18.9)"
            }
            DeletionModel::ScheduledAt => {
                "group_deletion_schedules, namespaces.state, state_metadata and namespace_details.deletion_scheduled_at (GitLab 18.10 and later)"
            }
        }
    }

    /// Whether the database has `namespaces.state` and `state_metadata`.
    pub fn has_state(self) -> bool {
        self != DeletionModel::Schedules
    }

    /// Whether the database has `namespace_details.deletion_scheduled_at`.
    pub fn has_scheduled_at(self) -> bool {
        self == DeletionModel::ScheduledAt
    }
}

impl std::fmt::Display for DeletionModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use crate::statements::Models;

/// The models a statement is declared for: a set of [`DeletionModel`].
impl Models {
    /// Every model: the statement uses nothing that came with 18.4 or later.
    pub const ANY: Models = Models(0b111);
    /// 18.4 and later: the statement uses `namespaces.state` or `state_metadata`.
    pub const STATE: Models = Models(0b110);
    /// 18.10 and later: the statement uses `namespace_details.deletion_scheduled_at`.
    pub const SCHEDULED_AT: Models = Models(0b100);

    /// Whether `model` is in the set.
    pub fn contains(self, model: DeletionModel) -> bool {
        let bit = match model {
            DeletionModel::Schedules => 0b001,
            DeletionModel::StateColumns => 0b010,
            DeletionModel::ScheduledAt => 0b100,
        };
        self.0 & bit != 0
    }
}

/// The model of the connected database, from its columns (one catalog query, sent
/// unprepared in one round trip, so it pipelines with others; it takes
/// no lock and reads no table). A database with `deletion_scheduled_at` but without the
/// state columns is no GitLab release: it counts as the model its state columns allow.
pub async fn probe<C: GenericClient>(c: &C) -> Result<DeletionModel> {
    let row = c.query_typed_one(sql::PROBE, &[]).await?;
    let (state, scheduled_at): (bool, bool) = (row.get(0), row.get(1));
    Ok(match (state, scheduled_at) {
        (false, _) => DeletionModel::Schedules,
        (true, false) => DeletionModel::StateColumns,
        (true, true) => DeletionModel::ScheduledAt,
    })
}

/// Whether the connected database's table `table` has column `column` (one catalog
/// query; a missing table has none).
pub async fn has_column<C: GenericClient>(c: &C, table: &str, column: &str) -> Result<bool> {
    use tokio_postgres::types::Type;
    Ok(c.query_typed_one(
        sql::HAS_COLUMN,
        &[(&table, Type::TEXT), (&column, Type::TEXT)],
    )
    .await?
    .get(0))
}
