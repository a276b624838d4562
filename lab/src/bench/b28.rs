//! The B28 bench: `b28` (ours ÷ the set-based floor) and `b28-pages` (ours ÷ the
//! page-bounded floor) on personal access tokens of humans and bots.
//!
//! Owns: the producer's transport of the bench ([`Sink`]: `deliver-notification`
//! messages go to the SQS adapter on moto with `--b28-on-moto`, else to an
//! in-process sink that serializes and counts them; `pat-expiring` continuations are
//! kept and delivered by the bench at once, so their delays are virtual), ours (the
//! `pat-expiring` handler until idle, through [`process_record`] like a Lambda
//! invocation; the child `deliver-notification` never runs: its messages are only
//! sent), and the floor: one set-based `UPDATE … RETURNING` of the same tokens with
//! the same columns, one set-based read of the claimed bots' resources, hooks and
//! recipients (the statement ours uses for a page of bots), and the same messages
//! sent in `SendMessageBatch` calls of ten; and the page-bounded floor
//! (`b28/page_floor.rs`), the floor's work a page per transaction. All three run on clones
//! of one data set and must leave the same token rows and send the same message keys
//! (checksums compared and reported).

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{NaiveDate, NaiveDateTime};
use tokio_postgres::Client;

use super::data::{self, B28Sizes};
use super::queue_calls::Moto;
use super::{prewarm, ratio, secs, BenchDbs, Options, Row, Scale, Target};
use engine::local::process_record;
mod page_floor;

use page_floor::page_floor;
use shared::batches::pat_expiring::{
    bot_contexts, bot_notices, ClaimedToken, Interval, BATCH_SIZE, MAX_TOKENS,
};
use shared::config::Settings;
use shared::db::{Connector, Session};
use shared::error::{Error, Result};
use shared::function::Function;
use shared::handlers::Dispatch;
use shared::messages::{user_email_key, Envelope};
use shared::notify::Instance;
use shared::queue::sqs::SqsQueue;
use shared::queue::{OutMessage, Queue, QueueError, SQS_BATCH};
use shared::runtime::{Invocation, RecordMeta};
use shared::workers::deliver_notification::EmailNotification;

const F: Function = Function::PatExpiring;

/// The transport of one side: children to SQS (moto) or in-process, continuations
/// kept for the bench to deliver.
pub struct Sink {
    sqs: Option<SqsQueue>,
    continuations: Mutex<Vec<OutMessage>>,
    messages: AtomicU64,
    calls: AtomicU64,
    keys: AtomicU64,
}

impl Sink {
    fn new(sqs: Option<SqsQueue>) -> Sink {
        Sink {
            sqs,
            continuations: Mutex::new(Vec::new()),
            messages: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            keys: AtomicU64::new(0),
        }
    }

    /// `deliver-notification` messages sent.
    pub fn messages(&self) -> u64 {
        self.messages.load(Ordering::Relaxed)
    }

    /// Transport calls: SQS API calls on moto; in-process, one per ten messages of a
    /// `send` (what `SendMessageBatch` would take).
    pub fn calls(&self) -> u64 {
        match &self.sqs {
            Some(q) => q.api_calls(),
            None => self.calls.load(Ordering::Relaxed),
        }
    }

    /// An order-independent hash of every message key sent.
    pub fn keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    fn take_continuation(&self) -> Option<OutMessage> {
        self.continuations.lock().expect("sink lock").pop()
    }
}

