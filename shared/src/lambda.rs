//! The Lambda glue: the only module that names `lambda_runtime` or `aws_lambda_events`
//! types (behaviour §9.6).
//!
//! Owns: cold-start wiring ([`Environment`], the job's [`crate::job::FromConfig`]), the schema check before the first event
//! ([`SchemaGate`]), an `SqsEvent` turned into one [`deliver`] call per record, in
//! order (the runtime's pipeline, which `hk run` shares: the deadline, the session,
//! its reset), and an `SqsBatchResponse` with partial batch failures from each
//! record's outcome: a record never fails the batch (a missing `messageId` does, as
//! Lambda would anyway).
//! [`run`] and [`run_invoked`] (`hk-check`) are a function binary's whole `main`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::{service_fn, Context, Diagnostic, LambdaEvent};

use crate::aws;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, TransportKind};
use crate::db::{Connector, Session};
use crate::error::Error;
use crate::function::Function;
use crate::gitlab::release;
use crate::job::{FromConfig, Job, Ready};
use crate::metrics;
use crate::preflight;
use crate::queue::sqs::SqsQueue;
use crate::queue::Queue;
use crate::runtime::{deliver, Ending, Handler, Invocation, RecordMeta, RecordOutcome};
use crate::telemetry;

/// What every function builds once per execution environment (its job's own
/// dependencies are its [`crate::job::Job::Deps`], served with it by
/// [`crate::job::Ready`]).
pub struct Environment {
    /// The function.
    pub function: Function,
    /// Its configuration.
    pub config: Config,
    /// The transport.
    pub queue: Arc<dyn Queue>,
    /// The database session kept across warm invocations (shared with the schema
    /// check an on-demand init starts early, [`SchemaGate::start`]).
    pub session: Arc<Session>,
    /// The clock (the system clock in Lambda).
    pub clock: Arc<dyn Clock>,
}

/// An error that fails the whole invocation (never a single record's failure).
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// A record without `messageId` cannot be reported as an item failure.
    #[error("SQS record without messageId")]
    MissingMessageId,
    /// The database schema does not match the statement catalogue: nothing is processed.
    #[error("schema incompatible: {0}")]
    SchemaIncompatible(String),
    /// GitLab's release is outside the tested range and not accepted: nothing is
    /// processed ([`crate::gitlab::release`]).
    #[error("release refused: {0}")]
    ReleaseRefused(String),
}

impl From<InvokeError> for Diagnostic {
    fn from(e: InvokeError) -> Diagnostic {
        Diagnostic {
            error_type: match e {
                InvokeError::MissingMessageId => "InvokeError".into(),
                InvokeError::SchemaIncompatible(_) => "SchemaIncompatible".into(),
                InvokeError::ReleaseRefused(_) => "ReleaseRefused".into(),
            },
            error_message: e.to_string(),
        }
    }
}

impl Environment {
    /// An environment of `function` for `hk`, the benches and the tests: a session
    /// through `connector`, `config`'s settings, the system clock and `queue`.
    pub fn new(
        function: Function,
        config: Config,
        connector: Connector,
        queue: Arc<dyn Queue>,
    ) -> Environment {
        Environment {
            function,
            session: Arc::new(Session::new(connector, function.name())),
            config,
            queue,
            clock: Arc::new(SystemClock),
        }
    }

    /// [`Environment::new`] on `database_url` with [`Config::local`].
    pub fn local(
        function: Function,
        database_url: &str,
        queue: Arc<dyn Queue>,
    ) -> Result<Environment, Error> {
        let config = Config::local(database_url)?;
        let connector = Connector::from_url(database_url)?;
        Ok(Environment::new(function, config, connector, queue))
    }

