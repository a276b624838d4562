//! B28 `pat-expiring` (b28-pat-expiring.md §1–§9, ⚑ D19–D22, D26, D27).
//!
//! Owns: the three intervals and their token scope (dates computed here and bound),
//! the human and bot keyset pages of 100 by `(expires_at, id)` with the inclusive
//! advance of `:min`, the **claim-then-enqueue** transactions (`UPDATE … RETURNING`
//! claims every matching token of the subject, the messages are sent, then COMMIT: a
//! crash never loses a notice and a second run cannot claim a token twice), bot
//! resource lookup, hook and recipient selection, the web-hook body built at claim
//! time, the budget and deadline stops with their continuation, and the `done`
//! totals. It sends messages only; delivery is `deliver-notification`.
//!
//! Subjects are grouped per page as b28 §4 and common.md §7.2 allow: one transaction
//! per page, in which one statement claims the page's users (with their user rows
//! `FOR SHARE`), or finds the page's bots' resources and claims their tokens (one more
//! reads their hooks and recipients); the page's messages go out in `send` calls of
//! ten, then COMMIT. Per-subject isolation is kept: when the set-based claim fails, or
//! the deadline guard is near (so it can stop after one unit), each subject runs in a
//! SAVEPOINT of its own and a failing one rolls back alone; when a send fails, the page
//! rolls back and its subjects run again one transaction each, so only the subject
//! whose message cannot be sent fails (scenario 11 as written). Info lines and totals
//! are applied once the page has committed.
//!
//! Deadline guard per item (common.md §7.2 (c)): the page's set-based claim is one item
//! bounded by the page size, and the guard is checked before it; on the SAVEPOINT path
//! it is checked before each user or bot. Send-failure rule (§7.2 (b)): re-run the
//! page's subjects one transaction each, never a retryable end of the record
//! (docs/gitlab-differences.md).

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde_json::{json, Value};
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};

use crate::error::{Error, Result};
use crate::function::Function;
use crate::locks;
use crate::messages::{
    bot_email_key, user_email_key, webhook_event_key, webhook_key, EmailNotification, Envelope,
    PatExpiringRun, ResourceType, WebhookNotification,
};
use crate::notify::Instance;
use crate::queue::{OutMessage, SQS_BATCH};
use crate::retry_transient;
use crate::runtime::{Budget, Invocation, Report};

/// Tokens per page.
pub const BATCH_SIZE: i64 = 100;
/// The most token names in one human email.
pub const MAX_TOKENS: usize = 100;
/// Delay of the continuation when the budget or the deadline stops a run.
pub const REQUEUE_DELAY_S: u32 = 120;

const FUNCTION: Function = Function::PatExpiring;

/// `can_receive_notifications(u)` over an alias `u` of `users` (common.md §2.1, ⚑ D26).
pub(crate) const CAN_RECEIVE_NOTIFICATIONS: &str =
    "(u.state IS NOT DISTINCT FROM 'active' AND u.user_type IN (0, 4))";

/// A notification interval (b28 §2), processed in [`Interval::ALL`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// 0..7 days.
    SevenDays,
    /// 8..30 days.
    ThirtyDays,
    /// 31..60 days.
    SixtyDays,
}

impl Interval {
    /// The processing order.
    pub const ALL: [Interval; 3] = [
        Interval::SevenDays,
        Interval::ThirtyDays,
        Interval::SixtyDays,
    ];

    /// `seven_days`, `thirty_days` or `sixty_days` (logs and keys).
    pub fn name(self) -> &'static str {
        match self {
            Interval::SevenDays => "seven_days",
            Interval::ThirtyDays => "thirty_days",
            Interval::SixtyDays => "sixty_days",
        }
    }

    /// The inclusive range of days until expiry.
    pub fn range(self) -> (u64, u64) {
        match self {
            Interval::SevenDays => (0, 7),
            Interval::ThirtyDays => (8, 30),
            Interval::SixtyDays => (31, 60),
        }
    }

    /// `days_to_expire` of the emails: the top of the range.
    pub fn days_to_expire(self) -> u32 {
        self.range().1 as u32
    }

    /// The first and last expiry dates of the interval for `today`.
    pub fn bounds(self, today: NaiveDate) -> (NaiveDate, NaiveDate) {
        let (lo, hi) = self.range();
        (today + chrono::Days::new(lo), today + chrono::Days::new(hi))
    }

    fn column(self) -> &'static str {
        match self {
            Interval::SevenDays => "seven_days_notification_sent_at",
            Interval::ThirtyDays => "thirty_days_notification_sent_at",
            Interval::SixtyDays => "sixty_days_notification_sent_at",
        }
    }

    /// `scope(iv, :min)` over alias `t`, with `$1` = `:min` and `$2` = the last date.
    fn scope(self) -> String {
        format!(
            "t.revoked = false AND t.{} IS NULL AND t.expire_notification_delivered = false
             AND t.impersonation = false AND t.expires_at BETWEEN $1::date AND $2::date",
            self.column()
        )
    }

    /// The claim's SET list, with `$3` = `:now`. Seven days also sets the legacy flag.
    fn set_list(self) -> String {
        match self {
            Interval::SevenDays => format!(
                "{} = $3::timestamptz, expire_notification_delivered = true",
                self.column()
            ),
            _ => format!("{} = $3::timestamptz", self.column()),
        }
    }
}

/// A claimed token of a bot (the columns the hook body reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedToken {
    /// `id`.
    pub id: i64,
    /// `name`.
    pub name: String,
    /// `created_at` (UTC).
    pub created_at: NaiveDateTime,
    /// `expires_at`.
    pub expires_at: NaiveDate,
    /// `last_used_at`.
    pub last_used_at: Option<DateTime<Utc>>,
    /// `user_id` (the bot).
    pub user_id: i64,
}

/// A bot's resource with what its hook body and emails need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A project.
    Project {
        /// `projects.id`.
        id: i64,
        /// `projects.name`.
        name: String,
        /// `projects.description`.
        description: Option<String>,
        /// `projects.visibility_level`.
        visibility_level: i32,
        /// `projects.ci_config_path`.
        ci_config_path: Option<String>,
        /// The name of the project's namespace.
        namespace_name: String,
        /// The project's full path.
        full_path: String,
    },
    /// A group.
    Group {
        /// `namespaces.id`.
        id: i64,
        /// `namespaces.name`.
        name: String,
        /// `namespaces.path`.
        path: String,
        /// The group's full path.
        full_path: String,
        /// `traversal_ids` (for the hooks of the group and its ancestors).
        traversal_ids: Vec<i64>,
    },
}

impl Resource {
    fn kind(&self) -> ResourceType {
        match self {
            Resource::Project { .. } => ResourceType::Project,
            Resource::Group { .. } => ResourceType::Group,
        }
    }
    fn id(&self) -> i64 {
        match self {
            Resource::Project { id, .. } | Resource::Group { id, .. } => *id,
        }
    }
    fn name(&self) -> &str {
        match self {
            Resource::Project { name, .. } | Resource::Group { name, .. } => name,
        }
    }
    fn full_path(&self) -> &str {
        match self {
            Resource::Project { full_path, .. } | Resource::Group { full_path, .. } => full_path,
        }
    }
}

