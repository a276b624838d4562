//! The B28 bench's page-bounded floor: the floor's set-based work cut into the units
//! behaviour §B28.5 and common §7.2 bound `pat-expiring` to.
//!
//! Owns: [`page_floor`]. Per interval, pages of [`BATCH_SIZE`] tokens by `(expires_at,
//! id)` with the inclusive advance of `:min`; each page in one transaction, in one
//! statement that reads the page and claims all its subjects' tokens in the interval
//! (humans, and bots with a resource), then the page's notices sent in calls of ten,
//! then COMMIT. It holds no user row `FOR SHARE`, keeps no per-subject fall-back and
//! sends no statement the page does not need: what any design held to one page per
//! transaction pays at least, so `ours ÷ page-bounded floor` says how much of ours'
//! distance to the floor is its own and how much the page bound's.

use std::time::Instant;

use tokio_postgres::types::Type;
use tokio_postgres::Client;

use super::{claimed_at, data, instance, notices, Options, Side, Sink};
use shared::batches::pat_expiring::{Interval, BATCH_SIZE};
use shared::error::Result;
use shared::queue::{Queue, SQS_BATCH};

/// One interval's page-and-claim statement: `$1` = `:min`, `$2` = the interval's last
/// date, `$3` = `:now`, `$4` = the page size. Each row: the page's last date, then the
/// claimed token as [`claimed_at`] reads it from column 1 (all NULL for a page whose
/// subjects had nothing left to claim).
fn page_claim(iv: Interval) -> String {
    let col = format!("{}_notification_sent_at", iv.name());
    let scope = format!(
        "t.revoked = false AND t.{col} IS NULL AND t.expire_notification_delivered = false \
         AND t.impersonation = false AND t.expires_at BETWEEN $1::date AND $2::date"
    );
    let set = if iv == Interval::SevenDays {
        format!("{col} = $3::timestamptz, expire_notification_delivered = true")
    } else {
        format!("{col} = $3::timestamptz")
    };
    format!(
        "WITH page AS ( \
           SELECT t.user_id, t.expires_at FROM personal_access_tokens t JOIN users u ON u.id = t.user_id \
           WHERE {scope} AND (u.user_type = 0 OR (u.user_type = 6 AND ( \
             EXISTS (SELECT 1 FROM members m JOIN projects p ON p.id = m.source_id \
                     WHERE m.user_id = u.id AND m.source_type = 'Project' AND m.requested_at IS NULL) \
             OR EXISTS (SELECT 1 FROM members m JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group' \
                        WHERE m.user_id = u.id AND m.source_type = 'Namespace' \
                          AND m.requested_at IS NULL AND m.access_level >= 10)))) \
           ORDER BY t.expires_at, t.id LIMIT $4), \
         claimed AS ( \
           UPDATE personal_access_tokens t SET {set} \
           WHERE t.user_id IN (SELECT user_id FROM page) AND {scope} \
           RETURNING t.user_id::bigint AS user_id, t.id::bigint AS id, t.name, t.expires_at, \
                     t.created_at::timestamp AS created_at, t.last_used_at::timestamptz AS last_used_at) \
         SELECT (SELECT max(expires_at) FROM page), c.user_id, c.id, c.name, c.expires_at, \
                c.created_at, c.last_used_at, u.user_type::int4, \
                (u.state IS NOT DISTINCT FROM 'active' AND u.user_type IN (0, 4)) \
         FROM (SELECT 1) one \
         LEFT JOIN (claimed c JOIN users u ON u.id = c.user_id) ON true"
    )
}

/// The page-bounded floor on `c`: the same rows claimed and the same notices as ours
/// and the floor (the bench compares the checksums).
pub async fn page_floor(c: &mut Client, sink: &Sink, opts: &Options) -> Result<Side> {
    let (now, today) = (opts.now, opts.today());
    let instance = instance()?;
    let start = Instant::now();
    let mut pages = 0u64;
    for iv in Interval::ALL {
        let sql = page_claim(iv);
        let (mut min, last) = iv.bounds(today);
        loop {
            let tx = c.transaction().await?;
            let rows = tx
                .query_typed(
                    &sql,
                    &[
                        (&min, Type::DATE),
                        (&last, Type::DATE),
                        (&now, Type::TIMESTAMPTZ),
                        (&BATCH_SIZE, Type::INT8),
                    ],
                )
                .await?;
            let Some(next) = rows
                .first()
                .and_then(|r| r.get::<_, Option<chrono::NaiveDate>>(0))
            else {
                tx.commit().await?;
                break;
            };
            pages += 1;
            let claimed = rows
                .iter()
                .filter(|r| r.get::<_, Option<i64>>(1).is_some())
                .map(|r| claimed_at(r, 1))
                .collect();
            let out = notices(&tx, claimed, &instance, opts).await?;
            for part in out.chunks(SQS_BATCH) {
                sink.send(part).await?;
            }
            tx.commit().await?;
            min = next;
        }
    }
    Ok(Side {
        time: start.elapsed(),
        invocations: pages,
        messages: sink.messages(),
        calls: sink.calls(),
        keys: sink.keys(),
        checksum: data::b28_checksum(c).await?,
    })
}
