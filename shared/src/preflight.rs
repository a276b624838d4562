//! The schema compatibility check every function runs at cold start and `hk check` runs
//! first (issue 15; behaviour §S4): every statement declared for the database's
//! deletion-state model and the columns it has ([`crate::catalogue::for_model`]) must
//! PREPARE.
//!
//! Owns: [`probe_all`] (the model and column probes, sent at once), [`declared`] (the
//! statements a database must PREPARE, from its probes), [`prepare_catalogue`],
//! [`prepare_function`] (a function's cold start checks only the statements it can run,
//! [`crate::catalogue::for_function`]), [`prepare_all`] (every statement in one round
//! trip, issue 52) and [`prepare_one`] (parse-only, but parse analysis takes the
//! statement's table locks, so it may wait up to `lock_timeout`), [`Incompatible`]
//! (a failed statement and the object its error names) and its [`Problem`]. No SQL of
//! its own (the transaction around the PREPAREs is `crate::db`'s).

use tokio_postgres::{Client, GenericClient};

use crate::catalogue;
use crate::error::Error;
use crate::function::Function;
use crate::gitlab::deletion_model::{self, DeletionModel};

/// One catalogue statement that does not PREPARE on the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatible {
    /// The module that runs it, e.g. `batches::remove_expired_members`.
    pub module: &'static str,
    /// The statement's name in that module's `sql` submodule.
    pub name: &'static str,
    /// The database object the error names (`column m.expires_at`, `relation "x"`),
    /// or the whole message when it names none.
    pub object: String,
    /// The server's message.
    pub message: String,
    /// What kind of failure it is.
    pub problem: Problem,
}

/// What a failed PREPARE says about the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// The schema lacks or differs in what the statement uses.
    Schema,
    /// The role lacks a privilege parse analysis checks (`permission denied`, 42501:
    /// USAGE on a schema): a missing grant, not a missing migration.
    Permission,
    /// A lock timeout (55P03) or statement timeout (57014): another session holds a
    /// lock on a table the statement uses. Retryable; says nothing about the schema.
    Busy,
}

impl Problem {
    /// The class of a server error's SQLSTATE.
    pub fn of_sqlstate(code: &str) -> Problem {
        match code {
            "55P03" | "57014" => Problem::Busy,
            "42501" => Problem::Permission,
            _ => Problem::Schema,
        }
    }
}

impl std::fmt::Display for Incompatible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}::{}: {}", self.module, self.name, self.message)
    }
}

/// The object a PostgreSQL parse error names: `column m.expires_at does not exist` →
/// `column m.expires_at`; `relation "members" does not exist` → `relation "members"`;
/// `column "x" is of type integer but expression is of type text` → `column "x"`;
/// `operator does not exist: text = bigint` → that message; anything else: the message.
pub fn object_of(message: &str) -> String {
    for kind in ["column ", "relation ", "function ", "type ", "table "] {
        if let Some(rest) = message.strip_prefix(kind) {
            if let Some(end) = rest
                .find(" does not exist")
                .or_else(|| rest.find(" is of type"))
                .or_else(|| rest.find(" of relation"))
            {
                return format!("{kind}{}", &rest[..end]);
            }
        }
    }
    if let Some(i) = message.find("of relation ") {
        // `column "x" of relation "t" does not exist` (INSERT/UPDATE targets)
        let head = &message[..i];
        let rel = message[i + "of relation ".len()..]
            .split_whitespace()
            .next()
            .unwrap_or("");
        return format!("{}of relation {rel}", head);
    }
    message.to_string()
}

/// The statement text around the error position (1-based, in characters): the
/// operand and operator a type error points at, whitespace collapsed.
fn near(text: &str, at: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = at.saturating_sub(1).min(chars.len());
    let from = at.saturating_sub(24);
    let to = (at + 24).min(chars.len());
    chars[from..to]
        .iter()
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The preflight's result: the database's deletion-state model, how many statements
/// are declared for it, and the ones that do not PREPARE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preflight {
    /// The model [`deletion_model::probe`] found.
    pub model: DeletionModel,
    /// The statements declared for that model.
    pub declared: usize,
    /// The ones that failed, in catalogue order.
    pub failed: Vec<Incompatible>,
}

/// The database's deletion-state model and the needed columns it has
/// ([`catalogue::needed_columns`]): every probe sent at once, one round trip.
pub async fn probe_all<C: GenericClient + Sync>(
    client: &C,
) -> Result<(DeletionModel, Vec<catalogue::Column>), Error> {
    let needed = catalogue::needed_columns();
    let (model, has) = futures::join!(
        deletion_model::probe(client),
        futures::future::try_join_all(
            needed
                .iter()
                .map(|(t, c)| deletion_model::has_column(client, t, c))
        )
    );
    let has = needed
        .into_iter()
        .zip(has?)
        .filter_map(|(col, yes)| yes.then_some(col))
        .collect();
    Ok((model?, has))
}