fn hook_time(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// GitLab's resource-access-token hook body for `token` of `resource` (b28 §10.3,
/// ⚑ D23: `avatar_url` and `default_branch` are null). Pure.
pub fn hook_body(resource: &Resource, token: &ClaimedToken, instance: &Instance) -> Value {
    let attrs = json!({
        "user_id": token.user_id,
        "created_at": hook_time(token.created_at),
        "id": token.id,
        "name": token.name,
        "expires_at": token.expires_at.to_string(),
        "last_used_at": token.last_used_at.map(|t| hook_time(t.naive_utc())),
    });
    match resource {
        Resource::Project {
            id,
            name,
            description,
            visibility_level,
            ci_config_path,
            namespace_name,
            full_path,
        } => {
            let web_url = format!("{}/{full_path}", instance.base_url);
            let http_url = format!("{web_url}.git");
            let ssh_url = format!("{}{full_path}.git", instance.ssh_url_prefix);
            json!({
                "object_kind": "access_token",
                "project": {
                    "id": id, "name": name, "description": description,
                    "web_url": web_url, "avatar_url": null,
                    "git_ssh_url": ssh_url, "git_http_url": http_url,
                    "namespace": namespace_name, "visibility_level": visibility_level,
                    "path_with_namespace": full_path, "default_branch": null,
                    "ci_config_path": ci_config_path, "homepage": web_url,
                    "url": ssh_url, "ssh_url": ssh_url, "http_url": http_url,
                },
                "object_attributes": attrs,
                "event_name": "expiring_access_token",
            })
        }
        // GitLab's data builder (lib/gitlab/data_builder/resource_access_token.rb and
        // its spec) builds only `group`; payloads captured in gitlab-org/gitlab
        // MR 141907 / issue 465421 also show a top-level `group_id`, whose source was
        // not found. Not added (the spec's format) [CONFIRM].
        Resource::Group {
            id,
            name,
            path,
            full_path,
            ..
        } => json!({
            "object_kind": "access_token",
            "group": {
                "group_name": name, "group_path": path, "group_id": id, "full_path": full_path,
            },
            "object_attributes": attrs,
            "event_name": "expiring_access_token",
        }),
    }
}

/// The `done` counters.
#[derive(Debug, Default)]
struct Totals {
    bot_tokens_marked: u64,
    bots_without_membership: u64,
    bot_failures: u64,
    user_tokens_marked: u64,
    user_emails_enqueued: u64,
    user_emails_suppressed: u64,
    user_failures: u64,
}

/// Whether a step ran to its end or the budget/deadline stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Done,
    Stop,
}

struct Run<'a, 'b> {
    inv: &'a Invocation<'b>,
    env: &'a Envelope,
    instance: &'a Instance,
    budget: Budget,
    /// Whether a unit of progress (a subject whose claim marked tokens) is complete.
    progress: bool,
    totals: Totals,
}

impl Run<'_, '_> {
    /// The budget check after a page or a step: only once a unit is complete.
    fn budget_stop(&self) -> bool {
        self.progress && self.budget.exhausted()
    }

    /// The deadline guard before a user or bot: only once a unit is complete.
    fn deadline_stop(&self) -> bool {
        self.progress && self.inv.deadline.reached()
    }

    fn email(&self, key: String, n: &EmailNotification) -> OutMessage {
        OutMessage::new(
            Function::DeliverNotification,
            0,
            Envelope::new(
                "deliver-notification.email",
                key,
                &self.env.run_id,
                self.inv.now,
                n,
            ),
        )
    }
}

fn distinct_in_order(ids: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut seen = std::collections::HashSet::new();
    ids.filter(|id| seen.insert(*id)).collect()
}

/// A human's claimed tokens: how many, and the email when the user can receive one.
struct UserClaim {
    user_id: i64,
    marked: u64,
    email: Option<OutMessage>,
}

impl UserClaim {
    /// Log the claim's line (§9): the email, or its suppression.
    fn log(&self, iv: Interval) {
        if self.email.is_some() {
            tracing::info!(
                user_id = self.user_id,
                interval = iv.name(),
                token_count = self.marked,
                "Notifying User about expiring tokens"
            );
        } else {
            tracing::info!(
                user_id = self.user_id,
                interval = iv.name(),
                "Expiring token notification suppressed: user cannot receive notifications"
            );
        }
    }

    fn count(&self, run: &mut Run<'_, '_>) {
        run.progress = true;
        run.totals.user_tokens_marked += self.marked;
        if self.email.is_some() {
            run.totals.user_emails_enqueued += 1;
        } else {
            run.totals.user_emails_suppressed += 1;
        }
    }
}

/// The human email of `user_id` for its claimed `(expires_at, id, name)` rows, or
/// `None` when the user cannot receive notifications.
fn user_email(
    run: &Run<'_, '_>,
    iv: Interval,
    user_id: i64,
    mut claimed: Vec<(NaiveDate, i64, String)>,
    can_receive: bool,
) -> UserClaim {
    claimed.sort();
    let marked = claimed.len() as u64;
    let email = can_receive.then(|| {
        let n = EmailNotification::AccessTokenAboutToExpire {
            recipient_user_id: user_id,
            days_to_expire: iv.days_to_expire(),
            token_names: claimed
                .into_iter()
                .take(MAX_TOKENS)
                .map(|(_, _, name)| name)
                .collect(),
        };
        run.email(user_email_key(iv.name(), user_id, run.inv.today()), &n)
    });
    UserClaim {
        user_id,
        marked,
        email,
    }
}

/// §5 step 2's claim of one user and the read of its user row (`FOR SHARE`), inside
/// the caller's transaction or savepoint. `None`: another session claimed the tokens.
async fn claim_user_rows<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    user_id: i64,
) -> Result<Option<UserClaim>> {
    let (_, last) = iv.bounds(run.inv.today());
    let rows = c
        .query(
            &format!(
                "UPDATE personal_access_tokens t SET {}
                 WHERE t.user_id = $4::bigint AND {}
                 RETURNING t.id::bigint, t.name, t.expires_at",
                iv.set_list(),
                iv.scope()
            ),
            &[&min, &last, &run.inv.now, &user_id],
        )
        .await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let claimed: Vec<(NaiveDate, i64, String)> = rows
        .iter()
        .map(|r| (r.get(2), r.get(0), r.get(1)))
        .collect();
    let can_receive: bool = c
        .query_opt(
            &format!(
                "SELECT {CAN_RECEIVE_NOTIFICATIONS} FROM users u WHERE u.id = $1::bigint FOR SHARE"
            ),
            &[&user_id],
        )
        .await?
        .map(|r| r.get(0))
        .unwrap_or(false);
    Ok(Some(user_email(run, iv, user_id, claimed, can_receive)))
}

