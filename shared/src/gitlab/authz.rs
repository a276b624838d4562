//! The `project_authorizations` refresh (behaviour §3, §D1, §D2).
//!
//! Owns: `refresh(u, P)`: after it, for every p in P there is exactly one row
//! `(u, p, desired(u, p))` with `is_unique = true` when `desired > 0`, and none
//! otherwise; rows outside P are untouched. `desired` is GitLab's rule: memberships,
//! group shares, project shares and personal namespaces, ignoring the user's state.
//! One statement computes, deletes and upserts, after the user's authorization lock.
//! [`reached_from`] is the affected set of group memberships, shares included.
//!
//! [`refresh_removed`] is the set-based form for many removed memberships at once (a
//! B38 group): it takes every affected user's authorization lock (ascending ids), then
//! one statement derives `affected(m)` for each removed membership (behaviour §3's table), and
//! recomputes exactly those `(user, project)` pairs, reading each user's memberships
//! once and joining by hash, so its cost grows linearly with the pairs. For a set of removals that are
//! all already done, it leaves the same rows as `refresh(m.user_id, affected(m))` run
//! after each of them in turn: a later removal of the same user changes `desired`
//! only for projects in its own affected set, which it refreshes itself. The
//! statements are in [`sql`].

use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement};

use crate::error::Result;
use crate::locks;

pub mod sql;

// The set-based refresh statement over removed memberships: `refresh(u, affected(m))`
// for all of them at once. Returns one row: rows deleted, rows written.
//
// * `affected`: behaviour §3's affected sets: `{p}` for a project membership,
//   [`reached_from`]`(g)` for a group membership (`roots`: g and the groups shared
//   with it; `sub`: their subtrees; their projects and the projects shared with them).
// * `pairs` carries each pair's project namespace (type, `traversal_ids`, owner,
//   `share_with_group_lock`), read while the pairs are found.
// * `grants`: every access-granting membership of the users (active, no request,
//   level ≥ 10), read once per user; `reach` adds the groups shared with their groups.
// * `desired`: one row per pair, [`sql::desired!`]'s definition: the highest of 0, the
//   user's project membership, its `reach` on the project namespace's `traversal_ids`
//   when that namespace is a Group, each project share's lower level, and 50 for the
//   owner of a User namespace. A pair whose project does not exist gets 0 and is
//   never inserted.
// * Then the same effects as [`refresh`]: a pair's current row goes unless `desired`
//   has it at that level (> 0), found and deleted in one probe per pair; a desired row
//   is inserted, or its `is_unique` set, unless it is already there with `is_unique =
//   true` (probed only for the pairs that keep access). Both see the rows as they were
//   before the statement, as every part of one statement does.
//
// Its text is `sql::REFRESH_REMOVED`, over the bound parameters `$1`–`$5`.

/// A membership that was removed: what `affected(m)` and the refresh need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// `m.user_id` (invites have none and need no refresh).
    pub user_id: i64,
    /// `m.source_type`.
    pub source_type: String,
    /// `m.source_id`.
    pub source_id: i64,
}

/// The two statements of [`refresh_removed`], prepared once per session and reused
/// (B38 prepares them once per page and runs them once per group).
pub struct RemovedRefresher {
    lock: Statement,
    refresh: Statement,
}

impl RemovedRefresher {
    /// Prepare the statements on `c`'s session.
    pub async fn prepare<C: GenericClient>(c: &C) -> Result<RemovedRefresher> {
        Ok(RemovedRefresher {
            lock: c.prepare(locks::sql::XACT_LOCKS).await?,
            refresh: c.prepare(sql::REFRESH_REMOVED).await?,
        })
    }

    /// [`refresh_removed`] with the prepared statements. The lock statement and the
    /// refresh are sent together (pipelined): the server runs the refresh, and takes its
    /// snapshot, only after every lock is held.
    pub async fn run<C: GenericClient>(&self, c: &C, removed: &[Removed]) -> Result<RefreshCounts> {
        self.lock_and_run(c, &users_of(removed), removed).await
    }

