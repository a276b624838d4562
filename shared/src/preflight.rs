//! The schema compatibility check every function runs at cold start and `hk check`
//! runs first: every statement declared for the database's deletion-state model
//! ([`crate::catalogue::for_model`], the model from
//! [`crate::gitlab::deletion_model::probe`]) must PREPARE on the target database
//! (issue 15; behaviour §S4 lists the schema facts behind them).
//!
//! Owns: [`prepare_catalogue`] (parse-only: PREPARE plans nothing, writes nothing and
//! takes no lock beyond the catalog's) and [`Incompatible`], one failed statement with
//! the database object its error names (`column m.expires_at`, `relation "members"`,
//! a type mismatch), so an operator sees what to fix. It has no SQL of its own.

use tokio_postgres::Client;

use crate::catalogue;
use crate::error::Error;
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

/// Probe the deletion-state model, then PREPARE every catalogue statement declared for
/// it on `client`. An error that is not the server's (the connection broke) is returned
/// as such: it says nothing about the schema.
pub async fn prepare_catalogue(client: &Client) -> Result<Preflight, Error> {
    let model = deletion_model::probe(client).await?;
    let statements = catalogue::for_model(model);
    let failed = prepare_all(client, &statements).await?;
    Ok(Preflight {
        model,
        declared: statements.len(),
        failed,
    })
}

/// PREPARE `statements` on `client`; the ones that fail, in order.
pub async fn prepare_all(
    client: &Client,
    statements: &[catalogue::Statement],
) -> Result<Vec<Incompatible>, Error> {
    let mut failed = Vec::new();
    for s in statements {
        match client.prepare(s.text).await {
            Ok(_) => {}
            Err(e) => match e.as_db_error() {
                Some(db) => {
                    let mut object = object_of(db.message());
                    if object == db.message() {
                        if let Some(tokio_postgres::error::ErrorPosition::Original(at)) =
                            db.position()
                        {
                            object = format!("{object} near `{}`", near(s.text, *at as usize));
                        }
                    }
                    failed.push(Incompatible {
                        module: s.module,
                        name: s.name,
                        object,
                        message: db.message().to_string(),
                    })
                }
                None => return Err(Error::from(e)),
            },
        }
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::object_of;

    #[test]
    fn the_object_is_read_from_the_servers_message() {
        assert_eq!(
            object_of("column m.expires_at does not exist"),
            "column m.expires_at"
        );
        assert_eq!(
            object_of("relation \"members\" does not exist"),
            "relation \"members\""
        );
        assert_eq!(
            object_of("column \"state\" is of type integer but expression is of type text"),
            "column \"state\""
        );
        assert_eq!(
            object_of("column \"x\" of relation \"users\" does not exist"),
            "column \"x\" of relation \"users\""
        );
        assert_eq!(
            object_of("operator does not exist: text = bigint"),
            "operator does not exist: text = bigint"
        );
    }
}