/// §5 step 2 for a whole page at once, set-based: one claim of every matching token
/// of `users`, then their user rows `FOR SHARE` (by id). The claims in the order of
/// `users`; users whose tokens were claimed elsewhere are absent.
async fn claim_users_set<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    users: &[i64],
) -> Result<Vec<UserClaim>> {
    let (_, last) = iv.bounds(run.inv.today());
    // One statement: the claim, then the claimed users' rows `FOR SHARE` (by id).
    let rows = c
        .query_typed(
            &format!(
                "WITH claimed AS (
                   UPDATE personal_access_tokens t SET {}
                   WHERE t.user_id = ANY($4::bigint[]) AND {}
                   RETURNING t.user_id::bigint AS user_id, t.id::bigint AS id, t.name,
                             t.expires_at),
                 readers AS (
                   SELECT u.id::bigint AS id, {CAN_RECEIVE_NOTIFICATIONS} AS can_receive
                   FROM users u WHERE u.id IN (SELECT user_id FROM claimed)
                   ORDER BY u.id FOR SHARE)
                 SELECT c.user_id, c.id, c.name, c.expires_at, COALESCE(r.can_receive, false)
                 FROM claimed c LEFT JOIN readers r ON r.id = c.user_id",
                iv.set_list(),
                iv.scope()
            ),
            &[
                (&min, Type::DATE),
                (&last, Type::DATE),
                (&run.inv.now, Type::TIMESTAMPTZ),
                (&users, Type::INT8_ARRAY),
            ],
        )
        .await?;
    // user → (can receive, claimed `(expires_at, id, name)`)
    type Claims = std::collections::HashMap<i64, (bool, Vec<(NaiveDate, i64, String)>)>;
    let mut by_user = Claims::new();
    for r in &rows {
        by_user
            .entry(r.get(0))
            .or_insert_with(|| (r.get(4), Vec::new()))
            .1
            .push((r.get(3), r.get(1), r.get(2)));
    }
    Ok(users
        .iter()
        .filter_map(|u| {
            by_user
                .remove(u)
                .map(|(can, claimed)| user_email(run, iv, *u, claimed, can))
        })
        .collect())
}

/// §5 step 2 for one user in its own transaction: claim, then enqueue, then COMMIT
/// (the fall-back when a page's group could not be sent).
async fn claim_user<C>(
    run: &Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    user_id: i64,
) -> Result<Option<UserClaim>>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let claim = claim_user_rows(run, &tx, iv, min, user_id).await?;
    if let Some(c) = &claim {
        c.log(iv);
        if let Some(msg) = &c.email {
            run.inv.queue.send(std::slice::from_ref(msg)).await?;
        }
    }
    tx.commit().await?;
    Ok(claim)
}

/// `work` in its own savepoint of the page's transaction: released when it succeeds,
/// rolled back when it fails. `Ok(Err(e))`: the subject failed and was rolled back to
/// its savepoint; `Err(e)`: the savepoint could not be rolled back, so the page's
/// transaction is unusable.
async fn in_savepoint<T>(
    tx: &mut Transaction<'_>,
    work: impl AsyncFnOnce(&Transaction<'_>) -> Result<T>,
) -> Result<Result<T>> {
    let sp = tx.transaction().await?;
    match work(&sp).await {
        Ok(v) => {
            sp.commit().await?;
            Ok(Ok(v))
        }
        Err(e) => {
            sp.rollback().await?;
            Ok(Err(e))
        }
    }
}

fn user_failed(
    run: &mut Run<'_, '_>,
    failed_users: &mut Vec<i64>,
    iv: Interval,
    user_id: i64,
    e: &Error,
) {
    failed_users.push(user_id);
    run.totals.user_failures += 1;
    tracing::error!(
        user_id,
        interval = iv.name(),
        error = %e,
        error_class = e.class(),
        "Failed to send notification about expiring personal access tokens"
    );
}

/// How a page's group ended.
enum GroupEnd {
    /// Sent and committed; whether the deadline guard stopped the page.
    Committed(Flow),
    /// A send failed and the group rolled back: these subjects run again one by one.
    Unsent(Vec<i64>),
}

/// One page of humans, grouped as common.md §7.2 allows: one transaction; the page's
/// users claimed set-based in one statement (or, when that fails or the deadline guard
/// is near, one savepoint per user, so one user's failure never touches another); the
/// page's emails sent in calls of ten before COMMIT. When a send fails, the page's
/// transaction rolls back and its users run again one transaction each (the outcome
/// of §5 without grouping: only the user whose email cannot be sent fails).
async fn human_page<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    users: &[i64],
    failed_users: &mut Vec<i64>,
) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    if run.deadline_stop() {
        return Ok(Flow::Stop);
    }
    let attempted = match human_group(run, client, iv, min, users, failed_users).await? {
        GroupEnd::Committed(flow) => return Ok(flow),
        GroupEnd::Unsent(attempted) => attempted,
    };
    tracing::warn!(
        interval = iv.name(),
        users = attempted.len(),
        "user group could not be sent; its users run one by one"
    );
    for user_id in attempted {
        if run.deadline_stop() {
            return Ok(Flow::Stop);
        }
        match retry_transient!(claim_user(run, client, iv, min, user_id).await) {
            Ok(None) => {}
            Ok(Some(c)) => c.count(run),
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(e) => user_failed(run, failed_users, iv, user_id, &e),
        }
    }
    Ok(Flow::Done)
}

/// The grouped transaction of [`human_page`].
async fn human_group<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    users: &[i64],
    failed_users: &mut Vec<i64>,
) -> Result<GroupEnd>
where
    C: GenericClient + Send + Sync,
{
    let mut flow = Flow::Done;
    let mut claims: Vec<UserClaim> = Vec::new();
    // Users attempted in the group (claimed, or claimed elsewhere), for the fall-back.
    let mut attempted: Vec<i64> = Vec::new();
    let mut tx = client.transaction().await?;
    let mut set = None;
    // Near the deadline, user by user, so the guard can stop after the first unit.
    if !run.inv.deadline.reached() {
        match claim_users_set(run, &tx, iv, min, users).await {
            Ok(c) => set = Some(c),
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(_) => {
                // The claim was the transaction's only statement.
                tx.rollback().await?;
                tx = client.transaction().await?;
            }
        }
    }
    match set {
        Some(c) => {
            attempted.extend_from_slice(users);
            run.progress |= !c.is_empty();
            claims = c;
        }
        None => {
            let mut progress = run.progress;
            for &user_id in users {
                if progress && run.inv.deadline.reached() {
                    flow = Flow::Stop;
                    break;
                }
                match retry_transient!(
                    in_savepoint(&mut tx, async |sp| claim_user_rows(
                        run, sp, iv, min, user_id
                    )
                    .await)
                    .await?
                ) {
                    Ok(None) => attempted.push(user_id),
                    Ok(Some(c)) => {
                        attempted.push(user_id);
                        progress = true;
                        claims.push(c);
                    }
                    Err(e) if e.is_connection_lost() => return Err(e),
                    Err(e) => user_failed(run, failed_users, iv, user_id, &e),
                }
            }
        }
    }
    // Send-then-commit, in calls of ten (§7.2 (b)).
    let out: Vec<OutMessage> = claims.iter().filter_map(|c| c.email.clone()).collect();
    for part in out.chunks(SQS_BATCH) {
        if run.inv.queue.send(part).await.is_err() {
            tx.rollback().await?;
            return Ok(GroupEnd::Unsent(attempted));
        }
    }
    tx.commit().await?;
    for c in &claims {
        c.log(iv);
        c.count(run);
    }
    Ok(GroupEnd::Committed(flow))
}

