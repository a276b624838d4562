//! Adjourned group deletion on each of GitLab's deletion-state models (behaviour
//! §B51.3.1, §B51.5, §D13, §D14; [`DeletionModel`]).
//!
//! Owns: the deletion period and its inclusive cutoff, the schedules as the model
//! records them (18.10's `deletion_scheduled_at` wins over the schedule row), the
//! rename-suffix rules, and [`restore_group`], which derives the new paths from
//! committed state (the ancestors' routes locked root first and read again). It decides
//! nothing about permissions and never commits. Its statements are in `sql`.

use chrono::{DateTime, NaiveDate, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::error::{Error, Result};
use crate::gitlab::deletion_model::{self, DeletionModel};
use crate::gitlab::hierarchy;

pub(crate) mod sql;

/// `DEFAULT_PERIOD_DAYS`: the period when `application_settings` has no row (or a NULL
/// period) and the column's default cannot be read: GitLab's default since 18.3.
pub const DEFAULT_PERIOD_DAYS: i32 = 30;

/// The rename suffixes that marking for deletion added (`SUFFIX_RE`), current first.
const SUFFIX_MARKERS: [&str; 2] = ["-deletion_scheduled-", "-deleted-"];

/// Tries before a restore gives up on finding a free path or name.
const RANDOM_SUFFIX_TRIES: usize = 5;

/// One group's deletion schedule: its `group_deletion_schedules` row, or (from 18.10)
/// its `namespace_details.deletion_scheduled_at` and the user in `state_metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// The scheduled group.
    pub group_id: i64,
    /// Who scheduled the deletion.
    pub user_id: i64,
    /// When it was marked (the UTC date of `deletion_scheduled_at` when that is set).
    pub marked_for_deletion_on: NaiveDate,
}

/// What a `namespace_details` schedule row says (the `DETAILS_SCHEDULE_OF` columns).
enum Details {
    /// `deletion_scheduled_at` is NULL (or the row is missing): the schedule row decides.
    NotSet,
    /// `deletion_scheduled_at` is set: it decides. The user is `None` when
    /// `state_metadata` has none, the date `None` when it is not finite.
    Set(Option<i64>, Option<NaiveDate>),
}

fn details(row: Option<tokio_postgres::Row>) -> Details {
    match row {
        Some(r) if r.get::<_, bool>(2) => Details::Set(r.get(0), r.get(1)),
        _ => Details::NotSet,
    }
}

/// The effective schedule of `group_id` from its details (`d`) and its schedule row
/// (`row`, as `(user_id, marked_for_deletion_on)`): the details win when set, their
/// missing user taken from the row; never due when their date is not finite.
fn effective(group_id: i64, d: Details, row: Option<(i64, NaiveDate)>) -> Option<Schedule> {
    let (user_id, marked_for_deletion_on) = match d {
        Details::NotSet => row?,
        Details::Set(user, date) => (user.or(row.map(|r| r.0))?, date?),
    };
    Some(Schedule {
        group_id,
        user_id,
        marked_for_deletion_on,
    })
}

/// `:period`: `deletion_adjourned_period` of the highest-id settings row; without one
/// (or NULL), GitLab's default of the installed version, read from the column's default
/// (7 on 18.2, 30 since 18.3); [`DEFAULT_PERIOD_DAYS`] if that cannot be read.
pub async fn deletion_adjourned_period<C: GenericClient>(c: &C) -> Result<i32> {
    // Parsed, bound and run in one round trip (issue 52), as every read below.
    let row = c
        .query_typed_one(sql::DELETION_ADJOURNED_PERIOD, &[])
        .await?;
    let stored: Option<i32> = row.get(0);
    let column_default: Option<i32> = row.get(1);
    let period = stored.or(column_default).unwrap_or(DEFAULT_PERIOD_DAYS);
    if !PERIOD_RANGE.contains(&period) {
        tracing::warn!(
            deletion_adjourned_period = period,
            "deletion_adjourned_period is outside GitLab's 1..=90 days: a period below 1 \
             counts as 1 day, one past the calendar makes no group due"
        );
    }
    Ok(period)
}

/// The periods GitLab's settings form accepts, in days.
pub const PERIOD_RANGE: std::ops::RangeInclusive<i32> = 1..=90;

