//! The cold start with the database, part of the `footprint` bench: for every function
//! an SQS queue feeds, process start → its first record handled over TLS (a cron's
//! own message; for a child worker a message about rows that do not exist, which it
//! re-checks and answers as it answers a stale one), directly and through a relay
//! holding each round trip 1 ms (`wire`, a VPC) that also counts the round trips; and
//! per function the round trips of the cold-start schema check once the session is up
//! (issue 52).
//!
//! Owns: the throwaway TLS cluster's use (`tls_db`), the first messages, the starts and
//! their rows.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::footprint::{binary, first_record, io, sqs_event};
use super::tls_db::TlsOn;
use super::wire::{Timeline, Wire};
use super::{median, Options, Row, Target};
use shared::error::{Error, Result};
use shared::function::Function;
use shared::gitlab::storage::StorageItem;
use shared::messages::{
    delete_placeholder_user_key, delete_user_key, group_destroy_key, prune_deletions_key,
    webhook_event_key, webhook_key, Addressed, Envelope,
};
use shared::queue::OutMessage;
use shared::workers::delete_placeholder_user::DeletePlaceholderUserRun;
use shared::workers::delete_user::DeleteUserRun;
use shared::workers::deliver_notification::WebhookNotification;
use shared::workers::group_destroy::GroupDestroyRun;
use shared::workers::prune_deletions::PruneDeletionsRun;
use shared::workers::storage_cleanup::{storage_cleanup_key, StorageCleanupRun};

/// The bench database's `application_settings.uuid`.
pub const BENCH_INSTANCE: &str = "6d0f6a9e-bench-0000-0000-000000000001";

/// Cold start including the database: for every function a cron starts, process start
/// → its cron record handled on an empty migrated database, over TLS (`sslmode=require`,
/// the certificate verified against `DATABASE_CA_BUNDLE`), median of `starts`.
///
/// TLS is switched on in a throwaway cluster of its own (`engine::pg`, on a free port), never
/// on the bench's cluster: that one may be shared (the test command runs the benches
/// beside the other tests on one server), and `ssl = on` there would change what every
/// other session of it negotiates.
pub(super) async fn with_db(dir: &Path, starts: usize, opts: &Options) -> Result<Vec<Row>> {
    let cluster = engine::pg::Cluster {
        base: std::env::temp_dir().join(format!("hk-bench-tls-pg-{}", std::process::id())),
        port: engine::pg::free_port().map_err(pg_error)?,
    };
    cluster.up().map_err(pg_error)?;
    let result = cold_start_on(&cluster, dir, starts, opts).await;
    let down = cluster.down();
    let _ = std::fs::remove_dir_all(&cluster.base);
    let rows = result?;
    down.map_err(pg_error)?;
    Ok(rows)
}

/// The first message `f` is handed: a cron's own message; for an SQS-fed child, one
/// about ids no row has (the worker re-checks the database and answers as for a stale
/// message, the cheapest real record); `None` for a function no SQS queue feeds.
/// Public for the test that pins a cold start's round trips
/// (`tests/it/reliability/round_trips.rs`).
pub fn first_message(f: Function, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    const NONE: i64 = 987_654_321;
    let today = now.date_naive();
    fn env<P: Addressed>(key: String, now: chrono::DateTime<chrono::Utc>, p: P) -> Option<String> {
        Some(OutMessage::to(key, "bench", now, &p).envelope.to_body())
    }
    if f.cron().is_some() {
        return Some(Envelope::cron(f, "bench", now).to_body());
    }
    match f {
        Function::DeleteUser => env(
            delete_user_key(NONE),
            now,
            DeleteUserRun {
                user_id: NONE,
                initiator_user_id: None,
                reason: None,
            },
        ),
        Function::PruneDeletions => env(prune_deletions_key("bench"), now, PruneDeletionsRun {}),
        Function::GroupDestroy => env(
            group_destroy_key(NONE, today, NONE),
            now,
            GroupDestroyRun {
                group_id: NONE,
                user_id: NONE,
                marked_for_deletion_on: today,
            },
        ),
        Function::DeletePlaceholderUser => env(
            delete_placeholder_user_key(NONE, 1),
            now,
            DeletePlaceholderUserRun {
                placeholder_user_id: NONE,
                attempt: 1,
            },
        ),
        Function::DeliverNotification => {
            let event_key = webhook_event_key(NONE, NONE);
            env(
                webhook_key(&event_key, NONE),
                now,
                WebhookNotification {
                    hook_id: NONE,
                    event_key,
                    body: serde_json::json!({}),
                    system_hook: None,
                },
            )
        }
        Function::StorageCleanup => {
            // A container repository whose row is gone: re-checked under its locks
            // and answered as already removed, with no registry call.
            let item = StorageItem::ContainerRepository {
                id: NONE,
                path: "bench/gone".into(),
            };
            env(
                storage_cleanup_key(NONE, &item),
                now,
                StorageCleanupRun {
                    group_id: NONE,
                    project_id: NONE,
                    item,
                },
            )
        }
        _ => None,
    }
}