/// §5: the human tokens of one interval.
async fn humans<C>(run: &mut Run<'_, '_>, client: &mut C, iv: Interval) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    let (mut min, last) = iv.bounds(run.inv.today());
    let mut failed_users: Vec<i64> = Vec::new();
    loop {
        let page = client
            .query_typed(
                &format!(
                    "SELECT t.user_id::bigint, t.expires_at, t.id::bigint
                     FROM personal_access_tokens t JOIN users u ON u.id = t.user_id
                     WHERE {} AND u.user_type = 0 AND t.user_id <> ALL($3::bigint[])
                     ORDER BY t.expires_at ASC, t.id ASC LIMIT $4",
                    iv.scope()
                ),
                &[
                    (&min, Type::DATE),
                    (&last, Type::DATE),
                    (&failed_users, Type::INT8_ARRAY),
                    (&BATCH_SIZE, Type::INT8),
                ],
            )
            .await?;
        let Some(last_row) = page.last() else {
            return Ok(Flow::Done);
        };
        let next_min: NaiveDate = last_row.get(1);
        let users = distinct_in_order(page.iter().map(|r| r.get::<_, i64>(0)));
        if human_page(run, client, iv, min, &users, &mut failed_users).await? == Flow::Stop {
            return Ok(Flow::Stop);
        }
        // Inclusive: tokens on the same date of users not seen yet are still found.
        min = next_min;
        if run.budget_stop() {
            return Ok(Flow::Stop);
        }
    }
}

/// §6 step 1: the first project membership whose project exists, else the first
/// access-granting group membership whose group exists.
async fn find_resource<C: GenericClient>(c: &C, bot: i64) -> Result<Option<(ResourceType, i64)>> {
    if let Some(r) = c
        .query_opt(
            "SELECT m.source_id::bigint FROM members m JOIN projects p ON p.id = m.source_id
             WHERE m.user_id = $1::bigint AND m.source_type = 'Project' AND m.requested_at IS NULL
             ORDER BY m.id LIMIT 1",
            &[&bot],
        )
        .await?
    {
        return Ok(Some((ResourceType::Project, r.get(0))));
    }
    Ok(c.query_opt(
        "SELECT m.source_id::bigint FROM members m
           JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group'
         WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace' AND m.requested_at IS NULL
           AND m.access_level >= 10
         ORDER BY m.id LIMIT 1",
        &[&bot],
    )
    .await?
    .map(|r| (ResourceType::Group, r.get(0))))
}

/// The resource's details, read inside the bot's transaction.
async fn load_resource<C: GenericClient>(c: &C, kind: ResourceType, id: i64) -> Result<Resource> {
    let vanished =
        || Error::Invariant(format!("the bot's {} {id} no longer exists", kind.as_str()));
    match kind {
        ResourceType::Project => {
            let r = c
                .query_opt(
                    "SELECT p.id::bigint, COALESCE(p.name, p.path, ''), p.description,
                            p.visibility_level::int4, p.ci_config_path, n.name,
                            COALESCE(r.path, p.path, '')
                     FROM projects p JOIN namespaces n ON n.id = p.namespace_id
                     LEFT JOIN routes r ON r.source_type = 'Project' AND r.source_id = p.id
                     WHERE p.id = $1::bigint",
                    &[&id],
                )
                .await?
                .ok_or_else(vanished)?;
            Ok(Resource::Project {
                id: r.get(0),
                name: r.get(1),
                description: r.get(2),
                visibility_level: r.get(3),
                ci_config_path: r.get(4),
                namespace_name: r.get(5),
                full_path: r.get(6),
            })
        }
        ResourceType::Group => {
            let r = c
                .query_opt(
                    "SELECT n.id::bigint, n.name, n.path, COALESCE(r.path, n.path),
                            n.traversal_ids::bigint[]
                     FROM namespaces n
                     LEFT JOIN routes r ON r.source_type = 'Namespace' AND r.source_id = n.id
                     WHERE n.id = $1::bigint AND n.type = 'Group'",
                    &[&id],
                )
                .await?
                .ok_or_else(vanished)?;
            let mut traversal_ids: Vec<i64> = r.get(4);
            if traversal_ids.is_empty() {
                traversal_ids.push(id);
            }
            Ok(Resource::Group {
                id: r.get(0),
                name: r.get(1),
                path: r.get(2),
                full_path: r.get(3),
                traversal_ids,
            })
        }
    }
}

