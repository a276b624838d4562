//! The resources of one function in `infra/template.yaml` (region `functions`), from
//! its row: queue and DLQ (visibility 6 × timeout), log group, the SAM function
//! (environment and least-privilege IAM from `sends_to` and `needs`, the mapping's
//! batch size and concurrency), the cron schedule, and its alarms: errors, DLQ,
//! failed records, queue age, throttles, duration (thresholds from the timeout); a
//! cron's heartbeat, missed-run page and failing composite; a worker's
//! all-records-failed ticket.
//!
//! Hand-written beside the region: alarms on a function's own metrics (item failures,
//! B43, group-destroy blocked) and a destructive worker's `<Function>StuckAlarm`
//! composite; a function with one gets a DLQ alarm that feeds it instead of a ticket.

use std::path::Path;

use shared::function::Needs;
use shared::Function;

use crate::{camel, every, Every};

/// Every function's resources, in table order.
pub(crate) fn all(root: &Path) -> String {
    let template = std::fs::read_to_string(root.join("infra/template.yaml"))
        .unwrap_or_else(|e| panic!("cannot read infra/template.yaml: {e}"));
    let mut out = String::new();
    for f in Function::ALL.iter().copied() {
        let stuck = template.contains(&format!("  {}StuckAlarm:\n", camel(f.name())));
        let own_doc = root.join(format!("docs/{}.md", f.name())).exists();
        out.push_str(&resources(f, stuck, own_doc));
    }
    out
}

/// `text` with `@C@` (logical stem), `@n@` (name), `@E@` (environment suffix) and
/// `@T@` (timeout in seconds) filled in.
fn fill(text: &str, f: Function) -> String {
    text.replace("@C@", &camel(f.name()))
        .replace("@n@", f.name())
        .replace("@E@", &f.env_suffix())
        .replace("@T@", &f.timeout().as_secs().to_string())
}

const TAGS: &str =
    "        - {Key: Service, Value: !If [HasServiceName, !Ref ServiceName, !Ref AWS::StackName]}
        - {Key: Environment, Value: !Ref EnvironmentTag}
        - {Key: Owner, Value: !Ref OwnerTag}
";

const SQS_CHECKOV: &str = "    Metadata:
      checkov:
        skip:
          - id: CKV_AWS_27
            comment: Encrypted at rest with SSE-SQS (SqsManagedSseEnabled); checkov only recognises KmsMasterKeyId. Messages carry ids and keys only, never secrets (behaviour §9.11).
";

const TICKET: &str =
    "      AlarmActions: !If [HasTicketTopic, [!Ref TicketTopicArn], !Ref AWS::NoValue]\n";

const SERVICE_DIMENSIONS: &str = "      Dimensions:
        - Name: Service
          Value: !If [HasServiceName, !Ref ServiceName, !Ref AWS::StackName]
        - Name: function
          Value: @n@
";

fn resources(f: Function, stuck: bool, own_doc: bool) -> String {
    let t = f.timeout().as_secs();
    let mut out = format!(
        "  # ---------------------------------------------------------------- {}\n",
        f.name()
    );
    out.push_str(&fill("  @C@DLQ:\n    Type: AWS::SQS::Queue\n", f));
    out.push_str(SQS_CHECKOV);
    out.push_str(&fill(
        "    Properties:
      QueueName: !Sub ${AWS::StackName}-@n@-dlq
      MessageRetentionPeriod: 1209600
      Tags:
",
        f,
    ));
    out.push_str(TAGS);
    out.push_str(&fill(
        "      SqsManagedSseEnabled: true
      RedriveAllowPolicy:
        redrivePermission: byQueue
        sourceQueueArns:
          - !Sub arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${AWS::StackName}-@n@

  # Visibility 6 × the timeout (AWS's advice for SQS event sources).
  @C@Queue:
    Type: AWS::SQS::Queue
",
        f,
    ));
    out.push_str(SQS_CHECKOV);
    out.push_str(&fill(
        &format!(
            "    Properties:
      QueueName: !Sub ${{AWS::StackName}}-@n@
      VisibilityTimeout: {}
      MessageRetentionPeriod: 345600
      Tags:
",
            6 * t
        ),
        f,
    ));
    out.push_str(TAGS);
    out.push_str(&fill(
        "      SqsManagedSseEnabled: true
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt @C@DLQ.Arn
        maxReceiveCount: 5

  @C@LogGroup:
    Type: AWS::Logs::LogGroup
    Metadata:
      checkov:
        skip:
          - id: CKV_AWS_158
            comment: CloudWatch Logs encrypts every log group at rest with its service key; the lines carry ids, keys and counts, never secrets or email addresses (behaviour §8), so a customer KMS key would add cost and a key policy to run, not protection.
    Properties:
      LogGroupName: !Sub /aws/lambda/${AWS::StackName}/@n@
      RetentionInDays: !Ref LogRetentionDays
      Tags:
",
        f,
    ));
    out.push_str(TAGS);
    out.push('\n');
    out.push_str(&lambda(f, own_doc));
    if let Some(cron) = f.cron() {
        out.push_str(&schedule(f, cron));
    }
    out.push_str(&alarms(f, t, stuck));
    out
}