    /// The authorization locks of `users` (ascending ids; they must include every user
    /// of `removed`), then the refresh of `removed`, pipelined as in [`Self::run`]. With
    /// nothing removed, only the locks are taken: a caller locks every user whose
    /// membership it may still remove (behaviour §7.2 (d)) in the same call.
    pub async fn lock_and_run<C: GenericClient>(
        &self,
        c: &C,
        users: &[i64],
        removed: &[Removed],
    ) -> Result<RefreshCounts> {
        debug_assert!(users.windows(2).all(|w| w[0] < w[1]));
        debug_assert!(removed
            .iter()
            .all(|r| users.binary_search(&r.user_id).is_ok()));
        if users.is_empty() {
            return Ok(RefreshCounts::default());
        }
        let keys: Vec<i64> = users
            .iter()
            .map(|u| locks::lock_key(&format!("project-authorizations:{u}")))
            .collect();
        let lock_params: [&(dyn ToSql + Sync); 1] = [&keys];
        if removed.is_empty() {
            c.execute(&self.lock, &lock_params).await?;
            return Ok(RefreshCounts::default());
        }
        let [pu, pp, gu, gg] = removed_params(removed);
        let removed_users = users_of(removed);
        let refresh_params: [&(dyn ToSql + Sync); 5] = [&pu, &pp, &gu, &gg, &removed_users];
        let (locked, row) = futures::join!(
            c.execute(&self.lock, &lock_params),
            c.query_one(&self.refresh, &refresh_params)
        );
        locked?;
        let row = row?;
        Ok(RefreshCounts {
            deleted: row.get(0),
            written: row.get(1),
        })
    }
}

/// The users of `removed`, ascending, each once.
fn users_of(removed: &[Removed]) -> Vec<i64> {
    let mut users: Vec<i64> = removed.iter().map(|r| r.user_id).collect();
    users.sort_unstable();
    users.dedup();
    users
}

/// The arrays of [`sql::REFRESH_REMOVED`]'s `$1`–`$4`; other source types affect no project.
fn removed_params(removed: &[Removed]) -> [Vec<i64>; 4] {
    let mut v: [Vec<i64>; 4] = Default::default();
    for r in removed {
        match r.source_type.as_str() {
            "Project" => {
                v[0].push(r.user_id);
                v[1].push(r.source_id);
            }
            "Namespace" => {
                v[2].push(r.user_id);
                v[3].push(r.source_id);
            }
            _ => {}
        }
    }
    v
}

/// `refresh(m.user_id, affected(m))` for every removed membership at once, inside the
/// caller's transaction and after the removals: the users' authorization locks in
/// ascending user id order, then one statement. Equivalent to the per-membership
/// refreshes run one after another once every removal is done.
pub async fn refresh_removed<C: GenericClient>(
    c: &C,
    removed: &[Removed],
) -> Result<RefreshCounts> {
    if removed.is_empty() {
        return Ok(RefreshCounts::default());
    }
    RemovedRefresher::prepare(c).await?.run(c, removed).await
}

/// `affected` of the group memberships of `groups` (behaviour §3): the projects under
/// them and under every group shared with one of them, and the projects shared with any
/// group of those subtrees; ascending ids. A superset is harmless (the refresh computes
/// each pair exactly); a missing project would keep a stale row.
pub async fn reached_from<C: GenericClient>(c: &C, groups: &[i64]) -> Result<Vec<i64>> {
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    Ok(c.query(sql::REACHED_FROM, &[&groups])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// GitLab's `ProjectAccessChangedService` for `projects`: recompute every existing
/// authorization row on them (after a share they depended on went, e.g. with its
/// group), set-based as [`refresh_removed`] over those (user, project) pairs.
pub async fn refresh_projects<C: GenericClient>(c: &C, projects: &[i64]) -> Result<RefreshCounts> {
    if projects.is_empty() {
        return Ok(RefreshCounts::default());
    }
    let pairs: Vec<Removed> = c
        .query(sql::AUTHORIZED_ON_PROJECTS, &[&projects])
        .await?
        .iter()
        .map(|r| Removed {
            user_id: r.get(0),
            source_type: "Project".into(),
            source_id: r.get(1),
        })
        .collect();
    refresh_removed(c, &pairs).await
}

/// Rows removed and rows written by one refresh.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshCounts {
    /// Rows deleted.
    pub deleted: i64,
    /// Rows inserted or corrected.
    pub written: i64,
}

/// `refresh(u, P)` inside the caller's transaction.
pub async fn refresh<C: GenericClient>(
    c: &C,
    user_id: i64,
    projects: &[i64],
) -> Result<RefreshCounts> {
    if projects.is_empty() {
        return Ok(RefreshCounts::default());
    }
    let mut p = projects.to_vec();
    p.sort_unstable();
    p.dedup();
    locks::authorization_lock(c, user_id).await?;
    let row = c.query_one(sql::REFRESH, &[&user_id, &p]).await?;
    Ok(RefreshCounts {
        deleted: row.get(0),
        written: row.get(1),
    })
}
