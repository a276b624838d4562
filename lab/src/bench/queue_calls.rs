//! The `queue-calls` bench: SQS and Scheduler API calls per 1,000 enqueued messages,
//! counted by [`SqsQueue::api_calls`] against moto.
//!
//! Owns: the moto queues and schedule group of one run, and the producers measured:
//! the adapter alone (one `send` of every message), B38 (a page of expired project-bot
//! memberships: one `delete-user.run` per bot) and B70 (a page of eligible placeholder
//! details: one `delete-placeholder-user.run` per detail, delayed `i × 1 s`, so the
//! children past 900 s are one-time schedules, one call each by the API's design).
//! Each producer runs its real handler through `shared::runtime::process_record_with`.

use std::collections::HashMap;
use std::sync::Arc;

use aws_config::{BehaviorVersion, Region};
use chrono::Utc;

use super::{data, BenchDbs, Options, Row, Scale, Target};
use engine::local::process_record;
use shared::clock::FixedClock;
use shared::config::Settings;
use shared::config::{QueueTarget, SchedulerTarget};
use shared::error::{Error, Result};
use shared::function::Function;
use shared::handlers::Dispatch;
use shared::messages::Envelope;
use shared::queue::sqs::SqsQueue;
use shared::queue::{OutMessage, Queue};
use shared::runtime::{Invocation, RecordMeta};
use shared::workers::delete_user::DeleteUserRun;

/// The moto resources of one run (also the `b28` bench's queues).
pub(crate) struct Moto {
    sqs: aws_sdk_sqs::Client,
    scheduler: aws_sdk_scheduler::Client,
    routes: HashMap<Function, QueueTarget>,
    group: String,
}

impl Moto {
    pub(crate) async fn new(endpoint: &str) -> Result<Moto> {
        let cfg = aws_config::defaults(BehaviorVersion::latest())
            .http_client(shared::aws::https_client(true))
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "testing", "testing", None, None, "moto",
            ))
            .load()
            .await;
        let sqs = aws_sdk_sqs::Client::new(&cfg);
        let scheduler = aws_sdk_scheduler::Client::new(&cfg);
        let tag = format!("hkbench-{}-{}", std::process::id(), Utc::now().timestamp());
        let mut routes = HashMap::new();
        for f in Function::ALL {
            let url = sqs
                .create_queue()
                .queue_name(format!("{tag}-{}", f.name()))
                .send()
                .await
                .map_err(|e| Error::Config(format!("moto CreateQueue failed: {e}")))?
                .queue_url
                .unwrap_or_default();
            routes.insert(
                *f,
                QueueTarget {
                    url,
                    arn: Some(format!(
                        "arn:aws:sqs:us-east-1:123456789012:{tag}-{}",
                        f.name()
                    )),
                    dlq_arn: None,
                },
            );
        }
        scheduler
            .create_schedule_group()
            .name(&tag)
            .send()
            .await
            .map_err(|e| Error::Config(format!("moto CreateScheduleGroup failed: {e}")))?;
        Ok(Moto {
            sqs,
            scheduler,
            routes,
            group: tag,
        })
    }

    pub(crate) fn queue(&self) -> SqsQueue {
        SqsQueue::new(
            self.sqs.clone(),
            self.scheduler.clone(),
            self.routes.clone(),
            Some(SchedulerTarget {
                group_name: self.group.clone(),
                role_arn: "arn:aws:iam::123456789012:role/hk-scheduler".into(),
            }),
            Arc::new(FixedClock(Utc::now())),
        )
    }

    pub(crate) async fn cleanup(&self) {
        for t in self.routes.values() {
            let _ = self.sqs.delete_queue().queue_url(&t.url).send().await;
        }
        let _ = self
            .scheduler
            .delete_schedule_group()
            .name(&self.group)
            .send()
            .await;
    }
}

