//! What `--read-only` asks the live database besides the copy: the rows in tables
//! the copy does not hold that block a group the plan removes ([`live_blockers`]),
//! and (for the tests) the locks the copy's session holds ([`locks_beyond_reads`]).

use std::collections::BTreeSet;

use anyhow::{anyhow, Result};
use shared::gitlab::blockers::{self, Handling};
use tokio_postgres::Client;

use super::read_only_transaction;

/// Rows on the live database that reference a group the plan removes (its tree: the
/// group, its subgroups, their projects) through a blocking foreign key of a table
/// the copy does not hold: the copied plan cannot see them. One line per key: those
/// only GitLab's services delete mean the real run ends `blocked` for that group.
/// Read in a read-only transaction of its own (catalog and `SELECT count(*)`).
pub async fn live_blockers(
    live: &mut Client,
    groups: &[i64],
    copied: &BTreeSet<String>,
) -> Result<Vec<String>> {
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let tx = read_only_transaction(live).await?;
    let keys: Vec<_> = blockers::keys(&tx)
        .await?
        .into_iter()
        .filter(|k| !copied.contains(&k.table))
        .collect();
    let mut out = Vec::new();
    for g in groups {
        let tree = blockers::tree(&tx, *g).await?;
        for f in blockers::scan(&tx, &keys, &tree).await? {
            let what = match f.key.handling {
                Handling::NeedsService { .. } => "the real run ends blocked",
                _ => "the real run deletes them too",
            };
            out.push(format!(
                "group {g}: {} row(s) in {}: {what}",
                f.rows(),
                f.key.name()
            ));
        }
    }
    tx.commit().await?;
    Ok(out)
}

/// The live session's locks other than `AccessShareLock` on a relation and its own
/// `virtualxid`, as `locktype mode` lines (empty when the copy only read), read from
/// another session `observer` while the snapshot of backend `pid` is open.
pub async fn locks_beyond_reads(observer: &Client, pid: i32) -> Result<Vec<String>> {
    Ok(observer
        .query(
            "SELECT locktype || ' ' || mode || coalesce(' ' || relation::regclass::text, '')
               FROM pg_locks WHERE pid = $1 AND granted
                AND NOT (locktype = 'relation' AND mode = 'AccessShareLock')
                AND NOT (locktype = 'virtualxid' AND mode = 'ExclusiveLock')
              ORDER BY 1",
            &[&pid],
        )
        .await
        .map_err(|e| anyhow!(e))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}