/// The earliest cutoff: no group is marked before it (a period past the calendar).
pub const EARLIEST_CUTOFF: NaiveDate = match NaiveDate::from_ymd_opt(1, 1, 1) {
    Some(d) => d,
    None => NaiveDate::MIN,
};

/// `:cutoff = :today − :period days`; a group marked on or before it is due. A stored
/// period below 1 day counts as 1 (never a cutoff after today); one reaching past the
/// calendar gives [`EARLIEST_CUTOFF`], so no group is due (behaviour §D13).
pub fn cutoff(today: NaiveDate, period_days: i32) -> NaiveDate {
    let days = u64::try_from(period_days.max(1)).unwrap_or(1);
    today
        .checked_sub_days(chrono::Days::new(days))
        .filter(|d| *d >= EARLIEST_CUTOFF)
        .unwrap_or(EARLIEST_CUTOFF)
}

/// Warn when schedules are marked at `±infinity`: they are never due (their message
/// could not carry the date), so the operator sees them once per run.
pub async fn warn_not_finite<C: GenericClient>(c: &C) -> Result<()> {
    let n: i64 = c
        .query_typed_one(sql::NOT_FINITE_SCHEDULES, &[])
        .await?
        .get(0);
    if n > 0 {
        tracing::warn!(
            schedules = n,
            "Group deletion schedules marked at ±infinity: never due"
        );
    }
    Ok(())
}

/// One keyset page of due groups (behaviour §B51.3.1): groups with a schedule marked on or before
/// `cutoff`, with an id above `after`, ascending, at most `limit`. On
/// [`DeletionModel::ScheduledAt`] a group with `deletion_scheduled_at` is due when that
/// is at or before the cutoff's midnight UTC, as GitLab's newest worker selects it.
pub async fn due_page<C: GenericClient>(
    c: &C,
    model: DeletionModel,
    cutoff: NaiveDate,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<Schedule>> {
    let statement = if model.has_scheduled_at() {
        sql::scheduled_at::DUE_PAGE_SCHEDULED_AT
    } else {
        sql::DUE_PAGE
    };
    let after = after.unwrap_or(i64::MIN);
    let rows = c
        .query_typed(
            statement,
            &[
                (&cutoff, Type::DATE),
                (&after, Type::INT8),
                (&limit, Type::INT8),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Schedule {
            group_id: r.get(0),
            user_id: r.get(1),
            marked_for_deletion_on: r.get(2),
        })
        .collect())
}

/// The schedule of one group, if any, as the database's model records it.
pub async fn schedule_of<C: GenericClient>(
    c: &C,
    model: DeletionModel,
    group_id: i64,
) -> Result<Option<Schedule>> {
    let d = if model.has_scheduled_at() {
        details(
            c.query_typed_opt(
                sql::scheduled_at::DETAILS_SCHEDULE_OF,
                &[(&group_id, Type::INT8)],
            )
            .await?,
        )
    } else {
        Details::NotSet
    };
    let row = c
        .query_typed_opt(sql::SCHEDULE_OF, &[(&group_id, Type::INT8)])
        .await?;
    Ok(effective(group_id, d, row.map(|r| (r.get(1), r.get(2)))))
}

/// The schedule of `group_id` read under the reader's row locks: on
/// [`DeletionModel::ScheduledAt`] the `namespace_details` row first (`details_stmt`),
/// then the schedule row (`schedule_stmt`, returning `user_id, marked_for_deletion_on`).
/// Every locker takes them in this order, so they never deadlock. `None`: not scheduled.
pub async fn locked_schedule<C: GenericClient>(
    c: &C,
    model: DeletionModel,
    group_id: i64,
    details_stmt: &str,
    schedule_stmt: &str,
) -> Result<Option<Schedule>> {
    let d = if model.has_scheduled_at() {
        details(
            c.query_typed_opt(details_stmt, &[(&group_id, Type::INT8)])
                .await?,
        )
    } else {
        Details::NotSet
    };
    let row = c
        .query_typed_opt(schedule_stmt, &[(&group_id, Type::INT8)])
        .await?;
    // A non-finite mark on the schedule row is never due.
    let row = row.and_then(|r| {
        let date: Option<NaiveDate> = r.try_get(1).ok();
        date.map(|d| (r.get::<_, i64>(0), d))
    });
    Ok(effective(group_id, d, row))
}

/// Whether a namespace `id` exists with `type = 'Group'`.
pub async fn group_exists<C: GenericClient>(c: &C, id: i64) -> Result<bool> {
    Ok(c.query_typed_opt(sql::GROUP_EXISTS, &[(&id, Type::INT8)])
        .await?
        .is_some())
}

/// `s` without a `SUFFIX_RE` match (`-deletion_scheduled-<digits>` or the legacy
/// `-deleted-<digits>` at the end); unchanged when there is none.
pub fn strip_deletion_suffix(s: &str) -> &str {
    for marker in SUFFIX_MARKERS {
        if let Some(pos) = s.rfind(marker) {
            let digits = &s[pos + marker.len()..];
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return &s[..pos];
            }
        }
    }
    s
}