/// §6 step 4: the subscribed hooks of the resource (⚑ D20), by id.
async fn subscribed_hooks<C: GenericClient>(c: &C, resource: &Resource) -> Result<Vec<i64>> {
    let rows = match resource {
        Resource::Project { id, .. } => {
            c.query(
                "SELECT id::bigint FROM web_hooks
                 WHERE type = 'ProjectHook' AND project_id = $1::bigint
                   AND resource_access_token_events = true
                 ORDER BY id",
                &[id],
            )
            .await?
        }
        Resource::Group { traversal_ids, .. } => {
            c.query(
                "SELECT id::bigint FROM web_hooks
                 WHERE type = 'GroupHook' AND group_id = ANY($1::bigint[])
                   AND resource_access_token_events = true
                 ORDER BY id",
                &[traversal_ids],
            )
            .await?
        }
    };
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// §6 step 5: for a project, users u ≠ bot with `project_access(u, p) >= 40` (common.md
/// §2.2: a project membership, a membership of the namespace group or its ancestors,
/// or the personal namespace's owner); for a group, its active direct owners (⚑ D21).
/// Both only users who can receive notifications, by id.
pub async fn recipients<C: GenericClient>(
    c: &C,
    resource: &Resource,
    bot: i64,
) -> Result<Vec<i64>> {
    let rows = match resource {
        Resource::Project { id, .. } => {
            c.query(
                &format!(
                    "WITH p AS (
                       SELECT p.id, n.type AS ntype, n.traversal_ids::bigint[] AS t, n.owner_id
                       FROM projects p JOIN namespaces n ON n.id = p.namespace_id
                       WHERE p.id = $1::bigint),
                     granted AS (
                       SELECT m.user_id FROM members m, p
                       WHERE m.source_type = 'Project' AND m.source_id = p.id
                         AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 40
                       UNION
                       SELECT m.user_id FROM members m, p
                       WHERE p.ntype = 'Group' AND m.source_type = 'Namespace'
                         AND m.source_id = ANY(p.t)
                         AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 40
                       UNION
                       SELECT p.owner_id FROM p WHERE p.ntype = 'User')
                     SELECT u.id::bigint FROM users u JOIN granted g ON g.user_id = u.id
                     WHERE u.id <> $2::bigint AND {CAN_RECEIVE_NOTIFICATIONS}
                     ORDER BY u.id"
                ),
                &[id, &bot],
            )
            .await?
        }
        Resource::Group { id, .. } => {
            c.query(
                &format!(
                    "SELECT DISTINCT u.id::bigint FROM members m JOIN users u ON u.id = m.user_id
                     WHERE m.source_type = 'Namespace' AND m.source_id = $1::bigint
                       AND m.state = 0 AND m.requested_at IS NULL AND m.access_level = 50
                       AND u.id <> $2::bigint AND {CAN_RECEIVE_NOTIFICATIONS}
                     ORDER BY 1"
                ),
                &[id, &bot],
            )
            .await?
        }
    };
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The resources of bots (§6 step 1: the first project membership whose project
/// exists, else the first access-granting group membership whose group exists) with
/// what their messages need: the resource's details, its subscribed hooks (§6 step 4)
/// and its email recipients (§6 step 5), one row per bot of `$1`; `kind` is NULL for a
/// bot without a resource. The set-based form of [`find_resource`], [`load_resource`],
/// [`subscribed_hooks`] and [`recipients`].
const BOT_CONTEXT_SQL: &str = "
    WITH b AS (SELECT DISTINCT unnest($1::bigint[]) AS bot),
    res AS (
      SELECT b.bot, coalesce(pr.kind, gr.kind) AS kind, coalesce(pr.id, gr.id) AS rid
      FROM b
      LEFT JOIN LATERAL (SELECT 'project'::text AS kind, m.source_id::bigint AS id
                         FROM members m JOIN projects p ON p.id = m.source_id
                         WHERE m.user_id = b.bot AND m.source_type = 'Project' AND m.requested_at IS NULL
                         ORDER BY m.id LIMIT 1) pr ON true
      LEFT JOIN LATERAL (SELECT 'group'::text AS kind, m.source_id::bigint AS id
                         FROM members m JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group'
                         WHERE m.user_id = b.bot AND m.source_type = 'Namespace'
                           AND m.requested_at IS NULL AND m.access_level >= 10
                         ORDER BY m.id LIMIT 1) gr ON true)
    SELECT res.bot, res.kind, res.rid,
           CASE WHEN res.kind = 'project' THEN COALESCE(p.name, p.path, '') ELSE g.name END,
           p.description, p.visibility_level::int4, p.ci_config_path, pn.name, g.path,
           CASE WHEN res.kind = 'project' THEN COALESCE(pr.path, p.path, '') ELSE COALESCE(gr.path, g.path) END,
           COALESCE(g.traversal_ids::bigint[], '{}'),
           ARRAY(SELECT h.id::bigint FROM web_hooks h
                 WHERE h.resource_access_token_events = true
                   AND ((res.kind = 'project' AND h.type = 'ProjectHook' AND h.project_id = res.rid)
                     OR (res.kind = 'group' AND h.type = 'GroupHook'
                         AND h.group_id = ANY(COALESCE(NULLIF(g.traversal_ids::bigint[], '{}'), ARRAY[g.id::bigint]))))
                 ORDER BY h.id),
           CASE WHEN res.kind = 'project' THEN ARRAY(
             SELECT u.id::bigint FROM users u
             WHERE u.id <> res.bot AND (u.state IS NOT DISTINCT FROM 'active' AND u.user_type IN (0, 4))
               AND (EXISTS (SELECT 1 FROM members m WHERE m.user_id = u.id AND m.source_type = 'Project'
                              AND m.source_id = res.rid AND m.state = 0 AND m.requested_at IS NULL
                              AND m.access_level >= 40)
                 OR (pn.type = 'Group' AND EXISTS (
                       SELECT 1 FROM members m WHERE m.user_id = u.id AND m.source_type = 'Namespace'
                         AND m.source_id = ANY(pn.traversal_ids::bigint[]) AND m.state = 0
                         AND m.requested_at IS NULL AND m.access_level >= 40))
                 OR (pn.type = 'User' AND pn.owner_id = u.id))
             ORDER BY 1)
           ELSE ARRAY(
             SELECT DISTINCT u.id::bigint FROM members m JOIN users u ON u.id = m.user_id
             WHERE m.source_type = 'Namespace' AND m.source_id = res.rid AND m.state = 0
               AND m.requested_at IS NULL AND m.access_level = 50 AND u.id <> res.bot
               AND (u.state IS NOT DISTINCT FROM 'active' AND u.user_type IN (0, 4))
             ORDER BY 1) END
    FROM res
    LEFT JOIN projects p ON res.kind = 'project' AND p.id = res.rid
    LEFT JOIN namespaces pn ON pn.id = p.namespace_id
    LEFT JOIN routes pr ON pr.source_type = 'Project' AND pr.source_id = p.id
    LEFT JOIN namespaces g ON res.kind = 'group' AND g.id = res.rid AND g.type = 'Group'
    LEFT JOIN routes gr ON gr.source_type = 'Namespace' AND gr.source_id = g.id";

/// A bot's resource, its subscribed hooks and its email recipients.
pub type BotContext = (Resource, Vec<i64>, Vec<i64>);

/// [`BOT_CONTEXT_SQL`] for `bots`, in one statement: the bots that have a resource.
pub async fn bot_contexts<C: GenericClient>(
    c: &C,
    bots: &[i64],
) -> Result<std::collections::HashMap<i64, BotContext>> {
    let rows = c
        .query_typed(BOT_CONTEXT_SQL, &[(&bots, Type::INT8_ARRAY)])
        .await?;
    let mut out = std::collections::HashMap::new();
    for r in rows {
        let kind: Option<String> = r.get(1);
        let rid: Option<i64> = r.get(2);
        let (Some(kind), Some(rid)) = (kind, rid) else {
            continue;
        };
        let resource = if kind == "project" {
            // A project without its namespace: left out (the bot's claim then fails
            // and runs alone, where `load_resource` reports it).
            let Some(namespace_name) = r.get::<_, Option<String>>(7) else {
                continue;
            };
            Resource::Project {
                id: rid,
                name: r.get(3),
                description: r.get(4),
                visibility_level: r.get(5),
                ci_config_path: r.get(6),
                namespace_name,
                full_path: r.get(9),
            }
        } else {
            let (Some(name), Some(path)) =
                (r.get::<_, Option<String>>(3), r.get::<_, Option<String>>(8))
            else {
                continue;
            };
            let mut traversal_ids: Vec<i64> = r.get(10);
            if traversal_ids.is_empty() {
                traversal_ids.push(rid);
            }
            Resource::Group {
                id: rid,
                name,
                path,
                full_path: r.get(9),
                traversal_ids,
            }
        };
        out.insert(r.get(0), (resource, r.get(11), r.get(12)));
    }
    Ok(out)
}

/// The messages of one bot's claim (§6 steps 3–5): `rows` are its claimed tokens.
fn bot_messages(
    run: &Run<'_, '_>,
    iv: Interval,
    bot: i64,
    rows: Vec<ClaimedToken>,
    ctx: &BotContext,
) -> Option<BotClaim> {
    let marked = rows.len() as u64;
    let reported = rows.into_iter().min_by_key(|t| t.id)?;
    let out = bot_notices(
        iv,
        bot,
        &reported,
        ctx,
        run.instance,
        &run.env.run_id,
        run.inv.now,
    );
    Some(BotClaim {
        bot,
        marked,
        out,
        recipients: ctx.2.clone(),
    })
}

/// The notices of one bot's claim, `reported` being its claimed token of the lowest id:
/// in the 7-day interval a web hook per subscribed hook, then an email per recipient.
/// Pure: also what the `b28` bench's floor sends for the same claim.
pub fn bot_notices(
    iv: Interval,
    bot: i64,
    reported: &ClaimedToken,
    (resource, hooks, recipients): &BotContext,
    instance: &Instance,
    run_id: &str,
    now: DateTime<Utc>,
) -> Vec<OutMessage> {
    let today = now.date_naive();
    let deliver = |envelope: Envelope| OutMessage::new(Function::DeliverNotification, 0, envelope);
    let mut out: Vec<OutMessage> = Vec::new();
    if iv == Interval::SevenDays {
        let body = hook_body(resource, reported, instance);
        let event_key = webhook_event_key(bot, reported.id);
        for &hook_id in hooks {
            out.push(deliver(Envelope::new(
                "deliver-notification.webhook",
                webhook_key(&event_key, hook_id),
                run_id,
                now,
                WebhookNotification {
                    hook_id,
                    event_key: event_key.clone(),
                    body: body.clone(),
                },
            )));
        }
    }
    for &user_id in recipients {
        let n = EmailNotification::BotResourceAccessTokenAboutToExpire {
            recipient_user_id: user_id,
            days_to_expire: iv.days_to_expire(),
            bot_user_id: bot,
            token_name: reported.name.clone(),
            resource_type: resource.kind(),
            resource_id: resource.id(),
            resource_full_path: resource.full_path().to_string(),
            resource_name: resource.name().to_string(),
        };
        out.push(deliver(Envelope::new(
            "deliver-notification.email",
            bot_email_key(iv.name(), bot, user_id, today),
            run_id,
            now,
            &n,
        )));
    }
    out
}

/// §6 steps 1–5 for a whole page of bots, set-based: one statement finds every bot's
/// resource and claims the tokens of the bots that have one; one more reads the
/// claimed bots' resources, hooks and recipients. Outcomes in the order of `bots`.
async fn claim_bots_set<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    bots: &[i64],
) -> Result<Vec<(i64, BotOutcome)>> {
    let (_, last) = iv.bounds(run.inv.today());
    let rows = c
        .query_typed(
            &format!(
                "WITH b AS (SELECT DISTINCT unnest($4::bigint[]) AS bot),
                 res AS (
                   SELECT b.bot FROM b
                   WHERE EXISTS (SELECT 1 FROM members m JOIN projects p ON p.id = m.source_id
                                 WHERE m.user_id = b.bot AND m.source_type = 'Project'
                                   AND m.requested_at IS NULL)
                      OR EXISTS (SELECT 1 FROM members m
                                   JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group'
                                 WHERE m.user_id = b.bot AND m.source_type = 'Namespace'
                                   AND m.requested_at IS NULL AND m.access_level >= 10)),
                 claimed AS (
                   UPDATE personal_access_tokens t SET {}
                   WHERE t.user_id IN (SELECT bot FROM res) AND {}
                   RETURNING t.id::bigint AS id, t.name, t.created_at::timestamp AS created_at,
                             t.expires_at, t.last_used_at::timestamptz AS last_used_at,
                             t.user_id::bigint AS user_id)
                 SELECT res.bot, c.id, c.name, c.created_at, c.expires_at, c.last_used_at
                 FROM res LEFT JOIN claimed c ON c.user_id = res.bot",
                iv.set_list(),
                iv.scope()
            ),
            &[
                (&min, Type::DATE),
                (&last, Type::DATE),
                (&run.inv.now, Type::TIMESTAMPTZ),
                (&bots, Type::INT8_ARRAY),
            ],
        )
        .await?;
    let mut with_resource = std::collections::HashSet::new();
    let mut claimed: std::collections::HashMap<i64, Vec<ClaimedToken>> =
        std::collections::HashMap::new();
    for r in &rows {
        let bot: i64 = r.get(0);
        with_resource.insert(bot);
        if let Some(id) = r.get::<_, Option<i64>>(1) {
            claimed.entry(bot).or_default().push(ClaimedToken {
                id,
                name: r.get(2),
                created_at: r.get(3),
                expires_at: r.get(4),
                last_used_at: r.get(5),
                user_id: bot,
            });
        }
    }
    let mut claimed_bots: Vec<i64> = claimed.keys().copied().collect();
    claimed_bots.sort_unstable();
    let contexts = if claimed_bots.is_empty() {
        std::collections::HashMap::new()
    } else {
        bot_contexts(c, &claimed_bots).await?
    };
    let mut out = Vec::with_capacity(bots.len());
    for &bot in bots {
        let outcome = if !with_resource.contains(&bot) {
            BotOutcome::NoResource
        } else {
            match claimed.remove(&bot) {
                None => BotOutcome::NothingClaimed,
                Some(rows) => {
                    let ctx = contexts.get(&bot).ok_or_else(|| {
                        Error::Invariant(format!("the resource of bot {bot} vanished"))
                    })?;
                    match bot_messages(run, iv, bot, rows, ctx) {
                        Some(c) => BotOutcome::Claimed(c),
                        None => BotOutcome::NothingClaimed,
                    }
                }
            }
        };
        out.push((bot, outcome));
    }
    Ok(out)
}

/// A bot's claim: how many tokens, its messages, and its email recipients (for the
/// log lines).
struct BotClaim {
    bot: i64,
    marked: u64,
    out: Vec<OutMessage>,
    recipients: Vec<i64>,
}

impl BotClaim {
    fn log(&self, iv: Interval) {
        for &user_id in &self.recipients {
            tracing::info!(
                user_id,
                bot_user_id = self.bot,
                interval = iv.name(),
                "Notifying resource access token owner about expiring tokens"
            );
        }
    }

    fn count(&self, run: &mut Run<'_, '_>) {
        run.progress = true;
        run.totals.bot_tokens_marked += self.marked;
    }
}

/// How a bot ended.
enum BotOutcome {
    NoResource,
    NothingClaimed,
    Claimed(BotClaim),
}

/// §6 steps 1–5 for one bot inside the caller's transaction or savepoint: resource,
/// claim, hooks, recipients; the messages are returned, not sent.
async fn claim_bot_rows<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    bot: i64,
) -> Result<BotOutcome> {
    let Some(found) = find_resource(c, bot).await? else {
        return Ok(BotOutcome::NoResource);
    };
    let (_, last) = iv.bounds(run.inv.today());
    let today = run.inv.today();
    let rows = c
        .query(
            &format!(
                "UPDATE personal_access_tokens t SET {}
                 WHERE t.user_id = $4::bigint AND {}
                 RETURNING t.id::bigint, t.name, t.created_at::timestamp, t.expires_at,
                           t.last_used_at::timestamptz, t.user_id::bigint",
                iv.set_list(),
                iv.scope()
            ),
            &[&min, &last, &run.inv.now, &bot],
        )
        .await?;
    let Some(reported) = rows
        .iter()
        .map(|r| ClaimedToken {
            id: r.get(0),
            name: r.get(1),
            created_at: r.get(2),
            expires_at: r.get(3),
            last_used_at: r.get(4),
            user_id: r.get(5),
        })
        .min_by_key(|t| t.id)
    else {
        return Ok(BotOutcome::NothingClaimed);
    };
    let resource = load_resource(c, found.0, found.1).await?;
    let mut out: Vec<OutMessage> = Vec::new();
    if iv == Interval::SevenDays {
        let body = hook_body(&resource, &reported, run.instance);
        let event_key = webhook_event_key(bot, reported.id);
        for hook_id in subscribed_hooks(c, &resource).await? {
            out.push(OutMessage::new(
                Function::DeliverNotification,
                0,
                Envelope::new(
                    "deliver-notification.webhook",
                    webhook_key(&event_key, hook_id),
                    &run.env.run_id,
                    run.inv.now,
                    WebhookNotification {
                        hook_id,
                        event_key: event_key.clone(),
                        body: body.clone(),
                    },
                ),
            ));
        }
    }
    let recipients = recipients(c, &resource, bot).await?;
    for &user_id in &recipients {
        let n = EmailNotification::BotResourceAccessTokenAboutToExpire {
            recipient_user_id: user_id,
            days_to_expire: iv.days_to_expire(),
            bot_user_id: bot,
            token_name: reported.name.clone(),
            resource_type: resource.kind(),
            resource_id: resource.id(),
            resource_full_path: resource.full_path().to_string(),
            resource_name: resource.name().to_string(),
        };
        out.push(run.email(bot_email_key(iv.name(), bot, user_id, today), &n));
    }
    Ok(BotOutcome::Claimed(BotClaim {
        bot,
        marked: rows.len() as u64,
        out,
        recipients,
    }))
}

