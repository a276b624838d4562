//! The stack-wide lists of `infra/template.yaml` that name every function or every
//! cron: the parameters (schedule switches, mapping switches) and their groups, the
//! conditions, the queues EventBridge Scheduler may send to, a cron's heartbeat,
//! missed-run page and failing composite, the schema alarms (ten metrics to an alarm),
//! the stalled-stack page (any two crons failing), the dashboard and the outputs.

use shared::metrics::FAILED;
use shared::Function;

use crate::function::heartbeat_window;
use crate::{camel, crons, every, Every};

fn all() -> impl Iterator<Item = Function> {
    Function::ALL.iter().copied()
}

/// `@C@` and `@n@` filled in for `f`.
fn fill(text: &str, f: Function) -> String {
    text.replace("@C@", &camel(f.name()))
        .replace("@n@", f.name())
}

/// Group 4 of the guided deploy: every cron's schedule switch.
pub(crate) fn parameter_group_cutover() -> String {
    crons()
        .map(|f| fill("          - @C@ScheduleEnabled\n", f))
        .collect()
}

/// Group 7 of the guided deploy: every function's mapping switch.
pub(crate) fn parameter_group_mappings() -> String {
    all()
        .map(|f| fill("          - @C@MappingEnabled\n", f))
        .collect()
}