/// The `AWS::Serverless::Function` resource.
fn lambda(f: Function, own_doc: bool) -> String {
    let needs = f.needs();
    let secrets = if needs.contains(&Needs::StorageClients) {
        "the Gitaly token and the registry key are read from Secrets Manager"
    } else {
        "credentials, the SMTP password and db_key_base are read from Secrets Manager"
    };
    let doc = if own_doc { "@n@" } else { "behaviour" };
    let mut out = fill(&format!("  @C@Function:
    Type: AWS::Serverless::Function
    Metadata:
      # sam build runs infra/Makefile's build-<LogicalId>: scripts/package-lambdas.sh for
      # this function (vendored OpenSSL) plus the CA bundle; CodeUri is the crate.
      BuildMethod: makefile
      ContextPath: .
      checkov:
        skip:
          - id: CKV_AWS_116
            comment: Invoked synchronously by its SQS event source mapping, so a function DLQ (async invocations only) would never receive anything; failed messages go to the source queue's redrive DLQ after maxReceiveCount 5.
          - id: CKV_AWS_173
            comment: No secret in the environment (names, URLs and ARNs only; {secrets}); Lambda encrypts variables at rest with its AWS managed key.
    Properties:
      CodeUri: ../functions/@n@/
      Description: @n@ (see docs/{doc}.md)
      Timeout: @T@
      LoggingConfig:
        LogGroup: !Ref @C@LogGroup
"), f);
    if f.sends_to().contains(&f) {
        out.push_str(
            "      RecursiveLoop: Allow  # sends to itself (continuation or re-send); MAX_HOPS guards the chain (behaviour §9.8)\n",
        );
    }
    let mut env = String::new();
    let delays = needs.contains(&Needs::DelaySchedules);
    for to in f.sends_to() {
        env.push_str(&fill("          QUEUE_URL_@E@: !Ref @C@Queue\n", *to));
        if delays {
            env.push_str(&fill(
                "          QUEUE_ARN_@E@: !GetAtt @C@Queue.Arn\n          DLQ_ARN_@E@: !GetAtt @C@DLQ.Arn\n",
                *to,
            ));
        }
    }
    for need in needs {
        env.push_str(environment(*need));
    }
    if !env.is_empty() {
        out.push_str("      Environment:\n        Variables:\n");
        out.push_str(&env);
    }
    out.push_str(
        "      Policies:
        - !If
          - HasSecretsKmsKey
          - Statement:
              - Effect: Allow
                Action: kms:Decrypt
                Resource: !Ref SecretsKmsKeyArn
                Condition:
                  StringEquals:
                    kms:ViaService: !Sub secretsmanager.${AWS::Region}.amazonaws.com
          - !Ref AWS::NoValue
        - AWSSecretsManagerGetSecretValuePolicy:
            SecretArn: !Ref DatabaseSecretArn
",
    );
    for need in needs {
        out.push_str(secret_policies(*need));
    }
    for to in f.sends_to() {
        out.push_str(&fill(
            "        - SQSSendMessagePolicy:\n            QueueName: !GetAtt @C@Queue.QueueName\n",
            *to,
        ));
    }
    if delays {
        out.push_str(
            "        - Version: \"2012-10-17\"
          Statement:
            - Effect: Allow
              Action: scheduler:CreateSchedule
              Resource: !Sub arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}:schedule/${SchedulerGroup}/*
            - Effect: Allow
              Action: iam:PassRole
              Resource: !GetAtt SchedulerRole.Arn
",
        );
    }
    out.push_str(&fill(
        &format!(
            "      Events:
        Queue:
          Type: SQS
          Properties:
            Queue: !GetAtt @C@Queue.Arn
            Enabled: !If [@C@MappingOn, true, false]
            BatchSize: {}
            FunctionResponseTypes: [ReportBatchItemFailures]
",
            f.batch_size()
        ),
        f,
    ));
    if f.single_flight() {
        out.push_str(
            "            ScalingConfig:
              MaximumConcurrency: 2  # the overlap lock, not this, is what serializes runs
",
        );
    }
    out.push('\n');
    out
}

/// The environment variables a [`Needs`] brings (each from its template parameter).
fn environment(need: Needs) -> &'static str {
    match need {
        Needs::DelaySchedules => {
            "          SCHEDULER_GROUP_NAME: !Ref SchedulerGroup
          SCHEDULER_ROLE_ARN: !GetAtt SchedulerRole.Arn
"
        }
        Needs::StorageModes => {
            "          STORAGE_GITALY: !Ref StorageGitaly
          STORAGE_REGISTRY: !Ref StorageRegistry
          STORAGE_OBJECTS: !Ref StorageObjects
"
        }
        Needs::StorageClients => {
            "          GITLAB_INSTANCE_UUID: !Ref GitlabInstanceUuid
          GITALY_ADDRESSES: !Ref GitalyAddresses
          GITALY_TOKEN_SECRET_ARN: !Ref GitalyTokenSecretArn
          GITALY_TIMEOUT_S: !Ref GitalyTimeoutSeconds
          REGISTRY_API_URL: !Ref RegistryApiUrl
          REGISTRY_ISSUER: !Ref RegistryIssuer
          REGISTRY_SERVICE: !Ref RegistryService
          REGISTRY_KEY_SECRET_ARN: !Ref RegistryKeySecretArn
          REGISTRY_CA_BUNDLE: !Ref RegistryCaBundlePath
          REGISTRY_TIMEOUT_S: !Ref RegistryTimeoutSeconds
          OBJECT_STORAGE_BUCKET_UPLOADS: !Ref ObjectStorageBucketUploads
          OBJECT_STORAGE_BUCKET_LFS: !Ref ObjectStorageBucketLfs
          OBJECT_STORAGE_BUCKET_PACKAGES: !Ref ObjectStorageBucketPackages
"
        }
        Needs::GitlabLinks => {
            "          GITLAB_BASE_URL: !Ref GitlabBaseUrl
          GITLAB_SSH_URL_PREFIX: !Ref GitlabSshUrlPrefix
"
        }
        Needs::MailAndHooks => {
            "          GITLAB_BASE_URL: !Ref GitlabBaseUrl
          GITLAB_VERSION: !Ref GitlabVersion
          EMAIL_TRANSPORT: smtp
          SMTP_HOST: !Ref SmtpHost
          SMTP_PORT: !Ref SmtpPort
          SMTP_TLS: !Ref SmtpTls
          MAIL_FROM: !Ref MailFrom
          SMTP_USERNAME: !Ref SmtpUsername
          SMTP_SECRET_ARN: !Ref SmtpSecretArn
          GITLAB_DB_KEY_BASE_SECRET_ARN: !Ref GitlabDbKeyBaseSecretArn
          SMTP_CA_BUNDLE: !Ref SmtpCaBundlePath
          WEBHOOK_TIMEOUT_S: !Ref WebhookTimeoutSeconds
          WEBHOOK_ALLOW_LOCAL_NETWORK: !Ref WebhookAllowLocalNetwork
          WEBHOOK_LOG_HOST: !Ref WebhookLogHost
"
        }
    }
}

/// The IAM statement of one object storage bucket parameter.
macro_rules! bucket {
    ($b:literal) => {
        concat!(
            "        - !If
          - Has",
            $b,
            "Bucket
          - Statement:
              - Effect: Allow
                Action: [s3:GetObject, s3:DeleteObject]
                Resource: !Sub arn:${AWS::Partition}:s3:::${ObjectStorageBucket",
            $b,
            "}/*
              - Effect: Allow
                Action: s3:ListBucket
                # The bucket of a `name/prefix` value (GitLab's bucket_prefix).
                Resource: !Sub
                  - arn:${AWS::Partition}:s3:::${Bucket}
                  - Bucket: !Select [0, !Split [\"/\", !Ref ObjectStorageBucket",
            $b,
            "]]
          - !Ref AWS::NoValue
"
        )
    };
}

/// The IAM a [`Needs`] brings before the queue policies: its secrets and buckets.
fn secret_policies(need: Needs) -> &'static str {
    match need {
        Needs::DelaySchedules | Needs::StorageModes | Needs::GitlabLinks => "",
        Needs::StorageClients => concat!(
            "        - !If
          - HasGitalyTokenSecret
          - AWSSecretsManagerGetSecretValuePolicy:
              SecretArn: !Ref GitalyTokenSecretArn
          - !Ref AWS::NoValue
        - !If
          - HasRegistryKeySecret
          - AWSSecretsManagerGetSecretValuePolicy:
              SecretArn: !Ref RegistryKeySecretArn
          - !Ref AWS::NoValue
        # Objects of the configured buckets only: a one-byte GET probes (GetObject), then
        # DeleteObject. ListBucket on the bucket itself: without it S3 answers a missing
        # key with AccessDenied, not NoSuchKey, and an item already gone would fail.
",
            bucket!("Uploads"),
            bucket!("Lfs"),
            bucket!("Packages"),
        ),
        Needs::MailAndHooks => {
            "        - !If
          - HasDbKeyBase
          - AWSSecretsManagerGetSecretValuePolicy:
              SecretArn: !Ref GitlabDbKeyBaseSecretArn
          - !Ref AWS::NoValue
        - !If
          - HasSmtpSecret
          - AWSSecretsManagerGetSecretValuePolicy:
              SecretArn: !Ref SmtpSecretArn
          - !Ref AWS::NoValue
"
        }
    }
}

/// The recurring schedule that puts the cron message on the function's queue.
fn schedule(f: Function, cron: &str) -> String {
    fill(
        &format!(
            "  @C@Schedule:
    Type: AWS::Scheduler::Schedule
    Properties:
      Description: @n@ cron tick (behaviour §9.7)
      GroupName: !Ref SchedulerGroup
      ScheduleExpression: \"{cron}\"
      ScheduleExpressionTimezone: UTC
      FlexibleTimeWindow:
        Mode: \"OFF\"
      State: !If [@C@ScheduleOn, ENABLED, DISABLED]
      Target:
        Arn: !GetAtt @C@Queue.Arn
        RoleArn: !GetAtt SchedulerRole.Arn
        Input: '{{\"version\":1,\"type\":\"{run}\",\"message_key\":\"@n@:cron:<aws.scheduler.scheduled-time>\",\"run_id\":\"<aws.scheduler.execution-id>\",\"hop\":0,\"issued_at\":\"<aws.scheduler.scheduled-time>\",\"payload\":{{}}}}'
        RetryPolicy:
          MaximumRetryAttempts: 10
          MaximumEventAgeInSeconds: 3600
        DeadLetterConfig:
          Arn: !GetAtt @C@DLQ.Arn

",
            run = f.run_type()
        ),
        f,
    )
}

/// A metric alarm's head: logical ID, name and description.
fn alarm_head(f: Function, suffix: &str, description: &str) -> String {
    fill(
        &format!(
            "  @C@{suffix}:
    Type: AWS::CloudWatch::Alarm
    Properties:
      AlarmName: !Sub \"${{AWS::StackName}}-@C@{suffix}\"
      AlarmDescription: !Sub \"{description}\"
"
        ),
        f,
    )
}

/// A one-period alarm's tail.
fn alarm_tail(statistic: &str, threshold: u64, comparison: &str) -> String {
    format!(
        "      Statistic: {statistic}
      Period: 300
      EvaluationPeriods: 1
      Threshold: {threshold}
      ComparisonOperator: {comparison}
      TreatMissingData: notBreaching
"
    )
}

fn alarms(f: Function, t: u64, stuck: bool) -> String {
    let mut out = alarm_head(f, "ErrorsAlarm", "Ticket: @n@ invocations failed as a whole (crash, timeout, out of memory, refused cold start), where no per-record metric may be written. Runbook: ${RunbookBaseUrl}#function-errors");
    out.push_str(&fill("      Namespace: AWS/Lambda\n      MetricName: Errors\n      Dimensions:\n        - Name: FunctionName\n          Value: !Ref @C@Function\n", f));
    out.push_str(&alarm_tail("Sum", 1, "GreaterThanOrEqualToThreshold"));
    out.push_str(TICKET);
    out.push('\n');
    let dlq_head = if stuck {
        "Feeds @C@StuckAlarm"
    } else {
        "Ticket"
    };
    out.push_str(&alarm_head(f, "DLQAlarm", &format!("{dlq_head}: @n@ has messages in its dead-letter queue (replay with hk replay). Runbook: ${{RunbookBaseUrl}}#dlq-not-empty")));
    out.push_str(&fill("      Namespace: AWS/SQS\n      MetricName: ApproximateNumberOfMessagesVisible\n      Dimensions:\n        - Name: QueueName\n          Value: !GetAtt @C@DLQ.QueueName\n", f));
    out.push_str(&alarm_tail("Maximum", 0, "GreaterThanThreshold"));
    if !stuck {
        out.push_str(TICKET);
    }
    out.push('\n');
    out.push_str(&alarm_head(f, "FailedRecordsAlarm", "Ticket: @n@ reported at least one failed record in 5 minutes (it will be redelivered, then dead-lettered). Runbook: ${RunbookBaseUrl}#failed-records"));
    out.push_str("      Namespace: GitLabHousekeeping\n      MetricName: records_failed\n");
    out.push_str(&fill(SERVICE_DIMENSIONS, f));
    out.push_str(&alarm_tail("Sum", 0, "GreaterThanThreshold"));
    out.push_str(TICKET);
    out.push('\n');
    let age = t + 900 + 300;
    out.push_str(&format!(
        "  # Healthy, the oldest message is at most one invocation old (timeout {t} s) plus the
  # longest SQS delay a continuation or retry carries (900 s, behaviour §9.5), plus one
  # 300 s alarm period: older means nothing consumes the queue (mapping paused,
  # throttled, failing) or a record is being retried (6 × timeout visibility).
"
    ));
    out.push_str(&alarm_head(f, "QueueAgeAlarm", &format!("Ticket: The oldest message on @n@'s queue is older than {age} s (timeout + 900 s delay + 300 s): the consumer is stuck, paused, throttled or retrying. Runbook: ${{RunbookBaseUrl}}#queue-age")));
    out.push_str(&fill("      Namespace: AWS/SQS\n      MetricName: ApproximateAgeOfOldestMessage\n      Dimensions:\n        - Name: QueueName\n          Value: !GetAtt @C@Queue.QueueName\n", f));
    out.push_str(&alarm_tail("Maximum", age, "GreaterThanThreshold"));
    out.push_str(TICKET);
    out.push('\n');
    out.push_str("  # Any throttle makes a ticket: a throttled SQS batch spends one of the message's 5 receives and
  # waits out the visibility timeout (6 × the function timeout) before the next try.
");
    out.push_str(&alarm_head(f, "ThrottlesAlarm", "Ticket: @n@ was throttled (reserved concurrency reached): each throttle costs a message one of its 5 receives. Runbook: ${RunbookBaseUrl}#throttles"));
    out.push_str(&fill("      Namespace: AWS/Lambda\n      MetricName: Throttles\n      Dimensions:\n        - Name: FunctionName\n          Value: !Ref @C@Function\n", f));
    out.push_str(&alarm_tail("Sum", 0, "GreaterThanThreshold"));
    out.push_str(TICKET);
    out.push('\n');
    let ms = (t * 800).max((t - 30) * 1000);
    out.push_str(
        "  # The deadline guard stops starting items DEADLINE_MARGIN_S (60 s) before the timeout,
  # so a busy deadline-driven run ends at 80-90 % of the timeout by design; an alarm at
  # 80 % would fire on normal nights. Threshold: the larger of 80 % of the timeout and
  # timeout - 30 s (half the margin): an item overran the guard by more than 30 s, and
  # the next such item is killed at the timeout and redelivered.
",
    );
    out.push_str(&alarm_head(f, "DurationAlarm", &format!("Ticket: An invocation of @n@ ran longer than {ms} ms of its {t} s timeout (the larger of 80 % and timeout - 30 s): one item overran the deadline guard (DEADLINE_MARGIN_S) and the next may be killed at the timeout. Runbook: ${{RunbookBaseUrl}}#duration")));
    out.push_str(&fill("      Namespace: AWS/Lambda\n      MetricName: Duration\n      Dimensions:\n        - Name: FunctionName\n          Value: !Ref @C@Function\n", f));
    out.push_str(&alarm_tail("Maximum", ms, "GreaterThanThreshold"));
    out.push_str(TICKET);
    out.push('\n');
    if f.cron().is_some() {
        out.push_str(&crate::stack::cron_alarms(f));
    } else {
        out.push_str(&all_records_failed(f));
    }
    out
}

/// A worker whose every record failed (a worker has no heartbeat).
fn all_records_failed(f: Function) -> String {
    let metric = |id: &str, name: &str| {
        fill(
            &format!(
                "        - Id: {id}
          ReturnData: false
          MetricStat:
            Metric:
              Namespace: GitLabHousekeeping
              MetricName: {name}
              Dimensions:
                - Name: Service
                  Value: !If [HasServiceName, !Ref ServiceName, !Ref AWS::StackName]
                - Name: function
                  Value: @n@
            Period: 300
            Stat: Sum
"
            ),
            f,
        )
    };
    let mut out = String::from(
        "  # A worker whose every record failed (the workers have no cron heartbeat): three
  # 5-minute periods in a row in which records arrived and all of them were reported as
  # failed. One failed record is retried after the visibility timeout (6 × the function
  # timeout, an hour or more), so a single retried failure never makes three periods:
  # that is the failed-records ticket. The DLQ page follows after 5 receives.
",
    );
    out.push_str(&alarm_head(f, "AllRecordsFailedAlarm", "Ticket: every record @n@ received in 15 minutes failed (records_failed = records > 0 in three 5-minute periods in a row): the database, a secret or the network is broken for this function. Runbook: ${RunbookBaseUrl}#all-records-failed"));
    out.push_str(
        "      Metrics:
        - Id: share
          Label: failed records / records
          ReturnData: true
          Expression: IF(FILL(records, 0) > 0, FILL(failed, 0) / FILL(records, 0), 0)
",
    );
    out.push_str(&metric("failed", "records_failed"));
    out.push_str(&metric("records", "records"));
    out.push_str(
        "      EvaluationPeriods: 3
      DatapointsToAlarm: 3
      Threshold: 1
      ComparisonOperator: GreaterThanOrEqualToThreshold
      TreatMissingData: notBreaching
",
    );
    out.push_str(TICKET);
    out.push('\n');
    out
}

/// The heartbeat's window: periods of `seconds`, all `count` of them without a run.
pub(crate) fn heartbeat_window(f: Function) -> (u32, u32) {
    match every(f) {
        Every::Minutes(n) => (n * 60, 3),
        Every::Day => (3600, 25),
    }
}