/// §6 steps 1–6 for one bot in its own transaction (the fall-back when a page's group
/// could not be sent).
async fn claim_bot<C>(
    run: &Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    bot: i64,
) -> Result<BotOutcome>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let outcome = claim_bot_rows(run, &tx, iv, min, bot).await?;
    if let BotOutcome::Claimed(c) = &outcome {
        c.log(iv);
        run.inv.queue.send(&c.out).await?;
    }
    tx.commit().await?;
    Ok(outcome)
}

/// Counts and logs a bot that ended without a claim (no resource, or a failure).
fn bot_ended(
    run: &mut Run<'_, '_>,
    excluded: &mut Vec<i64>,
    iv: Interval,
    bot: i64,
    outcome: &Result<BotOutcome>,
) {
    match outcome {
        Ok(BotOutcome::NoResource) => {
            // No log, as in GitLab; the tokens stay unmarked.
            excluded.push(bot);
            run.totals.bots_without_membership += 1;
        }
        Ok(BotOutcome::NothingClaimed) | Ok(BotOutcome::Claimed(_)) => {}
        Err(e) => {
            excluded.push(bot);
            run.totals.bot_failures += 1;
            tracing::error!(
                user_id = bot,
                interval = iv.name(),
                error = %e,
                error_class = e.class(),
                "Failed to send notification about expiring resource access tokens"
            );
        }
    }
}

