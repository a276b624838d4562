//! What each function writes, checked without a database: every `done` line's fields,
//! status and metrics (through `runtime::Report`), and B28's web-hook body and bot
//! notices.

use std::time::Duration;

use chrono::NaiveDate;
use serde_json::json;
use shared::batches::adjourned_group_deletion::AdjournedGroupDeletionDone;
use shared::batches::adjourned_group_deletion::GroupCursor;
use shared::batches::pat_expiring::{
    bot_notices, hook_body, ClaimedToken, Interval, PatExpiringDone, Resource,
};
use shared::batches::placeholder_user_cleanup::PlaceholderUserCleanupDone;
use shared::batches::remove_expired_members::ExpiredMembersDone;
use shared::batches::remove_expired_members::MemberCursor;
use shared::messages::{Envelope, FULL_PATH_MAX_CHARS, NAME_MAX_CHARS};
use shared::metrics;
use shared::notify::Instance;
use shared::queue::OutMessage;
use shared::runtime::{Report, Status};
use shared::workers::delete_placeholder_user::DeletePlaceholderUserDone;
use shared::workers::deliver_notification::Delivered;
use shared::workers::group_destroy::GroupDestroyRun;
use shared::workers::group_destroy::{Deleted, GroupDestroyDone, GroupDestroyLocked};
use shared::Function;

#[test]
fn remove_expired_members_done_line_carries_the_counters_and_the_cursor() {
    let done = ExpiredMembersDone {
        updated_rows: 2,
        skipped_rows: 1,
        failed_rows: 0,
        next_cursor: None,
        longest_group: (Duration::ZERO, 0),
    };
    assert_eq!(
        Report::new(done.clone()).to_json(),
        json!({"status": "completed", "updated_rows": 2, "skipped_rows": 1,
               "failed_rows": 0, "next_cursor": null})
    );
    let cursor = MemberCursor {
        expires_at: NaiveDate::from_ymd_opt(2025, 3, 1).unwrap(),
        id: 9,
    };
    let r = Report::with_status(
        ExpiredMembersDone {
            next_cursor: Some(cursor),
            ..done
        },
        Status::LimitReached,
    );
    assert_eq!(
        r.done_fields("RemoveExpiredMembersWorker")["extra.remove_expired_members_worker.result"]
            ["status"],
        "limit_reached"
    );
    assert_eq!(
        r.to_json()["next_cursor"],
        json!({"expires_at": "2025-03-01", "id": 9})
    );
    assert_eq!(
        metrics::named(&r.metrics()),
        vec![
            ("processed", 2.0),
            ("skipped", 1.0),
            ("failed", 0.0),
            ("items", 3.0),
            ("updated_rows", 2.0),
            ("skipped_rows", 1.0),
            ("failed_rows", 0.0)
        ]
    );
}

#[test]
fn pat_expiring_hook_body_is_gitlabs_format() {
    let (instance, token, project) = t20("acme/web/site".into());
    assert_eq!(
        hook_body(&project, &token, &instance),
        crate::pat_expiring::t20_body()
    );
}

#[test]
fn adjourned_group_deletion_done_line_keeps_its_fields() {
    let mut done = AdjournedGroupDeletionDone {
        groups_due: 3,
        destroy_enqueued: 1,
        restored: 1,
        skipped_groups: 1,
        failed_groups: 0,
        cutoff: "2025-03-03".parse().unwrap(),
        next_cursor: None,
    };
    assert_eq!(
        Report::new(done.clone()).to_json(),
        json!({"status": "completed", "groups_due": 3, "destroy_enqueued": 1,
               "restored": 1, "skipped_groups": 1, "failed_groups": 0,
               "cutoff": "2025-03-03", "next_cursor": null})
    );
    done.next_cursor = Some(GroupCursor {
        group_id: 7,
        index: 2,
    });
    let r = Report::with_status(done, Status::LimitReached);
    assert_eq!(
        r.to_json()["next_cursor"],
        json!({"group_id": 7, "index": 2})
    );
    assert_eq!(
        metrics::named(&r.metrics()),
        vec![
            ("groups_due", 3.0),
            ("destroy_enqueued", 1.0),
            ("restored", 1.0),
            ("skipped_groups", 1.0),
            ("failed", 0.0),
            ("items", 3.0)
        ]
    );
}

#[test]
fn placeholder_user_cleanup_done_line_keeps_its_fields() {
    let done = PlaceholderUserCleanupDone {
        enqueued_count: 4,
        max_attempts_reached_count: 1,
        stale_count: 2,
        failed_count: 3,
    };
    let r = Report::with_status(done, Status::LimitReached);
    assert_eq!(
        r.to_json(),
        json!({"status": "limit_reached", "enqueued_count": 4,
               "max_attempts_reached_count": 1, "stale_count": 2, "failed_count": 3})
    );
    assert_eq!(
        metrics::named(&r.metrics()),
        vec![
            ("processed", 4.0),
            ("skipped", 2.0),
            ("failed", 3.0),
            ("items", 9.0),
            ("max_attempts_reached", 1.0)
        ]
    );
}