fn pg_error(e: anyhow::Error) -> Error {
    Error::Invariant(format!("footprint: the TLS cluster: {e:#}"))
}

async fn cold_start_on(
    cluster: &engine::pg::Cluster,
    dir: &Path,
    starts: usize,
    opts: &Options,
) -> Result<Vec<Row>> {
    let admin = shared::db::Connector::from_url(&cluster.url())?
        .connect("hk-bench")
        .await?;
    admin.batch_execute("CREATE DATABASE fp_tls").await?;
    let db_url = format!("postgres://postgres@127.0.0.1:{}/fp_tls", cluster.port);
    let mut c = shared::db::Connector::from_url(&db_url)?
        .connect("hk-bench")
        .await?;
    engine::migrate::run(&mut c).await?;
    // The instance's settings row, whose uuid storage-cleanup must find before it
    // re-checks an item (GITLAB_INSTANCE_UUID).
    c.execute(
        "INSERT INTO application_settings (uuid) VALUES ($1)",
        &[&BENCH_INSTANCE],
    )
    .await?;
    drop(c);
    let tls = TlsOn::on(&admin).await?;
    let url = format!("{db_url}?sslmode=require");
    let env = [
        ("DATABASE_CA_BUNDLE", tls.ca_bundle().display().to_string()),
        (
            shared::config::storage::INSTANCE_UUID_VAR,
            BENCH_INSTANCE.to_string(),
        ),
    ];
    let mut rows = Vec::new();
    let result = async {
        tls.wait_ready(&url).await?;
        for f in Function::ALL.iter() {
            let bin = binary(dir, *f);
            let Some(event) = first_message(*f, opts.now) else {
                continue;
            };
            if !bin.is_file() {
                continue;
            }
            let event = sqs_event(*f, &event);
            let mut v = Vec::new();
            for _ in 0..starts {
                v.push(first_record(&bin, *f, event.clone(), &url, &env).await?);
            }
            let what = if f.cron().is_some() {
                "its cron message"
            } else {
                "a message about rows that do not exist"
            };
            rows.push(Row::new(
                "footprint",
                format!("{f}: process start → first record handled, TLS to PostgreSQL"),
                format!(
                    "median of {starts}; {what} on an empty database, \
                     sslmode=require with DATABASE_CA_BUNDLE (verified chain and host)"
                ),
                median(&mut v).as_secs_f64() * 1000.0,
                "ms",
                None,
            ));
            // The same through a relay that holds each round trip VPC_RTT (a VPC).
            let (mut v, mut trips, mut held) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..starts {
                let wire = Wire::delayed("127.0.0.1", cluster.port, VPC_RTT).await?;
                let via = wire.url(&url, cluster.port);
                v.push(first_record(&bin, *f, event.clone(), &via, &env).await?);
                trips.push(wire.round_trips());
                held.push(wire.mean_hold());
            }
            trips.sort_unstable();
            rows.push(Row::new(
                "footprint",
                format!(
                    "{f}: process start → first record handled, TLS, {} ms per round trip",
                    VPC_RTT.as_millis()
                ),
                format!(
                    "median of {starts}, as above through a relay holding each round \
                     trip {} ms (held {:.3} ms on average); {} round trips on the wire per \
                     start (TLS handshake, session, schema check, the record)",
                    VPC_RTT.as_millis(),
                    median(&mut held).as_secs_f64() * 1000.0,
                    trips[trips.len() / 2]
                ),
                median(&mut v).as_secs_f64() * 1000.0,
                "ms",
                Some(Target::le(50.0)),
            ));
            // Where the time goes: one start through a relay that holds nothing and
            // notes when each round trip starts and is answered.
            let wire = Wire::start("127.0.0.1", cluster.port).await?;
            let via = wire.url(&url, cluster.port);
            let t0 = Instant::now();
            let total = first_record(&bin, *f, event.clone(), &via, &env).await?;
            rows.push(timeline_row(*f, t0, total, &wire.timeline()));
        }
        Ok::<(), Error>(())
    }
    .await;
    tls.off(&admin).await?;
    result?;
    // On a current-thread runtime, as a function runs (`shared::lambda::run`): there a
    // request is written when the task yields, so requests sent together share a flight.
    let (url, port, now) = (db_url.clone(), cluster.port, opts.now);
    let counted = tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| io("runtime", e))?
            .block_on(schema_check_round_trips(&url, port, now))
    })
    .await
    .map_err(|e| Error::Invariant(format!("footprint: the schema check count: {e}")))?;
    rows.extend(counted?);
    Ok(rows)
}