    /// The same environment reading `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Environment {
        self.clock = clock;
        self
    }

    /// Build the environment of `H`'s function and `H`'s own dependencies from
    /// configuration (cold start). With `early`, the session is opened and the schema
    /// check started ([`SchemaGate::start`]) as soon as the connector is built, so
    /// connecting and the check overlap the AWS clients, the job's dependencies and the
    /// Runtime API's first call (issue 52); every refusal of the configuration is still
    /// returned from here, naming its variable.
    pub async fn build<H: Job>(
        config: Config,
        early: Option<&SchemaGate>,
    ) -> Result<(Environment, H::Deps), Error> {
        let function = H::FUNCTION;
        if config.transport != TransportKind::Sqs {
            return Err(Error::Config(
                "TRANSPORT=local is for `hk`; a Lambda function needs TRANSPORT=sqs".into(),
            ));
        }
        config.require_queues(function.sends_to())?;
        metrics::set_service(&config.service);
        let env = |k: &str| std::env::var(k).ok();
        // With DATABASE_URL the connector needs no AWS call: it is built first, and the
        // AWS configuration (an HTTPS client) while the session connects.
        let (connector, aws) = match &config.database.source {
            // The secret is re-read (bounded) when the database refuses its credentials:
            // a rotation must not break warm containers (issue 20).
            crate::config::DatabaseSource::SecretArn(arn) => {
                let aws = aws::from_env(env);
                let source = aws::SecretSource::new(aws.clone(), "DATABASE_SECRET_ARN", arn);
                let pg = crate::config::pg_config_from_secret(&source.read().await?)?;
                let connector = Connector::new(pg, &config.database)?.with_secret(Arc::new(source));
                (connector, Some(aws))
            }
            source => (
                Connector::new(aws::database_config(source, None).await?, &config.database)?,
                None,
            ),
        };
        let session = Arc::new(Session::new(connector, function.name()));
        if let Some(gate) = early {
            gate.start(session.clone(), function, config.schema_accepted.clone());
        }
        // The AWS configuration (its HTTPS client) and the queue's clients on a thread of
        // their own: this task yields meanwhile, so the session opening on this
        // current-thread runtime goes on beside them instead of after them.
        let (aws, sqs, scheduler) = tokio::task::spawn_blocking(move || {
            let aws = aws.unwrap_or_else(|| aws::from_env(env));
            let sqs = aws::sqs_client(&aws, env);
            let scheduler = aws::scheduler_client(&aws, env);
            (aws, sqs, scheduler)
        })
        .await
        .map_err(|e| Error::Invariant(format!("building the AWS clients: {e}")))?;
        let queue = SqsQueue::new(
            sqs,
            scheduler,
            config.queues.clone(),
            config.scheduler.clone(),
            Arc::new(SystemClock),
        );
        let job_deps = <H::Deps as FromConfig>::build(&config, &aws).await?;
        Ok((
            Environment {
                function,
                session,
                config,
                queue: Arc::new(queue),
                clock: Arc::new(SystemClock),
            },
            job_deps,
        ))
    }
}

/// The cold-start schema check: GitLab's release must be in the tested range or
/// accepted ([`crate::gitlab::release`]), then the statements this function can run
/// must PREPARE ([`crate::preflight`], [`crate::catalogue::for_function`]): two round
/// trips once the session is up (the release read with the schema probes, then every
/// statement at once).
///
/// An incompatible schema fails the whole invocation rather than each record: Lambda's
/// poller backs off on function errors, so the batch stays on the queue, untouched,
/// while the `schema_incompatible` alarm calls an operator (past `maxReceiveCount`
/// receives it reaches the DLQ, and `hk replay dlq` returns it). A pass is kept for the
/// environment's life; a failure is checked again on the next invocation. An
/// on-demand init starts the check early ([`SchemaGate::start`]); the first invocation
/// then awaits that check instead of running its own.
#[derive(Debug, Default)]
pub struct SchemaGate {
    compatible: AtomicBool,
    early: std::sync::Mutex<Option<tokio::task::JoinHandle<Verdict>>>,
}

/// What one schema check found.
#[derive(Debug)]
enum Verdict {
    /// Every statement prepared: kept for the environment's life. The prepared
    /// statements are dropped by [`SchemaGate::check`], so that their Closes go out
    /// with its invocation's first statements rather than alone.
    Passed(Vec<tokio_postgres::Statement>),
    /// The database could not be asked (unreachable, the settings failed): the records
    /// report the outage, and the next invocation checks again.
    Unchecked,
    /// A lock held elsewhere ([`Gate::Busy`]).
    Busy(String),
    /// The release or the schema is refused: nothing is processed.
    Refused(InvokeError),
}

/// Whether this execution environment's init runs right before its first invocation
/// (`AWS_LAMBDA_INITIALIZATION_TYPE` `on-demand`, or unset outside Lambda): only then
/// may init open the session and check the schema for it. A provisioned-concurrency or
/// SnapStart init can precede the first invocation by hours.
pub fn init_is_on_demand() -> bool {
    std::env::var("AWS_LAMBDA_INITIALIZATION_TYPE").map_or(true, |t| t == "on-demand")
}

