//! The SQS + EventBridge Scheduler adapter against a moto server on 127.0.0.1:
//! batching in tens, per-entry failure checks and retries, delays, the > 900 s
//! schedule path, and reading the database secret from Secrets Manager.

use std::collections::HashMap;
use std::sync::Arc;

use aws_sdk_scheduler::types::ActionAfterCompletion;
use integration_tests::aws::{
    config_for, create_queue, moto_config, moto_endpoint, proxy::FaultProxy,
};
use integration_tests::{t, wait};
use shared::clock::FixedClock;
use shared::config::{QueueTarget, SchedulerTarget};
use shared::messages::Envelope;
use shared::queue::sqs::{at_expression, SqsQueue};
use shared::queue::{schedule_name, schedule_token, OutMessage, Queue};
use shared::workers::delete_user::DeleteUserRun;
use shared::Function;

fn msg(key: &str, delay: u32) -> OutMessage {
    OutMessage::new(
        Function::DeleteUser,
        delay,
        Envelope::new(
            "delete-user.run",
            key.to_string(),
            "run-1",
            t("2025-03-10T02:00:00Z"),
            DeleteUserRun {
                user_id: 1,
                initiator_user_id: None,
                reason: None,
            },
        ),
    )
}

struct Setup {
    queue: SqsQueue,
    sqs: aws_sdk_sqs::Client,
    scheduler: aws_sdk_scheduler::Client,
    url: String,
    arn: String,
    dlq_arn: String,
    group: String,
}

async fn setup(endpoint: Option<&str>) -> Setup {
    let moto = moto_config().await;
    let sqs = aws_sdk_sqs::Client::new(&moto);
    let scheduler = aws_sdk_scheduler::Client::new(&moto);
    let (url, arn) = create_queue(&sqs, "delete-user").await;
    let (_, dlq_arn) = create_queue(&sqs, "delete-user-dlq").await;
    let group = format!("hk-{}", uuid::Uuid::new_v4().simple());
    scheduler
        .create_schedule_group()
        .name(&group)
        .send()
        .await
        .expect("schedule group");
    let cfg = match endpoint {
        Some(e) => config_for(e).await,
        None => moto.clone(),
    };
    let routes = HashMap::from([(
        Function::DeleteUser,
        QueueTarget {
            url: url.clone(),
            arn: Some(arn.clone()),
            dlq_arn: Some(dlq_arn.clone()),
        },
    )]);
    let queue = SqsQueue::new(
        aws_sdk_sqs::Client::new(&cfg),
        aws_sdk_scheduler::Client::new(&cfg),
        routes,
        Some(SchedulerTarget {
            group_name: group.clone(),
            role_arn: "arn:aws:iam::123456789012:role/hk-scheduler".into(),
        }),
        Arc::new(FixedClock(t("2025-03-10T02:00:00Z"))),
    );
    Setup {
        queue,
        sqs,
        scheduler,
        url,
        arn,
        dlq_arn,
        group,
    }
}

async fn receive_all(
    sqs: &aws_sdk_sqs::Client,
    url: &str,
    expect: usize,
) -> Vec<aws_sdk_sqs::types::Message> {
    let got = std::cell::RefCell::new(Vec::new());
    wait::until(
        &format!("{expect} messages on {url}"),
        wait::SQS_DELIVERY,
        || async {
            let out = sqs
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .wait_time_seconds(1)
                .send()
                .await
                .unwrap();
            let mut got = got.borrow_mut();
            got.extend(out.messages.unwrap_or_default());
            (got.len() >= expect).then_some(())
        },
    )
    .await;
    got.into_inner()
}

#[tokio::test]
async fn messages_are_sent_in_batches_of_ten_with_type_and_key_attributes() {
    let s = setup(None).await;
    let msgs: Vec<_> = (0..23)
        .map(|i| msg(&format!("delete-user:{i}"), 0))
        .collect();
    s.queue.send(&msgs).await.unwrap();
    assert_eq!(
        s.queue.api_calls(),
        3,
        "23 messages = 3 SendMessageBatch calls"
    );
    let got = receive_all(&s.sqs, &s.url, 23).await;
    assert_eq!(got.len(), 23);
    let mut keys: Vec<String> = got
        .iter()
        .map(|m| {
            let attrs = m.message_attributes.as_ref().unwrap();
            assert_eq!(
                attrs["type"].string_value.as_deref(),
                Some("delete-user.run")
            );
            let body: Envelope = serde_json::from_str(m.body.as_deref().unwrap()).unwrap();
            assert_eq!(
                attrs["message_key"].string_value.as_deref(),
                Some(body.message_key.as_str())
            );
            body.message_key
        })
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 23);
}

#[tokio::test]
async fn a_delayed_message_stays_invisible_until_its_delay_has_passed() {
    let s = setup(None).await;
    s.queue
        .send(&[msg("delete-user:delayed", 2)])
        .await
        .unwrap();
    let now = s
        .sqs
        .receive_message()
        .queue_url(&s.url)
        .send()
        .await
        .unwrap();
    assert!(
        now.messages.unwrap_or_default().is_empty(),
        "visible before its delay"
    );
    // Visible once the delay has passed (moto applies it in wall time).
    assert_eq!(receive_all(&s.sqs, &s.url, 1).await.len(), 1);
}