/// One start's timeline as a row: process start (the bench's spawn) → the function's
/// TCP connection, then per round trip the function's time (the server's last bytes
/// → its next flight) and the server's (that flight → the server's last bytes before
/// the function's next flight, its first bytes in brackets), and the last reply → the
/// answer to the Runtime API.
fn timeline_row(f: Function, t0: Instant, total: Duration, t: &Timeline) -> Row {
    let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1000.0;
    let connect = t.accepted.map_or(0.0, |a| ms(t0, a));
    let (mut server, mut client, mut steps) = (0.0, 0.0, Vec::new());
    for (k, start) in t.trips.iter().enumerate() {
        let before = match t.ends.get(k).copied().flatten() {
            Some(e) => e,
            None => t.accepted.unwrap_or(*start),
        };
        let end = match t.ends.get(k + 1).copied().flatten() {
            Some(e) => e,
            None => t.last_reply.unwrap_or(*start),
        };
        let c = ms(before, *start);
        let s = ms(*start, end);
        let first = t.replies.get(k).map_or(0.0, |r| ms(*start, *r));
        client += c;
        server += s;
        steps.push(format!("{c:.1}/{s:.1} ({first:.1})"));
    }
    let end = t0 + total;
    let after = t.last_reply.map_or(0.0, |r| ms(r, end));
    Row::new(
        "footprint",
        format!("{f}: where a cold start's time goes, TLS, no delay"),
        format!(
            "one start through a relay that holds nothing: process start → TCP connect \
             {connect:.1} ms; {} round trips, the function's time before each {client:.1} ms \
             and the server's {server:.1} ms in all; last reply → answer {after:.1} ms; per \
             round trip function/server ms (server's first bytes): {}",
            t.trips.len(),
            steps.join(", ")
        ),
        total.as_secs_f64() * 1000.0,
        "ms",
        None,
    )
}

/// The latency of a round trip in a VPC the cold start is timed at (issue 52).
const VPC_RTT: Duration = Duration::from_millis(1);

/// Per function, the round trips of its cold-start schema check once the session is
/// up, counted on the wire (`wire`) in this process: a cold session's check less
/// connecting alone (as `tests/it/reliability/round_trips.rs` pins them).
async fn schema_check_round_trips(
    db_url: &str,
    port: u16,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<Row>> {
    use shared::lambda::{Environment, Gate, SchemaGate};
    let deps = |url: &str, function: Function| -> Result<Environment> {
        let queue = Arc::new(engine::local_queue::LocalQueue::new(now));
        Ok(Environment::local(function, url, queue)?
            .with_clock(Arc::new(shared::clock::FixedClock(now))))
    };
    let wire = Wire::start("127.0.0.1", port).await?;
    let alone = shared::db::Session::new(
        shared::db::Connector::from_url(&wire.url(db_url, port))?,
        "hk-bench",
    );
    // Connecting alone, without the settings: a cold start sends them with the check.
    let (client, settle) = alone.client_unsettled().await?;
    drop((client, settle));
    let connect = wire.round_trips();
    let mut rows = Vec::new();
    for f in Function::ALL {
        // A relay per session: a closed one's Terminate must not count for the next.
        let wire = Wire::start("127.0.0.1", port).await?;
        let d = deps(&wire.url(db_url, port), *f)?;
        match SchemaGate::new().check(&d).await {
            Ok(Gate::Open) => {}
            other => {
                return Err(Error::Invariant(format!(
                    "footprint: {f}'s schema check did not pass: {other:?}"
                )))
            }
        }
        rows.push(Row::new(
            "footprint",
            format!("{f}: round trips of the cold-start schema check after the session is up"),
            format!(
                "counted on the wire by a relay ({connect} more to connect, without TLS); \
                 the session settings, release, model and column probes in one, the statements it can run in one"
            ),
            wire.round_trips().saturating_sub(connect) as f64,
            "round trips",
            Some(Target::le(3.0)),
        ));
    }
    Ok(rows)
}