#[async_trait]
impl Queue for Sink {
    async fn send(&self, messages: &[OutMessage]) -> std::result::Result<(), QueueError> {
        let (cont, out): (Vec<OutMessage>, Vec<OutMessage>) =
            messages.iter().cloned().partition(|m| m.receiver == F);
        self.continuations.lock().expect("sink lock").extend(cont);
        if out.is_empty() {
            return Ok(());
        }
        match &self.sqs {
            Some(q) => q.send(&out).await?,
            None => {
                for m in &out {
                    std::hint::black_box(m.envelope.to_body());
                }
                self.calls
                    .fetch_add(out.len().div_ceil(SQS_BATCH) as u64, Ordering::Relaxed);
            }
        }
        for m in &out {
            let mut h = DefaultHasher::new();
            m.envelope.message_key.hash(&mut h);
            self.keys.fetch_add(h.finish(), Ordering::Relaxed);
        }
        self.messages.fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// What one side of the comparison did.
#[derive(Debug, Clone)]
pub struct Side {
    /// Wall time.
    pub time: Duration,
    /// Handler runs (ours); 1 for the floor.
    pub invocations: u64,
    /// Messages sent to `deliver-notification`.
    pub messages: u64,
    /// Transport calls.
    pub calls: u64,
    /// The hash of the message keys.
    pub keys: u64,
    /// The checksum of the token rows afterwards.
    pub checksum: String,
}

/// The instance the notices link to.
fn instance() -> Result<Instance> {
    Instance::new("https://gitlab.example.com", None, "18.0.0")
}

/// `pat-expiring` with its dependencies: the instance.
fn dispatch() -> Result<Dispatch> {
    Ok(Dispatch::new().with::<shared::handlers::PatExpiring>(instance()?))
}

/// Ours: `pat-expiring` until idle: the cron message, then each continuation at once
/// (its delay is virtual: `now` moves on by it), on one session kept across handler
/// runs as a warm Lambda keeps it (`Session`: pinged before each run).
pub async fn ours(
    connector: Connector,
    check: &Client,
    sink: &Sink,
    opts: &Options,
) -> Result<Side> {
    let settings = Settings::default();
    let dispatch = dispatch()?;
    let mut now = opts.now;
    let mut next = Some(Envelope::cron(F, "bench", now));
    let mut runs = 0u64;
    let start = Instant::now();
    let session = Session::new(connector, F.name());
    while let Some(env) = next.take() {
        let mut client = session.client().await?;
        let inv = Invocation::new(F, now, sink, &settings);
        let meta = RecordMeta {
            sqs_message_id: Some(format!("bench-{runs}")),
            receive_count: 1,
            aws_request_id: None,
        };
        let outcome = process_record(&dispatch, &inv, &mut *client, &env.to_body(), &meta).await;
        if let Some(error) = outcome.error() {
            return Err(Error::Invariant(format!("b28: a run failed: {error}")));
        }
        runs += 1;
        next = sink.take_continuation().map(|m| {
            now += chrono::Duration::seconds(i64::from(m.delay_s));
            m.envelope
        });
    }
    let time = start.elapsed();
    Ok(Side {
        time,
        invocations: runs,
        messages: sink.messages(),
        calls: sink.calls(),
        keys: sink.keys(),
        checksum: data::b28_checksum(check).await?,
    })
}

/// The floor's claim: every token any interval would claim, with the columns of its
/// interval, in one statement. Bots only with a resource (behaviour §B28.6 step 1).
const FLOOR_CLAIM: &str = "
    UPDATE personal_access_tokens t SET
      seven_days_notification_sent_at = CASE WHEN t.expires_at <= $2::date THEN $5::timestamptz
                                             ELSE t.seven_days_notification_sent_at END,
      thirty_days_notification_sent_at = CASE WHEN t.expires_at > $2::date AND t.expires_at <= $3::date
                                              THEN $5::timestamptz ELSE t.thirty_days_notification_sent_at END,
      sixty_days_notification_sent_at = CASE WHEN t.expires_at > $3::date THEN $5::timestamptz
                                             ELSE t.sixty_days_notification_sent_at END,
      expire_notification_delivered = t.expires_at <= $2::date
    FROM users u
    WHERE u.id = t.user_id AND t.revoked = false AND t.impersonation = false
      AND t.expire_notification_delivered = false
      AND t.expires_at BETWEEN $1::date AND $4::date
      AND CASE WHEN t.expires_at <= $2::date THEN t.seven_days_notification_sent_at IS NULL
               WHEN t.expires_at <= $3::date THEN t.thirty_days_notification_sent_at IS NULL
               ELSE t.sixty_days_notification_sent_at IS NULL END
      AND (u.user_type = 0
           OR (u.user_type = 6 AND (
                 EXISTS (SELECT 1 FROM members m JOIN projects p ON p.id = m.source_id
                         WHERE m.user_id = u.id AND m.source_type = 'Project' AND m.requested_at IS NULL)
              OR EXISTS (SELECT 1 FROM members m JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group'
                         WHERE m.user_id = u.id AND m.source_type = 'Namespace'
                           AND m.requested_at IS NULL AND m.access_level >= 10))))
    RETURNING t.user_id::bigint, t.id::bigint, t.name, t.expires_at, t.created_at::timestamp,
              t.last_used_at::timestamptz, u.user_type::int4,
              (u.state IS NOT DISTINCT FROM 'active' AND u.user_type IN (0, 4))";

/// One claimed token of the floor.
struct Claimed {
    id: i64,
    name: String,
    expires_at: NaiveDate,
    created_at: NaiveDateTime,
    last_used_at: Option<chrono::DateTime<chrono::Utc>>,
    user_id: i64,
}

fn interval_of(expires_at: NaiveDate, today: NaiveDate) -> Interval {
    Interval::ALL
        .into_iter()
        .find(|iv| expires_at <= iv.bounds(today).1)
        .unwrap_or(Interval::SixtyDays)
}

/// The floor: the set-based claim, the bots' read, the same messages in calls of ten,
/// COMMIT.
pub async fn floor(c: &mut Client, sink: &Sink, opts: &Options) -> Result<Side> {
    let (now, today) = (opts.now, opts.today());
    let instance = instance()?;
    let d = |iv: Interval| iv.bounds(today).1;
    // The sends may take longer than the sessions' idle-in-transaction limit (moto).
    c.batch_execute("SET idle_in_transaction_session_timeout = 0")
        .await?;
    let start = Instant::now();
    let tx = c.transaction().await?;
    let rows = tx
        .query(
            FLOOR_CLAIM,
            &[
                &today,
                &d(Interval::SevenDays),
                &d(Interval::ThirtyDays),
                &d(Interval::SixtyDays),
                &now,
            ],
        )
        .await?;
    let claimed = rows.iter().map(|r| claimed_at(r, 0)).collect();
    let out = notices(&tx, claimed, &instance, opts).await?;
    for part in out.chunks(SQS_BATCH) {
        sink.send(part).await?;
    }
    tx.commit().await?;
    let time = start.elapsed();
    Ok(Side {
        time,
        invocations: 1,
        messages: sink.messages(),
        calls: sink.calls(),
        keys: sink.keys(),
        checksum: data::b28_checksum(c).await?,
    })
}

/// One row of a floor's claim from column `at` on: `(user, id, name, expires_at,
/// created_at, last_used_at, user_type, can_receive)`.
fn claimed_at(r: &tokio_postgres::Row, at: usize) -> (Claimed, bool, bool) {
    let t = Claimed {
        user_id: r.get(at),
        id: r.get(at + 1),
        name: r.get(at + 2),
        expires_at: r.get(at + 3),
        created_at: r.get(at + 4),
        last_used_at: r.get(at + 5),
    };
    let kind: i32 = r.get(at + 6);
    (t, kind == 6, r.get(at + 7))
}

/// The notices of claimed tokens, built as ours builds them: one email per human
/// who can receive it, per interval; for each bot, its resource's notices about its
/// reported token (the bots' resources read in one statement).
async fn notices<C: tokio_postgres::GenericClient>(
    c: &C,
    claimed: Vec<(Claimed, bool, bool)>,
    instance: &Instance,
    opts: &Options,
) -> Result<Vec<OutMessage>> {
    let (now, today) = (opts.now, opts.today());
    // (user, interval) → (can_receive, is_bot, tokens)
    let mut subjects: BTreeMap<(i64, usize), (bool, bool, Vec<Claimed>)> = BTreeMap::new();
    for (t, is_bot, can_receive) in claimed {
        let iv = interval_of(t.expires_at, today);
        let idx = Interval::ALL.iter().position(|x| *x == iv).unwrap_or(0);
        subjects
            .entry((t.user_id, idx))
            .or_insert_with(|| (can_receive, is_bot, Vec::new()))
            .2
            .push(t);
    }
    let bot_ids: Vec<i64> = subjects
        .iter()
        .filter(|(_, v)| v.1)
        .map(|(k, _)| k.0)
        .collect();
    let bots = if bot_ids.is_empty() {
        Default::default()
    } else {
        bot_contexts(c, &bot_ids).await?
    };
    let email = |key: String, n: &EmailNotification| OutMessage::to(key, "bench", now, n);
    let mut out: Vec<OutMessage> = Vec::new();
    for ((user_id, idx), (can_receive, is_bot, mut tokens)) in subjects {
        let iv = Interval::ALL[idx];
        tokens.sort_by_key(|t| (t.expires_at, t.id));
        if !is_bot {
            if can_receive {
                let n = EmailNotification::AccessTokenAboutToExpire {
                    recipient_user_id: user_id,
                    days_to_expire: iv.days_to_expire(),
                    token_names: tokens
                        .into_iter()
                        .take(MAX_TOKENS)
                        .map(|t| t.name)
                        .collect(),
                };
                out.push(email(user_email_key(iv.name(), user_id, today), &n));
            }
            continue;
        }
        let Some(ctx) = bots.get(&user_id) else {
            return Err(Error::Invariant(format!(
                "b28 floor: bot {user_id} has no resource"
            )));
        };
        let Some(t) = tokens.iter().min_by_key(|t| t.id) else {
            continue;
        };
        let reported = ClaimedToken {
            id: t.id,
            name: t.name.clone(),
            created_at: t.created_at,
            expires_at: t.expires_at,
            last_used_at: t.last_used_at,
            user_id,
        };
        out.extend(bot_notices(
            iv, user_id, &reported, ctx, instance, "bench", now,
        ));
    }
    Ok(out)
}

/// A sink on fresh moto queues (when an endpoint is given) or in-process.
async fn sink(opts: &Options) -> Result<(Sink, Option<Moto>)> {
    match opts.moto_endpoint.as_deref().filter(|_| opts.b28_on_moto) {
        Some(endpoint) => {
            let moto = Moto::new(endpoint).await?;
            Ok((Sink::new(Some(moto.queue())), Some(moto)))
        }
        None => Ok((Sink::new(None), None)),
    }
}

fn per_token(side: &Side, tokens: u64) -> String {
    let us = side.time.as_secs_f64() * 1e6 / (tokens.max(1) as f64);
    format!("{us:.1} µs/token")
}

/// Which set-based side: the floor's one statement, or its work a page per transaction.
#[derive(Clone, Copy)]
enum Floor {
    Whole,
    Paged,
}

/// A set-based side on its own clone `tag` of the data set, dropped afterwards.
async fn set_based(dbs: &mut BenchDbs, tag: &str, which: Floor, opts: &Options) -> Result<Side> {
    dbs.clone_db("b28_src", tag).await?;
    let side = {
        let mut c = dbs.connector(tag)?.connect("hk-bench").await?;
        prewarm(&c).await?;
        let (sink, moto) = sink(opts).await?;
        let side = match which {
            Floor::Whole => floor(&mut c, &sink, opts).await,
            Floor::Paged => page_floor(&mut c, &sink, opts).await,
        };
        if let Some(m) = moto {
            m.cleanup().await;
        }
        side?
    };
    dbs.drop_db(tag).await?;
    Ok(side)
}

/// `b28` on one data set of `scale.b28_tokens` tokens over `scale.b28_users` users.
pub async fn run(scale: &Scale, opts: &Options, dbs: &mut BenchDbs) -> Result<Vec<Row>> {
    let today = opts.today();
    let sizes = B28Sizes::new(scale.b28_tokens, scale.b28_users);
    {
        let src = dbs.create("b28_src").await?;
        data::b28(&src, today, sizes).await?;
    }
    // Each side runs alone on its own clone (the other one is dropped first), on fresh
    // moto queues.
    let floor_side = set_based(dbs, "b28_floor", Floor::Whole, opts).await?;
    let pages_side = set_based(dbs, "b28_pages", Floor::Paged, opts).await?;
    dbs.clone_db("b28_src", "b28_ours").await?;
    let ours_side = {
        let check = dbs.connector("b28_ours")?.connect("hk-bench").await?;
        prewarm(&check).await?;
        let (sink, moto) = sink(opts).await?;
        let side = ours(dbs.handler_connector("b28_ours")?, &check, &sink, opts).await;
        if let Some(m) = moto {
            m.cleanup().await;
        }
        side?
    };
    dbs.drop_db("b28_ours").await?;
    dbs.drop_db("b28_src").await?;
    let same_as = |a: &Side, b: &Side| {
        a.checksum == b.checksum && a.keys == b.keys && a.messages == b.messages
    };
    let same = same_as(&ours_side, &floor_side);
    let pages_same = same_as(&pages_side, &floor_side);
    let queue = if opts.moto_endpoint.is_some() && opts.b28_on_moto {
        "SQS adapter on moto"
    } else {
        "in-process queue"
    };
    let row = Row::new(
        "b28",
        format!(
            "ours ÷ floor, {} tokens over {} users ({} bots); {queue}",
            sizes.tokens, sizes.users, sizes.bots
        ),
        format!(
            "ours {} ({}, {} handler runs, {} queue calls); floor {} ({}, {} queue calls); \
             {} messages; {}",
            secs(ours_side.time),
            per_token(&ours_side, sizes.tokens),
            ours_side.invocations,
            ours_side.calls,
            secs(floor_side.time),
            per_token(&floor_side, sizes.tokens),
            floor_side.calls,
            ours_side.messages,
            if same {
                "same rows and messages afterwards"
            } else {
                "ROWS OR MESSAGES DIFFER"
            }
        ),
        ratio(ours_side.time, floor_side.time),
        "×",
        Some(Target::le(1.5)),
    );
    let pages_row = Row::new(
        "b28-pages",
        format!(
            "ours ÷ the page-bounded floor (the floor's set-based work in ours' units: \
             a page of {BATCH_SIZE} tokens per transaction, read and claimed in one statement), \
             the same data set"
        ),
        format!(
            "page-bounded floor {} ({} pages, {:.2}× the floor); ours {}; {}",
            secs(pages_side.time),
            pages_side.invocations,
            ratio(pages_side.time, floor_side.time),
            secs(ours_side.time),
            if pages_same {
                "same rows and messages afterwards"
            } else {
                "ROWS OR MESSAGES DIFFER"
            }
        ),
        ratio(ours_side.time, pages_side.time),
        "×",
        None,
    );
    if !pages_same {
        return Err(Error::Invariant(format!(
            "b28: the page-bounded floor and the floor differ: {} / {} messages; rows {} vs {}",
            pages_side.messages, floor_side.messages, pages_side.checksum, floor_side.checksum
        )));
    }
    if !same {
        return Err(Error::Invariant(format!(
            "b28: ours and the floor differ: {} / {} messages ({:x} / {:x}); rows {} vs {}",
            ours_side.messages,
            floor_side.messages,
            ours_side.keys,
            floor_side.keys,
            ours_side.checksum,
            floor_side.checksum
        )));
    }
    Ok(vec![row, pages_row])
}