#[tokio::test]
async fn a_failed_batch_entry_is_retried_and_delivered_exactly_once() {
    let proxy = FaultProxy::start(&moto_endpoint()).await;
    let s = setup(Some(&proxy.endpoint)).await;
    proxy.fail_batch_entries(1);
    let msgs: Vec<_> = (0..5)
        .map(|i| msg(&format!("delete-user:e{i}"), 0))
        .collect();
    s.queue.send(&msgs).await.unwrap();
    assert_eq!(
        proxy.calls("SendMessageBatch"),
        2,
        "one retry for the failed entry"
    );
    let got = receive_all(&s.sqs, &s.url, 5).await;
    assert_eq!(got.len(), 5);
}

#[tokio::test]
async fn a_batch_entry_that_keeps_failing_fails_the_send() {
    let proxy = FaultProxy::start(&moto_endpoint()).await;
    let s = setup(Some(&proxy.endpoint)).await;
    proxy.fail_batch_entries(10);
    let err = s.queue.send(&[msg("delete-user:x", 0)]).await.unwrap_err();
    assert!(err.to_string().contains("entries failed"), "{err}");
    assert_eq!(
        proxy.calls("SendMessageBatch"),
        4,
        "the first try and three retries"
    );
}

#[tokio::test]
async fn a_delay_over_900_seconds_creates_a_one_time_schedule() {
    let s = setup(None).await;
    let m = msg("group-destroy:100:2025-03-03:11", 920);
    s.queue.send(std::slice::from_ref(&m)).await.unwrap();
    let name = schedule_name(&m.envelope.message_key);
    let got = s
        .scheduler
        .get_schedule()
        .name(&name)
        .group_name(&s.group)
        .send()
        .await
        .expect("schedule exists");
    assert_eq!(got.schedule_expression(), Some("at(2025-03-10T02:15:20)"));
    assert_eq!(got.schedule_expression_timezone(), Some("UTC"));
    assert_eq!(
        got.action_after_completion(),
        Some(&ActionAfterCompletion::Delete)
    );
    let target = got.target().unwrap();
    assert_eq!(target.arn(), s.arn);
    assert_eq!(
        target.role_arn(),
        "arn:aws:iam::123456789012:role/hk-scheduler"
    );
    assert_eq!(target.input(), Some(m.envelope.to_body().as_str()));
    assert_eq!(
        target.dead_letter_config().and_then(|d| d.arn()),
        Some(s.dlq_arn.as_str())
    );
    let rp = target.retry_policy().unwrap();
    assert_eq!(
        (
            rp.maximum_retry_attempts(),
            rp.maximum_event_age_in_seconds()
        ),
        (Some(10), Some(86_400))
    );
    // Nothing went to SQS directly.
    let direct = s
        .sqs
        .receive_message()
        .queue_url(&s.url)
        .send()
        .await
        .unwrap();
    assert!(direct.messages.unwrap_or_default().is_empty());
    // Sending the same message again is a ConflictException, which counts as success.
    s.queue.send(std::slice::from_ref(&m)).await.unwrap();
}

#[tokio::test]
async fn the_database_url_can_come_from_a_secrets_manager_secret() {
    let moto = moto_config().await;
    let sm = aws_sdk_secretsmanager::Client::new(&moto);
    let name = format!("hk-db-{}", uuid::Uuid::new_v4().simple());
    let arn = sm
        .create_secret()
        .name(&name)
        .secret_string(r#"{"username":"gitlab","password":"s3cr3t","host":"db.internal","port":5432,"dbname":"gitlabhq_production"}"#)
        .send()
        .await
        .unwrap()
        .arn
        .unwrap();
    let src = shared::config::DatabaseSource::SecretArn(arn);
    let pg = shared::aws::database_config(&src, Some(&moto))
        .await
        .unwrap();
    assert_eq!(pg.get_user(), Some("gitlab"));
    assert_eq!(pg.get_dbname(), Some("gitlabhq_production"));
    assert_eq!(pg.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
    let missing = shared::config::DatabaseSource::SecretArn(
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:nope".into(),
    );
    let err = shared::aws::database_config(&missing, Some(&moto))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("DATABASE_SECRET_ARN"), "{err}");
}

#[test]
fn schedule_names_are_stable_hashes_of_the_key() {
    let n = schedule_name("group-destroy:100:2025-03-03:11");
    assert_eq!(n.len(), 43);
    assert!(n.starts_with("hk-"));
    assert_eq!(n, schedule_name("group-destroy:100:2025-03-03:11"));
    assert_ne!(n, schedule_name("group-destroy:101:2025-03-03:11"));
    // sha256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a3...
    assert_eq!(
        schedule_token("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a3"
    );
}

#[test]
fn at_expression_rounds_up_to_the_second() {
    let t: chrono::DateTime<chrono::Utc> = "2025-03-10T02:00:00Z".parse().unwrap();
    assert_eq!(at_expression(t, 920), "at(2025-03-10T02:15:20)");
    let t: chrono::DateTime<chrono::Utc> = "2025-03-10T02:00:00.000001Z".parse().unwrap();
    assert_eq!(at_expression(t, 920), "at(2025-03-10T02:15:21)");
}