impl SchemaGate {
    /// A gate that has not checked yet.
    pub fn new() -> SchemaGate {
        SchemaGate::default()
    }

    /// Start the check during an on-demand init, on its own task (issue 52): `session`
    /// connects and is checked while init goes on; the first [`SchemaGate::check`]
    /// awaits this check (and does not ping the session it opened). A check that could
    /// not ask the database is run again by that first invocation, so no record is
    /// processed unchecked.
    pub fn start(&self, session: Arc<Session>, function: Function, accepted: Option<String>) {
        let task =
            tokio::spawn(async move { verdict(&session, function, accepted.as_deref()).await });
        *self.early.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Check the schema unless a previous check passed. An unreachable database says
    /// nothing about the schema (the records report the outage); a lock held elsewhere
    /// ([`preflight::Problem::Busy`]) is [`Gate::Busy`].
    pub async fn check(&self, environment: &Environment) -> Result<Gate, InvokeError> {
        if self.compatible.load(Ordering::Acquire) {
            return Ok(Gate::Open);
        }
        let early = self.early.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = early {
            let found = task.await;
            // Opened by this init, right before this first invocation: no ping.
            environment.session.connected_for_invocation();
            match found {
                Ok(Verdict::Unchecked) | Err(_) => {}
                Ok(v) => return self.settle(v),
            }
        }
        let accepted = environment.config.schema_accepted.as_deref();
        let v = verdict(&environment.session, environment.function, accepted).await;
        self.settle(v)
    }

    /// What `v` lets through; a pass is kept.
    fn settle(&self, v: Verdict) -> Result<Gate, InvokeError> {
        match v {
            Verdict::Passed(prepared) => {
                drop(prepared);
                self.compatible.store(true, Ordering::Release);
                Ok(Gate::Open)
            }
            Verdict::Unchecked => Ok(Gate::Open),
            Verdict::Busy(reason) => Ok(Gate::Busy(reason)),
            Verdict::Refused(e) => Err(e),
        }
    }
}

/// One schema check of `function` on `session` (`accepted`: `SCHEMA_ACCEPTED`), its
/// refusals logged and counted.
async fn verdict(session: &Session, function: Function, accepted: Option<&str>) -> Verdict {
    let failed = {
        let (client, unsettled) = match session.client_unsettled().await {
            Ok(c) => c,
            Err(_) => return Verdict::Unchecked,
        };
        // A new session's settings, the release and the schema probes in one round
        // trip (the settings first: the probes only read the catalogue), then the
        // function's statements in one more, under the settings' lock_timeout
        // (issue 52).
        let settle = async {
            match unsettled {
                Some(s) => s.run(&client).await,
                None => Ok(()),
            }
        };
        let (settled, read, probed) = futures::join!(
            settle,
            release::read(&*client),
            preflight::probe_all(&*client)
        );
        if settled.is_err() {
            // The record's checkout applies them again and reports the failure.
            return Verdict::Unchecked;
        }
        let refusal = match read {
            Err(_) => return Verdict::Unchecked,
            Ok(release::Read::Version(v)) => release::classify(&v, accepted).refusal(&v),
            Ok(release::Read::Empty) => Some(
                "schema_migrations holds no migration version: not a migrated GitLab database"
                    .into(),
            ),
            Ok(release::Read::NoTable) => Some(
                "no schema_migrations: not a GitLab database (check DATABASE_SECRET_ARN)".into(),
            ),
            Ok(release::Read::NotPermitted) => Some(
                "the role may not read schema_migrations, so GitLab's release is unknown: \
                 run the GRANT `hk grants` prints"
                    .into(),
            ),
        };
        if let Some(reason) = refusal {
            tracing::error!(
                function = function.name(),
                error = reason.as_str(),
                error_class = "release_refused",
                "release refused: {reason}; processing nothing, the messages stay on the queue"
            );
            metrics::emit(function, &[(metrics::SCHEMA_INCOMPATIBLE, 1.0)]);
            return Verdict::Refused(InvokeError::ReleaseRefused(reason));
        }
        let Ok((model, has)) = probed else {
            return Verdict::Unchecked;
        };
        let statements = crate::catalogue::for_function(function, model, &has);
        match preflight::prepare_all_kept(&client, &statements).await {
            Ok((failed, prepared)) if failed.is_empty() => return Verdict::Passed(prepared),
            Ok((failed, _)) => failed,
            Err(_) => return Verdict::Unchecked,
        }
    };
    let list = |f: &mut dyn Iterator<Item = &preflight::Incompatible>| {
        f.map(|f| format!("{}::{} ({})", f.module, f.name, f.object))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(busy) = failed
        .iter()
        .find(|f| f.problem == preflight::Problem::Busy)
    {
        let statement = format!("{}::{}", busy.module, busy.name);
        tracing::warn!(
            function = function.name(),
            statement = statement.as_str(),
            error = busy.message.as_str(),
            error_class = "db_busy",
            "database busy: a catalogue statement waited too long for a lock held by \
             another session; the records are retried, the schema check runs again"
        );
        return Verdict::Busy(format!("{statement}: {}", busy.message));
    }
    let statements = list(&mut failed.iter());
    let grants = list(
        &mut failed
            .iter()
            .filter(|f| f.problem == preflight::Problem::Permission),
    );
    tracing::error!(
        function = function.name(),
        failed = failed.len(),
        statements = statements.as_str(),
        permission_denied = grants.as_str(),
        "schema incompatible: catalogue statements do not prepare on this database; \
         processing nothing, the messages stay on the queue (run `hk check`)"
    );
    metrics::emit(function, &[(metrics::SCHEMA_INCOMPATIBLE, 1.0)]);
    Verdict::Refused(InvokeError::SchemaIncompatible(statements))
}

/// What the schema check lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Process the records.
    Open,
    /// Another session holds a lock a catalogue statement needs: return every record
    /// untouched, to be retried (the reason).
    Busy(String),
}

/// [`handle_event_with`] behind the schema check; while the database is busy every
/// record is a retryable item failure, untouched.
pub async fn handle_event_checked<H: Handler>(
    handler: &H,
    environment: &Environment,
    gate: &SchemaGate,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, InvokeError> {
    environment.session.invocation_started();
    match gate.check(environment).await? {
        Gate::Open => handle_records(handler, environment, event).await,
        Gate::Busy(reason) => {
            let sqs = event.payload;
            if sqs.records.iter().any(|r| r.message_id.is_none()) {
                return Err(InvokeError::MissingMessageId);
            }
            let mut response = SqsBatchResponse::default();
            for rec in &sqs.records {
                let id = rec.message_id.clone().expect("checked above");
                let meta = record_meta(rec, id.clone(), &event.context);
                let outcome = RecordOutcome::DatabaseBusy {
                    error: reason.clone(),
                };
                outcome.finish(&Ending::undecoded(environment.function, &meta, 0.0));
                respond(&mut response, id, &outcome);
            }
            Ok(response)
        }
    }
}

/// What the glue knows of record `rec` (its `messageId` is `id`) of the invocation
/// `ctx`.
fn record_meta(rec: &SqsMessage, id: String, ctx: &Context) -> RecordMeta {
    RecordMeta {
        sqs_message_id: Some(id),
        receive_count: rec
            .attributes
            .get("ApproximateReceiveCount")
            .and_then(|c| c.parse().ok())
            .unwrap_or(1),
        aws_request_id: Some(ctx.request_id.clone()),
    }
}

/// Record `id`'s part of the batch response: a batch-item failure unless its outcome
/// acknowledges it.
fn respond(response: &mut SqsBatchResponse, id: String, outcome: &RecordOutcome) {
    if outcome.is_item_failure() {
        response.add_failure(id);
    }
}

/// Time left before Lambda's deadline. A deadline more than a day in the past is not
/// a real one (emulators such as `cargo lambda watch` send a fixed 600000 ms, i.e.
/// 1970): then the function's configured timeout is used, as in `hk`.
fn remaining(deadline_ms: u64, function: Function) -> Duration {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    if deadline_ms.saturating_add(86_400_000) < now_ms {
        tracing::debug!(
            deadline_ms,
            "implausible Lambda deadline; using the function timeout"
        );
        return function.timeout();
    }
    Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

/// Handle one SQS event (one invocation): every record in order through `handler`,
/// failures reported per record.
pub async fn handle_event_with<H: Handler>(
    handler: &H,
    environment: &Environment,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, InvokeError> {
    environment.session.invocation_started();
    handle_records(handler, environment, event).await
}

/// [`handle_event_with`] once the invocation has started: the session is pinged at
/// most once in it (by its first checkout, the schema check's at cold start).
async fn handle_records<H: Handler>(
    handler: &H,
    environment: &Environment,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, InvokeError> {
    let (sqs, ctx) = (event.payload, event.context);
    if sqs.records.iter().any(|r| r.message_id.is_none()) {
        tracing::error!("SQS record without messageId: failing the whole invocation");
        return Err(InvokeError::MissingMessageId);
    }
    let mut response = SqsBatchResponse::default();
    for (i, rec) in sqs.records.iter().enumerate() {
        let id = rec.message_id.clone().expect("checked above");
        let meta = record_meta(rec, id.clone(), &ctx);
        let inv = Invocation::new(
            environment.function,
            environment.clock.now(),
            environment.queue.as_ref(),
            &environment.config.settings,
        )
        .with_deadline(remaining(ctx.deadline, environment.function));
        let body = rec.body.as_deref().unwrap_or("");
        let first = i == 0;
        let outcome = deliver(handler, &inv, &*environment.session, body, &meta, first).await;
        respond(&mut response, id, &outcome);
    }
    Ok(response)
}

/// The error a function binary's `main` returns (Lambda's own), so the binaries
/// never name `lambda_runtime` themselves.
pub type FunctionError = lambda_runtime::Error;

/// The whole `main` of a function binary: [`serve`] with `handler` (e.g.
/// `shared::handlers::DeleteUser`) on a current-thread runtime: records are handled one
/// after another, and it starts faster and smaller (issue 8, footprint).
pub fn run<H: Job>(job: H) -> Result<(), lambda_runtime::Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(job))
}

/// Logs, config, the environment and the job's dependencies, then the runtime loop
/// with the job serving the records.
pub async fn serve<H: Job>(_job: H) -> Result<(), lambda_runtime::Error> {
    let function = H::FUNCTION;
    telemetry::init(telemetry::Sink::Stdout);
    let gate = SchemaGate::new();
    let early = init_is_on_demand().then_some(&gate);
    let built = match Config::from_env() {
        Ok(config) => Environment::build::<H>(config, early).await,
        Err(e) => Err(e),
    };
    let (environment, handler) = match built {
        Ok((environment, job_deps)) => (environment, Ready::<H>::new(job_deps)),
        Err(e) => {
            tracing::error!(function = function.name(), error = %e, error_class = e.class(), "cold start failed");
            return Err(e.into());
        }
    };
    let (environment, handler, gate) = (&environment, &handler, &gate);
    lambda_runtime::run(service_fn(move |event| {
        handle_event_checked(handler, environment, gate, event)
    }))
    .await
}

/// The whole `main` of a directly invoked function (`hk-check`): each invocation's
/// JSON event to `handler`, its value the result; `name` is the logs' `function`.
pub fn run_invoked<F, Fut>(name: &'static str, handler: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(serde_json::Value) -> Fut,
    Fut: std::future::Future<Output = serde_json::Value>,
{
    use tracing::Instrument;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            telemetry::init(telemetry::Sink::Stdout);
            let handler = &handler;
            lambda_runtime::run(service_fn(
                move |event: LambdaEvent<serde_json::Value>| async move {
                    let span = tracing::info_span!(
                        "invocation",
                        function = name,
                        aws_request_id = %event.context.request_id
                    );
                    // Boxed: a deep handler future (all of `hk check`) would overflow the
                    // compiler's layout depth inside the runtime's.
                    let fut = Box::pin(handler(event.payload));
                    Ok::<_, lambda_runtime::Error>(fut.instrument(span).await)
                },
            ))
            .await
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_deadline_is_used_and_an_emulators_1970_deadline_is_not() {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let r = remaining(now_ms + 30_000, Function::DeleteUser);
        assert!(r <= Duration::from_secs(30) && r > Duration::from_secs(25));
        assert_eq!(
            remaining(now_ms - 5_000, Function::DeleteUser),
            Duration::ZERO
        );
        assert_eq!(
            remaining(600_000, Function::DeleteUser),
            Function::DeleteUser.timeout()
        );
    }
}