#[test]
fn deliver_notification_done_line_keeps_its_fields_and_status() {
    use shared::workers::deliver_notification::Outcome;
    let email = Report::new(Delivered::Email {
        user_id: 10,
        template: "access_token_about_to_expire",
        outcome: Outcome::RecipientCannotReceive,
    });
    assert_eq!(
        email.to_json(),
        json!({"status": "stale", "kind": "email", "user_id": 10,
               "template": "access_token_about_to_expire",
               "outcome": "recipient_cannot_receive"})
    );
    let hook = |outcome| {
        Report::new(Delivered::Webhook {
            hook_id: 3,
            outcome,
            temporary: false,
        })
    };
    assert_eq!(
        hook(Outcome::InvalidUrl).to_json(),
        json!({"status": "completed", "kind": "webhook", "hook_id": 3,
               "outcome": "invalid_url"})
    );
    assert_eq!(hook(Outcome::Disabled).status(), Status::Skipped);
    assert_eq!(hook(Outcome::NotSubscribed).status(), Status::Stale);
    assert_eq!(hook(Outcome::DryRun).to_json()["outcome"], "dry_run");
    for o in [
        Outcome::RecipientCannotReceive,
        Outcome::NotSubscribed,
        Outcome::Disabled,
        Outcome::DryRun,
        Outcome::Delivered,
        Outcome::Rejected,
        Outcome::Refused,
        Outcome::InvalidUrl,
        Outcome::Failed,
        Outcome::Deferred,
    ] {
        assert_eq!(serde_json::to_value(o).unwrap(), o.name());
    }
    assert!(hook(Outcome::Failed).counts().is_empty());
    let counted = |r: Report| {
        r.metrics()
            .into_iter()
            .filter(|(_, v)| *v == 1.0)
            .map(|(m, _)| m.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        counted(hook(Outcome::Failed)),
        ["webhooks_failed_permanent"]
    );
    assert_eq!(counted(hook(Outcome::Refused)), ["webhooks_refused"]);
    let temporary = Report::new(Delivered::Webhook {
        hook_id: 3,
        outcome: Outcome::Failed,
        temporary: true,
    });
    assert_eq!(counted(temporary), ["webhooks_failed_temporary"]);
    let mail = |outcome| {
        Report::new(Delivered::Email {
            user_id: 10,
            template: "t",
            outcome,
        })
    };
    assert_eq!(counted(mail(Outcome::Deferred)), ["mails_failed_temporary"]);
    assert_eq!(mail(Outcome::Deferred).status(), Status::Failed);
    assert_eq!(counted(mail(Outcome::Delivered)), ["mails_sent"]);
    assert_eq!(counted(mail(Outcome::Rejected)), ["mails_failed_permanent"]);
}

/// The `group-destroy.run` message the done lines below report on.
fn destroy_run() -> GroupDestroyRun {
    GroupDestroyRun {
        group_id: 100,
        user_id: 11,
        marked_for_deletion_on: "2025-03-03".parse().unwrap(),
    }
}

#[test]
fn group_destroy_done_line_keeps_its_fields_and_status() {
    use shared::workers::group_destroy::Outcome;
    let n = Deleted {
        projects: 2,
        groups: 1,
        contributions: 7,
        blocking_rows: 0,
        storage_sent: 0,
        storage_left: 0,
    };
    for (outcome, status, name, metrics) in [
        (Outcome::GroupNotFound, "stale", "group_not_found", false),
        (Outcome::NotScheduled, "stale", "not_scheduled", false),
        (Outcome::UserChanged, "stale", "user_changed", false),
        (Outcome::NotDue, "stale", "not_due", false),
        (Outcome::UserNotFound, "stale", "user_not_found", false),
        (Outcome::UserNotActive, "failed", "user_not_active", false),
        (Outcome::Restored, "restored", "restored", false),
        (Outcome::Continuing, "limit_reached", "continuing", true),
        (
            Outcome::WaitingForRegistry,
            "limit_reached",
            "waiting_for_registry",
            true,
        ),
        (Outcome::Unscheduled, "stale", "not_scheduled", true),
        (Outcome::Blocked, "blocked", "blocked", true),
        (Outcome::Destroyed, "completed", "destroyed", true),
    ] {
        let r = Report::new(GroupDestroyDone::new(&destroy_run(), outcome, n));
        assert_eq!(
            r.to_json(),
            json!({"status": status, "group_id": 100, "user_id": 11, "outcome": name,
                   "projects_deleted": 2, "groups_deleted": 1, "contributions_deleted": 7})
        );
        let blocked = if outcome == Outcome::Blocked {
            1.0
        } else {
            0.0
        };
        let mut expected = vec![("groups_blocked", blocked), ("blocking_rows", 0.0)];
        if metrics {
            expected.extend([
                ("projects_deleted", 2.0),
                ("groups_deleted", 1.0),
                ("storage_items_sent", 0.0),
                ("storage_items_left", 0.0),
            ]);
        }
        assert_eq!(metrics::named(&r.metrics()), expected, "{name}");
    }
    assert_eq!(
        Report::new(GroupDestroyLocked::new(100)).to_json(),
        json!({"status": "skipped", "group_id": 100, "outcome": "locked"})
    );
}

#[test]
fn pat_expiring_done_line_keeps_its_fields_and_declares_its_metrics() {
    let done = PatExpiringDone {
        bot_tokens_marked: 1,
        bots_without_membership: 2,
        bot_failures: 3,
        user_tokens_marked: 4,
        user_emails_enqueued: 5,
        user_emails_suppressed: 6,
        user_failures: 7,
        bots_notified: 8,
    };
    let report = Report::with_status(done.clone(), Status::LimitReached);
    assert_eq!(
        report.to_json(),
        json!({
            "status": "limit_reached",
            "total_notification_delivered_for_resource_access_tokens": 1,
            "total_resource_bot_without_membership": 2,
            "total_failed_notifications_for_resource_bots": 3,
            "total_user_tokens_marked": 4,
            "total_user_emails_enqueued": 5,
            "total_user_emails_suppressed": 6,
            "total_user_failures": 7,
        })
    );
    assert_eq!(
        metrics::named(&report.metrics()),
        vec![
            ("user_tokens_marked", 4.0),
            ("bot_tokens_marked", 1.0),
            ("failed", 10.0),
            ("items", 31.0)
        ]
    );
    assert_eq!(report.counts().iter().map(|c| c.1).sum::<u64>(), 28);
    assert_eq!(
        report.done_fields("PersonalAccessTokens::ExpiringWorker")
            ["extra.personal_access_tokens_expiring_worker.total_user_failures"],
        7
    );
}

/// Bot U20's token T20 (expiring 2025-03-16) of project P200 "site" at `full_path`, on
/// the instance https://gitlab.example.com.
fn t20(full_path: String) -> (Instance, ClaimedToken, Resource) {
    let instance = Instance::new("https://gitlab.example.com", None, "18.0.0").unwrap();
    let token = ClaimedToken {
        id: 20,
        name: "T20".into(),
        created_at: "2025-01-02T09:00:00".parse().unwrap(),
        expires_at: "2025-03-16".parse().unwrap(),
        last_used_at: None,
        user_id: 20,
    };
    let project = Resource::Project {
        id: 200,
        name: "site".into(),
        description: None,
        visibility_level: 0,
        ci_config_path: None,
        namespace_name: "web".into(),
        full_path,
    };
    (instance, token, project)
}

/// The notices of bot U20's token T20 (7 days) for project P200 "site" at `full_path`,
/// with one hook and two owners.
fn notices_for_path(full_path: String) -> Vec<OutMessage> {
    let (instance, token, project) = t20(full_path);
    let now = "2025-03-10T01:00:00Z".parse().unwrap();
    let ctx = (project, vec![1], vec![11, 12]);
    bot_notices(Interval::SevenDays, 20, &token, &ctx, &instance, "r", now)
}

/// The receiver's limit is the sender's: every notice built for GitLab's longest
/// full path (20 ancestors and the project, 255 characters each) decodes at
/// `deliver-notification`, and one character more is refused there.
#[test]
fn pat_expiring_every_notice_for_gitlabs_longest_path_decodes_at_the_receiver() {
    let segment = "p".repeat(NAME_MAX_CHARS);
    let longest = vec![segment.as_str(); 21].join("/");
    assert_eq!(longest.chars().count(), FULL_PATH_MAX_CHARS);
    let notices = notices_for_path(longest.clone());
    assert_eq!(notices.len(), 3, "one web hook and two owner mails");
    for m in &notices {
        let body = m.envelope.to_body();
        if let Err(e) = Envelope::decode(&body, Function::DeliverNotification) {
            panic!("{}: {}", m.envelope.kind, e.error);
        }
    }
    let too_long = notices_for_path(format!("{longest}x"));
    let mail = too_long
        .iter()
        .find(|m| m.envelope.kind == "deliver-notification.email")
        .unwrap();
    let err =
        Envelope::decode(&mail.envelope.to_body(), Function::DeliverNotification).unwrap_err();
    assert!(err.error.contains("resource_full_path"), "{}", err.error);
}

#[test]
fn delete_placeholder_user_done_line_keeps_its_fields() {
    use shared::workers::delete_placeholder_user::Outcome;
    for (outcome, status, name) in [
        (Outcome::NotFound, "stale", "not_found"),
        (Outcome::NotPlaceholder, "stale", "not_placeholder"),
        (Outcome::Referenced, "completed", "referenced"),
        (Outcome::Scheduled, "completed", "scheduled"),
        (Outcome::Refused, "refused", "refused"),
    ] {
        let r = Report::new(DeletePlaceholderUserDone {
            outcome,
            placeholder_user_id: 53,
        });
        assert_eq!(
            r.to_json(),
            json!({"status": status, "outcome": name, "placeholder_user_id": 53})
        );
    }
}