/// The catalogue statements a database of deletion model `model` must PREPARE: the
/// model's, and those needing a column ([`catalogue::needed_columns`]) it has.
pub async fn declared<C: GenericClient + Sync>(
    client: &C,
    model: DeletionModel,
) -> Result<Vec<catalogue::Statement>, Error> {
    let (_, has) = probe_all(client).await?;
    Ok(catalogue::for_model(model, &has))
}

/// Probe the deletion-state model and the needed columns, then PREPARE every catalogue
/// statement declared for them on `client`. An error that is not the server's (the
/// connection broke) is returned as such: it says nothing about the schema.
pub async fn prepare_catalogue(client: &Client) -> Result<Preflight, Error> {
    let (model, has) = probe_all(client).await?;
    let statements = catalogue::for_model(model, &has);
    finish(client, model, statements).await
}

/// [`prepare_catalogue`] for the statements `function` can run
/// ([`catalogue::for_function`]): what its cold start checks.
pub async fn prepare_function(client: &Client, function: Function) -> Result<Preflight, Error> {
    let (model, has) = probe_all(client).await?;
    finish(
        client,
        model,
        catalogue::for_function(function, model, &has),
    )
    .await
}

/// PREPARE `statements`, after the probes: the [`Preflight`].
pub async fn finish(
    client: &Client,
    model: DeletionModel,
    statements: Vec<catalogue::Statement>,
) -> Result<Preflight, Error> {
    let failed = prepare_all(client, &statements).await?;
    Ok(Preflight {
        model,
        declared: statements.len(),
        failed,
    })
}

/// PREPARE `statements` on `client`, all sent at once (one round trip): the ones that
/// fail, in order. They are sent inside `BEGIN READ ONLY` … `ROLLBACK`, so the first failure
/// aborts the rest at once (a statement waiting for a lock does not make every later
/// one wait as well); those are sent again, in the next round trip. The first
/// [`Problem::Busy`] failure ends the pass (it is the last entry): the next statements
/// would wait for the same lock, and a busy database is retried as a whole. `client`
/// must not be inside a transaction of its caller: the pass ends with ROLLBACK.
pub async fn prepare_all(
    client: &Client,
    statements: &[catalogue::Statement],
) -> Result<Vec<Incompatible>, Error> {
    Ok(prepare_all_kept(client, statements).await?.0)
}

/// [`prepare_all`], and the statements that prepared, still open: dropping one sends
/// its Close, which goes out with the client's next request. The schema check started
/// during init (`crate::lambda::SchemaGate::start`) hands them to the first
/// invocation to drop, so their Closes share its first flight instead of taking one of
/// their own (issue 52).
pub async fn prepare_all_kept(
    client: &Client,
    statements: &[catalogue::Statement],
) -> Result<(Vec<Incompatible>, Vec<tokio_postgres::Statement>), Error> {
    let (mut failed, mut kept) = (Vec::new(), Vec::new());
    let mut rest = statements;
    while !rest.is_empty() {
        // In this order on the wire: `join3` and `join_all` poll their futures in
        // turn, and each sends its request when first polled.
        let (begin, outcomes, end) = futures::future::join3(
            client.batch_execute(crate::db::sql::CHECK_BEGIN),
            futures::future::join_all(rest.iter().map(|s| client.prepare(s.text))),
            client.batch_execute(crate::db::sql::ROLLBACK),
        )
        .await;
        begin?;
        end?;
        let mut next = &rest[rest.len()..];
        for (i, (s, outcome)) in rest.iter().zip(outcomes).enumerate() {
            let e = match outcome {
                Ok(prepared) => {
                    kept.push(prepared);
                    continue;
                }
                Err(e) => e,
            };
            let Some(db) = e.as_db_error() else {
                return Err(Error::from(e));
            };
            if db.code() == &tokio_postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION {
                // Aborted by an earlier failure: not checked yet.
                next = &rest[i..];
                break;
            }
            let f = incompatible(s, db);
            let busy = f.problem == Problem::Busy;
            failed.push(f);
            if busy {
                return Ok((failed, kept));
            }
        }
        rest = next;
    }
    Ok((failed, kept))
}

/// The failure a server error of statement `s` is.
fn incompatible(s: &catalogue::Statement, db: &tokio_postgres::error::DbError) -> Incompatible {
    let problem = Problem::of_sqlstate(db.code().code());
    let mut object = object_of(db.message());
    if object == db.message() && problem == Problem::Schema {
        if let Some(tokio_postgres::error::ErrorPosition::Original(at)) = db.position() {
            object = format!("{object} near `{}`", near(s.text, *at as usize));
        }
    }
    Incompatible {
        module: s.module,
        name: s.name,
        object,
        message: db.message().to_string(),
        problem,
    }
}

/// PREPARE one statement on `client`: `None` when it prepares, its failure otherwise;
/// an error that is not the server's is returned as such.
pub async fn prepare_one(
    client: &Client,
    s: &catalogue::Statement,
) -> Result<Option<Incompatible>, Error> {
    let e = match client.prepare(s.text).await {
        Ok(_) => return Ok(None),
        Err(e) => e,
    };
    match e.as_db_error() {
        Some(db) => Ok(Some(incompatible(s, db))),
        None => Err(Error::from(e)),
    }
}