pub(crate) fn schedule_parameters() -> String {
    crons()
        .map(|f| {
            fill(
                "  @C@ScheduleEnabled:
    Type: String
    Default: \"false\"
    AllowedValues: [\"true\", \"false\"]
    Description: >
      true = the @n@ cron runs. Off by default: a first deploy runs beside GitLab's own
      cron, so switch it on only at cutover, after switching GitLab's off
      (docs/cutover.md). false pauses it (the queue keeps working for replays).
",
                f,
            )
        })
        .collect()
}

pub(crate) fn mapping_parameters() -> String {
    all()
        .map(|f| {
            fill(
                "  @C@MappingEnabled:
    Type: String
    Default: \"true\"
    AllowedValues: [\"true\", \"false\"]
    Description: Set to false to pause @n@'s event-source mapping (its messages stay on the queue, retention 4 days).
",
                f,
            )
        })
        .collect()
}

pub(crate) fn conditions() -> String {
    let mut out: String = all()
        .map(|f| {
            fill(
                "  @C@MappingOn: !Equals [!Ref @C@MappingEnabled, \"true\"]\n",
                f,
            )
        })
        .collect();
    out.extend(crons().map(|f| {
        fill(
            "  @C@ScheduleOn: !Equals [!Ref @C@ScheduleEnabled, \"true\"]\n",
            f,
        )
    }));
    out
}

pub(crate) fn scheduler_role_queues() -> String {
    all()
        .map(|f| {
            fill(
                "                  - !GetAtt @C@Queue.Arn\n                  - !GetAtt @C@DLQ.Arn\n",
                f,
            )
        })
        .collect()
}

/// A cron's heartbeat (armed through cutover), its missed-run page and its failing
/// composite (for the stalled-stack page).
pub(crate) fn cron_alarms(f: Function) -> String {
    let (period, count) = heartbeat_window(f);
    let mut out = match every(f) {
        Every::Day => String::from("  # Did not run or did not finish, daily cron: 25 hourly periods, all 25 without a record
  # of the function that ended with its work done (outcome_done: a cron message or a
  # continuation acknowledged; a run whose every attempt fails or crashes counts none).
  # The window is the day plus the hour still open, so yesterday's tick leaves it at the
  # end of the hour that holds today's tick: a missed tick pages 60 - (cron minute)
  # minutes after the cron time, within the hour (CloudWatch allows periods under an hour
  # only for windows up to a day, which leaves no room for the open period). A run that
  # stops finishing pages an hour or so after the time it usually finished. Armed
  # through cutover: while the schedule parameter is off, missing data is not breaching
  # (the alarm sits in OK, actions on); switched on, missing data breaches, so the first
  # missed run is a change OK -> ALARM and pages. Tick the cron once (hk tick) before
  # switching it on, or it pages at once for the day without a run
  # (docs/runbook.md#missed-run).
"),
        Every::Minutes(n) => format!("  # Did not run or did not finish, */{n} cron: three {period} s periods, all three without
  # an outcome_done = three missed ticks. One late tick (scheduler retry, cold start) or
  # an open current period never pages on its own. Armed through cutover as the daily
  # heartbeats are (missing data breaching only while the schedule is on).
"),
    };
    let window = match every(f) {
        Every::Day => format!("{count} × {period} s without a record that ended with its work done, outcome_done: the day plus the open hour, so a missed tick pages within the hour"),
        Every::Minutes(_) => format!("{count} × {period} s without a record that ended with its work done, outcome_done"),
    };
    out.push_str(&fill(&format!("  @C@HeartbeatAlarm:
    Type: AWS::CloudWatch::Alarm
    Properties:
      AlarmName: !Sub \"${{AWS::StackName}}-@C@HeartbeatAlarm\"
      AlarmDescription: !Sub \"Feeds @C@MissedRunAlarm: @n@ did not run or did not finish within its cron period plus margin ({window}): schedule disabled, scheduler role broken, queue paused, or every attempt failed or crashed. Runbook: ${{RunbookBaseUrl}}#missed-run\"
      Namespace: GitLabHousekeeping
      MetricName: outcome_done
      Dimensions:
        - Name: Service
          Value: !If [HasServiceName, !Ref ServiceName, !Ref AWS::StackName]
        - Name: function
          Value: @n@
      Statistic: Sum
      Period: {period}
      EvaluationPeriods: {count}
      DatapointsToAlarm: {count}
      Threshold: 1
      ComparisonOperator: LessThanThreshold
      TreatMissingData: !If [@C@ScheduleOn, breaching, notBreaching]

  # @n@: its heartbeat, paged through a composite that a stalled stack or a refused schema suppresses.
  @C@MissedRunAlarm:
    Type: AWS::CloudWatch::CompositeAlarm
    Properties:
      AlarmName: !Sub \"${{AWS::StackName}}-@C@MissedRunAlarm\"
      AlarmDescription: !Sub \"Page: @n@ did not run or did not finish within its cron period plus margin (@C@HeartbeatAlarm): schedule disabled or paused, scheduler role broken, queue paused, or every attempt failed. Silent while HousekeepingStalledAlarm or SchemaOrReleaseRefusedAlarm fires (PagesSuppressedAlarm). Runbook: ${{RunbookBaseUrl}}#missed-run\"
      AlarmRule: !Sub \"ALARM(\\\"${{@C@HeartbeatAlarm.Arn}}\\\")\"
      ActionsSuppressor: !GetAtt PagesSuppressedAlarm.Arn
      ActionsSuppressorWaitPeriod: 600
      ActionsSuppressorExtensionPeriod: 3600
      AlarmActions: !If [HasPageTopic, [!Ref PageTopicArn], !Ref AWS::NoValue]
      OKActions: !If [HasPageTopic, [!Ref PageTopicArn], !Ref AWS::NoValue]

  # @n@ failing, for HousekeepingStalledAlarm (no actions of its own).
  @C@FailingAlarm:
    Type: AWS::CloudWatch::CompositeAlarm
    Properties:
      AlarmName: !Sub \"${{AWS::StackName}}-@C@FailingAlarm\"
      AlarmDescription: !Sub \"Feeds HousekeepingStalledAlarm: @n@ is failing (invocation errors, failed records or a missed run). Runbook: ${{RunbookBaseUrl}}#housekeeping-stalled\"
      AlarmRule: !Sub \"ALARM(\\\"${{@C@ErrorsAlarm.Arn}}\\\") OR ALARM(\\\"${{@C@FailedRecordsAlarm.Arn}}\\\") OR ALARM(\\\"${{@C@HeartbeatAlarm.Arn}}\\\")\"

"), f));
    out
}

/// SchemaRefusedAlarm (the first ten functions) and SchemaRefused2Alarm (the rest):
/// CloudWatch reads at most ten metrics in an alarm.
pub(crate) fn schema_alarms() -> String {
    let functions: Vec<Function> = all().collect();
    assert!(
        functions.len() > 10 && functions.len() <= 20,
        "{} functions: SchemaRefusedAlarm and SchemaRefused2Alarm hold 11 to 20; add \
         SchemaRefused3Alarm (infra/gen/src/stack.rs) and its SchemaOrReleaseRefusedAlarm rule",
        functions.len()
    );
    let alarm = |logical: &str, label: &str, chunk: &[Function]| {
        let sum = (0..chunk.len())
            .map(|i| format!("FILL(s{i}, 0)"))
            .collect::<Vec<_>>()
            .join(" + ");
        let mut out = format!("  {logical}:
    Type: AWS::CloudWatch::Alarm
    Properties:
      AlarmName: !Sub \"${{AWS::StackName}}-{logical}\"
      AlarmDescription: !Sub \"Feeds SchemaOrReleaseRefusedAlarm: a function refused the database schema at cold start (schema_incompatible > 0 in 5 minutes): GitLab was upgraded past the supported range or a migration is half done; nothing is processed until it matches. Runbook: ${{RunbookBaseUrl}}#schema-refused\"
      Metrics:
        - Id: refused
          Label: {label}
          ReturnData: true
          Expression: {sum}
");
        for (i, f) in chunk.iter().enumerate() {
            out.push_str(&format!(
                "        - Id: s{i}
          ReturnData: false
          MetricStat:
            Metric:
              Namespace: GitLabHousekeeping
              MetricName: schema_incompatible
              Dimensions:
                - Name: Service
                  Value: !If [HasServiceName, !Ref ServiceName, !Ref AWS::StackName]
                - Name: function
                  Value: {}
            Period: 300
            Stat: Sum
",
                f.name()
            ));
        }
        out.push_str(
            "      EvaluationPeriods: 1
      Threshold: 0
      ComparisonOperator: GreaterThanThreshold
      TreatMissingData: notBreaching

",
        );
        out
    };
    let mut out = alarm(
        "SchemaRefusedAlarm",
        "cold starts refused (all functions)",
        &functions[..10],
    );
    out.push_str(
        "  # The functions past the tenth (an alarm reads at most ten metrics): the same page.\n",
    );
    out.push_str(&alarm(
        "SchemaRefused2Alarm",
        "cold starts refused (functions 11 and on)",
        &functions[10..],
    ));
    out
}

/// Any two crons failing at once, not explained by the schema.
pub(crate) fn housekeeping_stalled() -> String {
    let crons: Vec<Function> = crons().collect();
    let mut pairs = Vec::new();
    for (i, a) in crons.iter().enumerate() {
        for b in &crons[i + 1..] {
            pairs.push(format!(
                "(ALARM(\\\"${{{}FailingAlarm.Arn}}\\\") AND ALARM(\\\"${{{}FailingAlarm.Arn}}\\\"))",
                camel(a.name()),
                camel(b.name())
            ));
        }
    }
    format!("  HousekeepingStalledAlarm:
    Type: AWS::CloudWatch::CompositeAlarm
    Properties:
      AlarmName: !Sub \"${{AWS::StackName}}-HousekeepingStalledAlarm\"
      AlarmDescription: !Sub \"Page: two or more cron functions are failing at once (errors, failed records or missed runs) and the schema is not the cause: the database, the network path to it (VPC, security groups, NAT or endpoints) or the secret is the likely cause. While it fires, the missed-run and stuck-worker pages are suppressed. Runbook: ${{RunbookBaseUrl}}#housekeeping-stalled\"
      AlarmRule: !Sub \"({}) AND NOT ALARM(\\\"${{SchemaOrReleaseRefusedAlarm.Arn}}\\\")\"
      AlarmActions: !If [HasPageTopic, [!Ref PageTopicArn], !Ref AWS::NoValue]
      OKActions: !If [HasPageTopic, [!Ref PageTopicArn], !Ref AWS::NoValue]
", pairs.join(" OR "))
}

pub(crate) fn outputs() -> String {
    all()
        .map(|f| {
            fill(
                "  @C@QueueUrl:\n    Value: !Ref @C@Queue\n  @C@DLQUrl:\n    Value: !Ref @C@DLQ\n",
                f,
            )
        })
        .collect()
}

/// The dashboard: one row of seven units per function (table order), then the rows
/// of the notifications and of storage.
pub(crate) fn dashboard() -> String {
    let mut widgets = Vec::new();
    let mut y = 0;
    for f in all() {
        let t = f.timeout().as_secs();
        let kind = match f.cron().map(|_| every(f)) {
            Some(Every::Day) => "cron daily".to_string(),
            Some(Every::Minutes(n)) => format!("cron {n}min"),
            None => "worker".to_string(),
        };
        widgets.push(format!("          {{\"type\": \"text\", \"x\": 0, \"y\": {y}, \"width\": 24, \"height\": 1, \"properties\": {{\"markdown\": \"## {} ({kind}) · timeout {t} s · runbook: docs/runbook.md\"}}}}", f.name()));
        let runs = if f.cron().is_some() {
            PANEL_RUNS_CRON
        } else {
            PANEL_RUNS_WORKER
        };
        let failed = if FAILED.emitted_by(f) {
            PANEL_FAILED_ITEMS
        } else {
            PANEL_FAILED
        };
        let alarm_ms = (t * 800).max((t - 30) * 1000);
        for panel in [
            runs,
            PANEL_OUTCOMES,
            failed,
            PANEL_QUEUE,
            PANEL_DLQ,
            PANEL_DURATION,
        ] {
            widgets.push(
                fill(panel, f)
                    .replace("@Y@", &(y + 1).to_string())
                    .replace("@TMS@", &(t * 1000).to_string())
                    .replace("@AMS@", &alarm_ms.to_string()),
            );
        }
        y += 7;
    }
    for row in EXTRA_ROWS {
        let mut w = row.to_string();
        for n in 0..10 {
            w = w.replace(&format!("@Y{n}@"), &(y + n).to_string());
        }
        widgets.push(w);
    }
    let mut out = String::from(
        "  Dashboard:
    Type: AWS::CloudWatch::Dashboard
    Properties:
      DashboardName: !Sub ${AWS::StackName}-housekeeping
      DashboardBody: !Sub
        - |
          {\"widgets\": [
",
    );
    for (i, w) in widgets.iter().enumerate() {
        out.push_str(w);
        out.push_str(if i + 1 < widgets.len() { ",\n" } else { "\n" });
    }
    out.push_str(
        "          ]}
        - Service: !If [HasServiceName, !Ref ServiceName, !Ref AWS::StackName]
",
    );
    out
}

// The panels of a function's row (`@C@`, `@n@`, `@Y@` = the row's panel line,
// `@TMS@` = the timeout and `@AMS@` = the duration alarm, in ms).
const PANEL_RUNS_CRON: &str = r###"          {"type": "metric", "x": 0, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "Runs and records", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "run_started", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "runs started"}], ["GitLabHousekeeping", "records", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "records"}]]}}"###;
const PANEL_RUNS_WORKER: &str = r###"          {"type": "metric", "x": 0, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "Runs and records", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "records", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "records"}]]}}"###;
const PANEL_OUTCOMES: &str = r###"          {"type": "metric", "x": 4, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "Records by outcome", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "outcome_done", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "done"}], ["GitLabHousekeeping", "outcome_stale", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "stale"}], ["GitLabHousekeeping", "outcome_skipped", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "skipped"}], ["GitLabHousekeeping", "outcome_retryable", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "retryable"}], ["GitLabHousekeeping", "outcome_permanent", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "permanent"}], ["GitLabHousekeeping", "outcome_panic", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "panic"}], ["GitLabHousekeeping", "outcome_deadline", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "deadline"}]], "stacked": true}}"###;
const PANEL_FAILED_ITEMS: &str = r###"          {"type": "metric", "x": 8, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "Failed records and items", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "records_failed", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "records_failed"}], ["GitLabHousekeeping", "failed", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "items failed"}], ["GitLabHousekeeping", "items", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "items attempted", "yAxis": "right"}]]}}"###;
const PANEL_FAILED: &str = r###"          {"type": "metric", "x": 8, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "Failed records", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "records_failed", "Service", "${Service}", "function", "@n@", {"stat": "Sum", "label": "records_failed"}]]}}"###;
const PANEL_QUEUE: &str = r###"          {"type": "metric", "x": 12, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "Queue depth and oldest message", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${@C@Queue.QueueName}", {"stat": "Maximum", "label": "visible"}], ["AWS/SQS", "ApproximateNumberOfMessagesNotVisible", "QueueName", "${@C@Queue.QueueName}", {"stat": "Maximum", "label": "in flight"}], ["AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", "${@C@Queue.QueueName}", {"stat": "Maximum", "label": "oldest (s)", "yAxis": "right"}]]}}"###;
const PANEL_DLQ: &str = r###"          {"type": "metric", "x": 16, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "DLQ depth", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", "${@C@DLQ.QueueName}", {"stat": "Maximum", "label": "DLQ"}]]}}"###;
const PANEL_DURATION: &str = r###"          {"type": "metric", "x": 20, "y": @Y@, "width": 4, "height": 6, "properties": {"title": "Duration against timeout (ms)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["AWS/Lambda", "Duration", "FunctionName", "${@C@Function}", {"stat": "Maximum", "label": "max"}], ["AWS/Lambda", "Duration", "FunctionName", "${@C@Function}", {"stat": "p50", "label": "p50"}]], "annotations": {"horizontal": [{"label": "timeout", "value": @TMS@}, {"label": "alarm", "value": @AMS@}]}}}"###;
/// The rows after the functions' (mail and web hooks; storage), `@Yn@` = first free row + n.
const EXTRA_ROWS: &[&str] = &[
    r###"          {"type": "text", "x": 0, "y": @Y0@, "width": 24, "height": 1, "properties": {"markdown": "## Notifications (deliver-notification)"}}"###,
    r###"          {"type": "metric", "x": 0, "y": @Y1@, "width": 12, "height": 6, "properties": {"title": "Mails: sent / failed temporarily / failed permanently", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "mails_sent", "Service", "${Service}", "function", "deliver-notification", {"stat": "Sum", "label": "sent"}], ["GitLabHousekeeping", "mails_failed_temporary", "Service", "${Service}", "function", "deliver-notification", {"stat": "Sum", "label": "failed, retried"}], ["GitLabHousekeeping", "mails_failed_permanent", "Service", "${Service}", "function", "deliver-notification", {"stat": "Sum", "label": "failed for good"}]]}}"###,
    r###"          {"type": "metric", "x": 12, "y": @Y1@, "width": 12, "height": 6, "properties": {"title": "Web hooks: sent / refused / failed temporarily / failed permanently", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "webhooks_sent", "Service", "${Service}", "function", "deliver-notification", {"stat": "Sum", "label": "sent"}], ["GitLabHousekeeping", "webhooks_refused", "Service", "${Service}", "function", "deliver-notification", {"stat": "Sum", "label": "refused (SSRF guard)"}], ["GitLabHousekeeping", "webhooks_failed_temporary", "Service", "${Service}", "function", "deliver-notification", {"stat": "Sum", "label": "failed, retried"}], ["GitLabHousekeeping", "webhooks_failed_permanent", "Service", "${Service}", "function", "deliver-notification", {"stat": "Sum", "label": "failed for good"}]]}}"###,
    r###"          {"type": "text", "x": 0, "y": @Y7@, "width": 24, "height": 1, "properties": {"markdown": "## Storage (group-destroy sends, storage-cleanup removes) · runbook: docs/runbook.md#storage-cleanup"}}"###,
    r###"          {"type": "metric", "x": 0, "y": @Y8@, "width": 6, "height": 6, "properties": {"title": "Git repositories (Gitaly)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "gitaly_removed", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "removed"}], ["GitLabHousekeeping", "gitaly_already_gone", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "already gone"}], ["GitLabHousekeeping", "gitaly_failed", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "failed (re-sent, then DLQ)"}]]}}"###,
    r###"          {"type": "metric", "x": 6, "y": @Y8@, "width": 6, "height": 6, "properties": {"title": "Container repositories (registry)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "registry_removed", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "removed"}], ["GitLabHousekeeping", "registry_already_gone", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "already gone"}], ["GitLabHousekeeping", "registry_failed", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "failed (re-sent, then DLQ)"}]]}}"###,
    r###"          {"type": "metric", "x": 12, "y": @Y8@, "width": 6, "height": 6, "properties": {"title": "Objects (S3)", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "objects_removed", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "removed"}], ["GitLabHousekeeping", "objects_already_gone", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "already gone"}], ["GitLabHousekeeping", "objects_failed", "Service", "${Service}", "function", "storage-cleanup", {"stat": "Sum", "label": "failed (re-sent, then DLQ)"}]]}}"###,
    r###"          {"type": "metric", "x": 18, "y": @Y8@, "width": 6, "height": 6, "properties": {"title": "group-destroy: items sent / left in place", "region": "${AWS::Region}", "view": "timeSeries", "period": 300, "metrics": [["GitLabHousekeeping", "storage_items_sent", "Service", "${Service}", "function", "group-destroy", {"stat": "Sum", "label": "sent to storage-cleanup"}], ["GitLabHousekeeping", "storage_items_left", "Service", "${Service}", "function", "group-destroy", {"stat": "Sum", "label": "left (mode leave)"}]]}}"###,
];
