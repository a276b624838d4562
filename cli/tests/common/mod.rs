//! What the `hk` integration tests share: `hk` run against one database, a run's output
//! as text, and on moto a queue's ARN and depth and the stack's schedule group.
//! Each test binary uses part of it; the demo data on a given day and a plan clock
//! after any snapshot (`hk run --read-only`).
#![allow(dead_code)]

use std::process::{Command, Output};

/// `hk` against the database at `url` only: no transport, database secret or CA bundle
/// from the caller's environment, logs at `warn`. The caller adds the arguments.
pub fn hk_on(url: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .env_remove("TRANSPORT")
        .env_remove("DATABASE_SECRET_ARN")
        .env_remove("DATABASE_CA_BUNDLE");
    c
}

/// A run's standard output, then its standard error.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The ARN of the queue at `url`.
pub async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    use aws_sdk_sqs::types::QueueAttributeName;
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone()
}

/// The stack's schedule group as the template names it (`<stack>-hk`), created.
pub async fn schedule_group(scheduler: &aws_sdk_scheduler::Client, stack: &str) -> String {
    let group = format!("{stack}-hk");
    scheduler
        .create_schedule_group()
        .name(&group)
        .send()
        .await
        .unwrap();
    group
}

/// (visible, in flight) of a queue.
pub async fn depth(sqs: &aws_sdk_sqs::Client, url: &str) -> (i64, i64) {
    use aws_sdk_sqs::types::QueueAttributeName;
    let a = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    let n = |k| a.get(&k).unwrap().parse::<i64>().unwrap();
    (
        n(QueueAttributeName::ApproximateNumberOfMessages),
        n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

/// The demo data set on `now`'s date.
pub async fn demo_on(now: &str) -> integration_tests::TestDb {
    let day = integration_tests::t(now).date_naive();
    integration_tests::TestDb::from_template(
        &format!("read_only_demo_{}", day.format("%Y_%m_%d")),
        |mut db| async move {
            lab::demo::seed(&mut db.client, day)
                .await
                .expect("the demo data loads");
            db
        },
    )
    .await
}

/// A plan clock after any snapshot these tests take (`hk run --read-only` refuses
/// a `--now` before its snapshot): 00:10 UTC tomorrow.
pub fn tomorrow() -> String {
    let d = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    format!("{d}T00:10:00Z")
}