/// One page of bots, grouped as common.md §7.2 allows: one transaction, one
/// savepoint per bot (a failing bot rolls back alone), the page's messages sent in
/// calls of ten before COMMIT; when a send fails, the page rolls back and its bots run
/// again one transaction each (as [`human_page`]).
async fn bot_page<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    bots: &[i64],
    excluded: &mut Vec<i64>,
) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    let mut flow = Flow::Done;
    let mut claims: Vec<BotClaim> = Vec::new();
    let mut attempted: Vec<i64> = Vec::new();
    let mut progress = run.progress;
    if run.deadline_stop() {
        return Ok(Flow::Stop);
    }
    let mut tx = client.transaction().await?;
    let mut set = None;
    // Near the deadline, bot by bot, so the guard can stop after the first unit.
    if !run.inv.deadline.reached() {
        match claim_bots_set(run, &tx, iv, min, bots).await {
            Ok(c) => set = Some(c),
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(_) => {
                // The claim was the transaction's first statement.
                tx.rollback().await?;
                tx = client.transaction().await?;
            }
        }
    }
    let one_by_one: &[i64] = if set.is_some() { &[] } else { bots };
    for (bot, outcome) in set.into_iter().flatten() {
        match outcome {
            BotOutcome::Claimed(c) => {
                attempted.push(bot);
                claims.push(c);
            }
            BotOutcome::NothingClaimed => attempted.push(bot),
            other => bot_ended(run, excluded, iv, bot, &Ok(other)),
        }
    }
    for &bot in one_by_one {
        if progress && run.inv.deadline.reached() {
            flow = Flow::Stop;
            break;
        }
        let outcome = retry_transient!(
            in_savepoint(&mut tx, async |sp| claim_bot_rows(run, sp, iv, min, bot)
                .await)
            .await?
        );
        match outcome {
            Ok(BotOutcome::Claimed(c)) => {
                attempted.push(bot);
                progress = true;
                claims.push(c);
            }
            Ok(BotOutcome::NothingClaimed) => attempted.push(bot),
            Err(e) if e.is_connection_lost() => return Err(e),
            other => bot_ended(run, excluded, iv, bot, &other),
        }
    }
    let out: Vec<&OutMessage> = claims.iter().flat_map(|c| c.out.iter()).collect();
    let mut sent = Ok(());
    for part in out.chunks(SQS_BATCH) {
        let part: Vec<OutMessage> = part.iter().map(|m| (*m).clone()).collect();
        sent = run.inv.queue.send(&part).await;
        if sent.is_err() {
            break;
        }
    }
    if sent.is_ok() {
        tx.commit().await?;
        for c in &claims {
            c.log(iv);
            c.count(run);
        }
        return Ok(flow);
    }
    tx.rollback().await?;
    tracing::warn!(
        interval = iv.name(),
        bots = attempted.len(),
        "bot group could not be sent; its bots run one by one"
    );
    for bot in attempted {
        if run.deadline_stop() {
            return Ok(Flow::Stop);
        }
        match retry_transient!(claim_bot(run, client, iv, min, bot).await) {
            Ok(BotOutcome::Claimed(c)) => c.count(run),
            Err(e) if e.is_connection_lost() => return Err(e),
            other => bot_ended(run, excluded, iv, bot, &other),
        }
    }
    Ok(flow)
}