/// `RANDOM_SUFFIX`: `-` and 5 characters from `[a-z0-9]`.
pub fn random_suffix() -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let tail: String = (0..5)
        .map(|_| CHARS[crate::random::below(CHARS.len() as u32) as usize] as char)
        .collect();
    format!("-{tail}")
}

/// What the caller saw when it decided to restore: the restore only goes ahead if
/// the locked schedule row still has this user and is still due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// The scheduling user the caller evaluated.
    pub user_id: i64,
    /// The cutoff the caller evaluated against.
    pub cutoff: NaiveDate,
}

/// How `restore_group` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restore {
    /// Renamed, routes re-prefixed, schedule deleted.
    Restored {
        /// The group's full path after the restore.
        full_path: String,
    },
    /// The schedule row (or the group) is gone: already restored or deleted.
    NotScheduled,
    /// The schedule row changed since the caller looked (another user, or re-marked
    /// so that it is no longer due): nothing was changed.
    Changed(Schedule),
}

/// Namespaces of any type strictly below `group_id` (subgroups and project namespaces).
async fn namespaces_below<C: GenericClient>(c: &C, group_id: i64) -> Result<Vec<i64>> {
    let rows = c.query(sql::NAMESPACES_BELOW, &[&group_id]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Pick a value that `taken` rejects at most `RANDOM_SUFFIX_TRIES` times: `base`
/// first, then `base` with a random suffix.
async fn free_value<F, Fut>(base: &str, what: &str, mut taken: F) -> Result<String>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    if !taken(base.to_string()).await? {
        return Ok(base.to_string());
    }
    for _ in 0..RANDOM_SUFFIX_TRIES {
        let candidate = format!("{base}{}", random_suffix());
        if !taken(candidate.clone()).await? {
            return Ok(candidate);
        }
    }
    Err(Error::Invariant(format!(
        "no free {what} for `{base}` after {RANDOM_SUFFIX_TRIES} random suffixes"
    )))
}

/// `restore_group(g)` (behaviour §B51.5) inside the caller's transaction.
pub async fn restore_group<C: GenericClient>(
    c: &C,
    model: DeletionModel,
    group_id: i64,
    now: DateTime<Utc>,
    expected: Expected,
) -> Result<Restore> {
    // Step 1: the schedule, locked (the details row first on 18.10+).
    let Some(schedule) = locked_schedule(
        c,
        model,
        group_id,
        sql::scheduled_at::LOCK_DETAILS_SCHEDULE,
        sql::LOCK_SCHEDULE,
    )
    .await?
    else {
        return Ok(Restore::NotScheduled);
    };
    if schedule.user_id != expected.user_id || schedule.marked_for_deletion_on > expected.cutoff {
        return Ok(Restore::Changed(schedule));
    }
    let Some(g) = c.query_opt(sql::LOCK_GROUP, &[&group_id]).await? else {
        return Ok(Restore::NotScheduled);
    };
    // The routes of the group's ancestors and its own, root first, locked: a restore
    // (or rename) of an ancestor rewrites them, so this waits for it to commit and then
    // reads the committed paths. Two restores in one tree take these locks in the same
    // order, so they serialize instead of deadlocking.
    let traversal: Vec<i64> = g.get(3);
    c.execute(sql::LOCK_ANCESTOR_ROUTES, &[&traversal]).await?;
    let parent_id: Option<i64> = g.get(2);
    let routes = c
        .query_one(sql::ROUTES_OF_GROUP_AND_PARENT, &[&group_id, &parent_id])
        .await?;
    let (name, path): (String, String) = (g.get(0), g.get(1));
    let parent_path: Option<String> = routes.get(2);
    let parent_name: Option<String> = routes.get(3);
    let full = |leaf: &str, parent: &Option<String>, sep: &str| match (parent_id, parent) {
        (Some(_), Some(p)) => format!("{p}{sep}{leaf}"),
        _ => leaf.to_string(),
    };
    let old_full_path: String = routes
        .get::<_, Option<String>>(0)
        .unwrap_or_else(|| full(&path, &parent_path, "/"));
    let old_full_name: String = routes
        .get::<_, Option<String>>(1)
        .unwrap_or_else(|| full(&name, &parent_name, " / "));
    // Steps 2–4: strip the suffix; a taken full path or sibling name gets a random one.
    let new_path = free_value(strip_deletion_suffix(&path), "path", |candidate| {
        let full_path = full(&candidate, &parent_path, "/");
        async move {
            let row = c
                .query_one(sql::PATH_TAKEN, &[&full_path, &group_id])
                .await?;
            Ok(row.get::<_, bool>(0))
        }
    })
    .await?;
    let new_name = free_value(
        strip_deletion_suffix(&name),
        "name",
        |candidate| async move {
            let row = c
                .query_one(sql::NAME_TAKEN, &[&parent_id, &candidate, &group_id])
                .await?;
            Ok(row.get::<_, bool>(0))
        },
    )
    .await?;
    let new_full_path = full(&new_path, &parent_path, "/");
    let new_full_name = full(&new_name, &parent_name, " / ");
    // Step 5.
    c.execute(sql::RENAME_GROUP, &[&group_id, &new_name, &new_path, &now])
        .await?;
    // Step 6: the group's own route, then every route below it.
    c.execute(
        sql::UPDATE_GROUP_ROUTE,
        &[&group_id, &new_full_path, &new_full_name, &now],
    )
    .await?;
    let namespaces = namespaces_below(c, group_id).await?;
    let projects = hierarchy::projects_under(c, group_id).await?;
    c.execute(
        sql::REPREFIX_ROUTES_BELOW,
        &[
            &format!("{old_full_path}/"),
            &format!("{new_full_path}/"),
            &format!("{old_full_name} / "),
            &format!("{new_full_name} / "),
            &now,
            &namespaces,
            &projects,
        ],
    )
    .await?;
    // Step 7: what GitLab's restore clears (notes §B.4): the schedule row; on 18.4+ the
    // state and its metadata; on 18.10+ `deletion_scheduled_at`.
    c.execute(sql::DELETE_SCHEDULE, &[&group_id]).await?;
    if model.has_state() {
        let restored = c
            .query_opt(sql::state::RESTORE_STATE, &[&group_id, &now])
            .await?;
        // GitLab 19.1 on: the state change's outbox record, written with it, from which
        // GitLab's StatePropagationWorker restores the descendants the deletion swept up
        // (notes §A.3).
        if restored.is_some()
            && deletion_model::has_column(c, "namespace_state_propagations", "target_state").await?
        {
            c.execute(sql::propagation::PROPAGATE_RESTORE, &[&group_id, &now])
                .await?;
        }
    }
    if model.has_scheduled_at() {
        c.execute(sql::scheduled_at::CLEAR_SCHEDULED_AT, &[&group_id])
            .await?;
    }
    Ok(Restore::Restored {
        full_path: new_full_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_details_schedule_wins_and_borrows_a_missing_user_from_the_row() {
        let (d1, d2): (NaiveDate, NaiveDate) =
            ("2025-03-01".parse().unwrap(), "2025-03-02".parse().unwrap());
        let s = |user_id, marked_for_deletion_on| {
            Some(Schedule {
                group_id: 7,
                user_id,
                marked_for_deletion_on,
            })
        };
        assert_eq!(effective(7, Details::NotSet, Some((11, d1))), s(11, d1));
        assert_eq!(effective(7, Details::NotSet, None), None);
        let set = |u, d| Details::Set(u, d);
        assert_eq!(
            effective(7, set(Some(12), Some(d2)), Some((11, d1))),
            s(12, d2)
        );
        assert_eq!(effective(7, set(None, Some(d2)), Some((11, d1))), s(11, d2));
        assert_eq!(effective(7, set(Some(12), Some(d2)), None), s(12, d2));
        // No user anywhere, or a non-finite time: not scheduled (never due).
        assert_eq!(effective(7, set(None, Some(d2)), None), None);
        assert_eq!(effective(7, set(Some(12), None), Some((11, d1))), None);
    }
}