/// Run one handler once on `body` with the SQS adapter; returns the messages it sent
/// and the API calls they took.
async fn produce(
    queue: &SqsQueue,
    client: &mut tokio_postgres::Client,
    function: Function,
    opts: &Options,
) -> Result<u64> {
    let settings = Settings::default();
    let inv = Invocation::new(function, opts.now, queue, &settings);
    let body = Envelope::cron(function, "bench", opts.now).to_body();
    let meta = RecordMeta {
        sqs_message_id: Some("bench".into()),
        receive_count: 1,
        aws_request_id: None,
    };
    let before = queue.api_calls();
    let outcome = process_record(&Dispatch::new(), &inv, client, &body, &meta).await;
    match outcome.error() {
        None => Ok(queue.api_calls() - before),
        Some(error) => Err(Error::Invariant(format!(
            "queue-calls: {function} failed: {error}"
        ))),
    }
}

fn per_1000(calls: u64, messages: u64) -> f64 {
    calls as f64 * 1000.0 / messages.max(1) as f64
}

/// `queue-calls`: one row per producer.
pub async fn run(scale: &Scale, opts: &Options, dbs: &mut BenchDbs) -> Result<Vec<Row>> {
    let Some(endpoint) = opts.moto_endpoint.as_deref() else {
        return Ok(vec![Row::new(
            "queue-calls",
            "skipped: no moto endpoint (set MOTO_ENDPOINT or --moto)",
            "",
            f64::NAN,
            "calls/1000",
            None,
        )]);
    };
    let n = scale.queue_messages;
    let moto = Moto::new(endpoint).await?;
    let result = producers(&moto, n, opts, dbs).await;
    moto.cleanup().await;
    result
}

async fn producers(moto: &Moto, n: u64, opts: &Options, dbs: &mut BenchDbs) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // The adapter alone: one send of n messages (delay 30 s).
    let queue = moto.queue();
    let msgs: Vec<OutMessage> = (0..n)
        .map(|i| {
            OutMessage::to(
                format!("delete-user:{i}"),
                "bench",
                opts.now,
                &DeleteUserRun {
                    user_id: i as i64,
                    initiator_user_id: None,
                    reason: Some("bench".into()),
                },
            )
        })
        .collect();
    queue.send(&msgs).await?;
    rows.push(Row::new(
        "queue-calls",
        format!("adapter: one send of {n} messages"),
        format!("{} calls for {n} messages", queue.api_calls()),
        per_1000(queue.api_calls(), n),
        "calls/1000",
        Some(Target::le(100.0)),
    ));
    // B38: a page of expired project-bot memberships.
    {
        let c = dbs.create("qc_b38").await?;
        data::b38_bots(&c, opts.today(), n).await?;
    }
    let mut c = dbs.handler_connector("qc_b38")?.connect("hk-bench").await?;
    let queue = moto.queue();
    let calls = produce(&queue, &mut c, Function::RemoveExpiredMembers, opts).await?;
    rows.push(Row::new(
        "queue-calls",
        format!("B38: {n} expired project-bot memberships, one delete-user.run each"),
        format!("{calls} calls for {n} messages"),
        per_1000(calls, n),
        "calls/1000",
        Some(Target::le(100.0)),
    ));
    drop(c);
    dbs.drop_db("qc_b38").await?;
    // B70: a page of eligible placeholder details (delays i × 1 s; past 900 s a
    // one-time schedule per message).
    {
        let c = dbs.create("qc_b70").await?;
        c.batch_execute(&format!(
            "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
               SELECT g, 'ph' || g, 'ph' || g || '@example.com', 'active', 15
              , 100000, 1 FROM generate_series(1, {n}) g;
             INSERT INTO import_placeholder_user_details
               (id, placeholder_user_id, organization_id, created_at, updated_at)
               SELECT g, g, 1, '2024-01-01', '2024-01-01' FROM generate_series(1, {n}) g;"
        ))
        .await?;
    }
    let mut c = dbs.handler_connector("qc_b70")?.connect("hk-bench").await?;
    let queue = moto.queue();
    let calls = produce(&queue, &mut c, Function::PlaceholderUserCleanup, opts).await?;
    let scheduled = n.saturating_sub(901);
    rows.push(Row::new(
        "queue-calls",
        format!(
            "B70 (no target: b70 fixes delays of i × 1 s, so {scheduled} of {n} children need one CreateSchedule each)"
        ),
        format!("{calls} calls for {n} messages"),
        per_1000(calls, n),
        "calls/1000",
        None,
    ));
    drop(c);
    dbs.drop_db("qc_b70").await?;
    Ok(rows)
}