/// §6: the bot tokens of one interval.
async fn bots<C>(run: &mut Run<'_, '_>, client: &mut C, iv: Interval) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    let (mut min, last) = iv.bounds(run.inv.today());
    // `without_resource ∪ failed`: both are only ever excluded.
    let mut excluded: Vec<i64> = Vec::new();
    loop {
        let page = client
            .query_typed(
                &format!(
                    "SELECT t.id::bigint, t.user_id::bigint, t.expires_at
                     FROM personal_access_tokens t JOIN users u ON u.id = t.user_id
                     WHERE {} AND u.user_type = 6 AND t.user_id <> ALL($3::bigint[])
                     ORDER BY t.expires_at ASC, t.id ASC LIMIT $4",
                    iv.scope()
                ),
                &[
                    (&min, Type::DATE),
                    (&last, Type::DATE),
                    (&excluded, Type::INT8_ARRAY),
                    (&BATCH_SIZE, Type::INT8),
                ],
            )
            .await?;
        let Some(last_row) = page.last() else {
            return Ok(Flow::Done);
        };
        let next_min: NaiveDate = last_row.get(2);
        let bots = distinct_in_order(page.iter().map(|r| r.get::<_, i64>(1)));
        if bot_page(run, client, iv, min, &bots, &mut excluded).await? == Flow::Stop {
            return Ok(Flow::Stop);
        }
        min = next_min;
        if run.budget_stop() {
            return Ok(Flow::Stop);
        }
    }
}

/// §4 step 2: the intervals in order, humans then bots, stopping on the budget.
async fn run_intervals<C>(run: &mut Run<'_, '_>, client: &mut C) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    for iv in Interval::ALL {
        if humans(run, client, iv).await? == Flow::Stop || run.budget_stop() {
            return Ok(Flow::Stop);
        }
        if bots(run, client, iv).await? == Flow::Stop || run.budget_stop() {
            return Ok(Flow::Stop);
        }
    }
    Ok(Flow::Done)
}

/// Handle one `pat-expiring.run` message.
pub async fn handle<C>(inv: &Invocation<'_>, client: &mut C, env: &Envelope) -> Result<Report>
where
    C: GenericClient + Send + Sync,
{
    let _: PatExpiringRun = env.payload()?;
    let instance = &inv
        .notifier
        .ok_or_else(|| Error::Config("pat-expiring needs GITLAB_BASE_URL (no notifier)".into()))?
        .instance;
    let lock = locks::function_key(FUNCTION.name());
    if !locks::try_session_lock(&*client, &lock).await? {
        return Ok(Report::skipped());
    }
    let mut run = Run {
        inv,
        env,
        instance,
        budget: Budget::start(inv.settings.pat_expiring_budget),
        progress: false,
        totals: Totals::default(),
    };
    let result = run_intervals(&mut run, client).await;
    // Released before any continuation is sent, on error paths too (§9.10).
    let unlocked = locks::session_unlock(&*client, &lock).await;
    let flow = result?;
    unlocked?;
    let status = match flow {
        Flow::Stop => {
            let next = env.continuation(FUNCTION, inv.now, PatExpiringRun {});
            inv.continue_with(OutMessage::new(FUNCTION, REQUEUE_DELAY_S, next))
                .await?;
            "limit_reached"
        }
        Flow::Done => "completed",
    };
    let t = &run.totals;
    Ok(Report::untyped(
        status,
        json!({
            "total_notification_delivered_for_resource_access_tokens": t.bot_tokens_marked,
            "total_resource_bot_without_membership": t.bots_without_membership,
            "total_failed_notifications_for_resource_bots": t.bot_failures,
            "total_user_tokens_marked": t.user_tokens_marked,
            "total_user_emails_enqueued": t.user_emails_enqueued,
            "total_user_emails_suppressed": t.user_emails_suppressed,
            "total_user_failures": t.user_failures,
        }),
    )
    .metric("user_tokens_marked", t.user_tokens_marked as f64)
    .metric("bot_tokens_marked", t.bot_tokens_marked as f64)
    .metric("failed", (t.user_failures + t.bot_failures) as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_bounds_are_inclusive_and_adjacent() {
        let today: NaiveDate = "2025-03-10".parse().unwrap();
        let d = |s: &str| s.parse::<NaiveDate>().unwrap();
        assert_eq!(
            Interval::SevenDays.bounds(today),
            (d("2025-03-10"), d("2025-03-17"))
        );
        assert_eq!(
            Interval::ThirtyDays.bounds(today),
            (d("2025-03-18"), d("2025-04-09"))
        );
        assert_eq!(
            Interval::SixtyDays.bounds(today),
            (d("2025-04-10"), d("2025-05-09"))
        );
        let days: Vec<u32> = Interval::ALL.iter().map(|i| i.days_to_expire()).collect();
        assert_eq!(days, vec![7, 30, 60]);
        assert!(Interval::SevenDays
            .set_list()
            .contains("expire_notification_delivered = true"));
        assert!(!Interval::SixtyDays
            .set_list()
            .contains("expire_notification_delivered"));
        assert!(Interval::ThirtyDays
            .scope()
            .contains("t.expire_notification_delivered = false"));
    }

    #[test]
    fn users_are_taken_in_order_of_first_appearance() {
        assert_eq!(
            distinct_in_order([3, 1, 3, 2, 1].into_iter()),
            vec![3, 1, 2]
        );
    }

    #[test]
    fn the_project_hook_body_is_gitlabs_format() {
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
            full_path: "acme/web/site".into(),
        };
        let expected = json!({
          "object_kind": "access_token",
          "project": {
            "id": 200, "name": "site", "description": null,
            "web_url": "https://gitlab.example.com/acme/web/site", "avatar_url": null,
            "git_ssh_url": "git@gitlab.example.com:acme/web/site.git",
            "git_http_url": "https://gitlab.example.com/acme/web/site.git",
            "namespace": "web", "visibility_level": 0,
            "path_with_namespace": "acme/web/site", "default_branch": null,
            "ci_config_path": null,
            "homepage": "https://gitlab.example.com/acme/web/site",
            "url": "git@gitlab.example.com:acme/web/site.git",
            "ssh_url": "git@gitlab.example.com:acme/web/site.git",
            "http_url": "https://gitlab.example.com/acme/web/site.git"
          },
          "object_attributes": {
            "user_id": 20, "created_at": "2025-01-02 09:00:00 UTC", "id": 20,
            "name": "T20", "expires_at": "2025-03-16", "last_used_at": null
          },
          "event_name": "expiring_access_token"
        });
        assert_eq!(hook_body(&project, &token, &instance), expected);
        let used = ClaimedToken {
            last_used_at: Some("2025-03-01T12:30:05Z".parse().unwrap()),
            ..token
        };
        let group = Resource::Group {
            id: 101,
            name: "web".into(),
            path: "web".into(),
            full_path: "acme/web".into(),
            traversal_ids: vec![100, 101],
        };
        let b = hook_body(&group, &used, &instance);
        assert_eq!(
            b["group"],
            json!({"group_name":"web","group_path":"web","group_id":101,"full_path":"acme/web"})
        );
        assert!(b.get("project").is_none());
        assert_eq!(
            b["object_attributes"]["last_used_at"],
            "2025-03-01 12:30:05 UTC"
        );
    }
}
