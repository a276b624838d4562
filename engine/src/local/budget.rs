//! What a rolled-back plan (`hk run --dry-run`, with `--until-idle` the whole run)
//! may hold and what it cannot undo (behaviour §11).
//!
//! Owns: [`LockBudget`], the server's lock table as the server reports it
//! (`max_locks_per_transaction × (max_connections + max_prepared_transactions)`,
//! PostgreSQL's documented size; the real table is a little larger, so the budget
//! errs on the safe side), read before a plan starts, with the two thresholds of
//! the plan: a slice ends once its transaction holds an eighth of it, and the plan
//! stops before it holds half; the count of locks a session holds in the shared
//! lock table (fast-path relation locks take no room there); and
//! [`SequenceAdvance`], the sequences that moved while a plan ran: `nextval` is not
//! transactional, so an INSERT rolled back still uses up its id. Undoing it would
//! need `setval` under a lock that blocks GitLab's own inserts, or risk handing out
//! an id twice, so the plan reports it instead.

use serde_json::{json, Value};
use tokio_postgres::GenericClient;

use shared::error::Result;
use shared::function::Function;

/// The server's lock table, as the server reports its size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockBudget {
    /// `max_locks_per_transaction`.
    pub max_locks_per_transaction: i64,
    /// `max_connections`.
    pub max_connections: i64,
    /// `max_prepared_transactions`.
    pub max_prepared_transactions: i64,
}

impl LockBudget {
    /// Read the settings of the connected server.
    pub async fn read<C: GenericClient>(c: &C) -> Result<LockBudget> {
        let r = c
            .query_one(
                "SELECT current_setting('max_locks_per_transaction')::bigint, \
                 current_setting('max_connections')::bigint, \
                 current_setting('max_prepared_transactions')::bigint",
                &[],
            )
            .await?;
        Ok(LockBudget {
            max_locks_per_transaction: r.get(0),
            max_connections: r.get(1),
            max_prepared_transactions: r.get(2),
        })
    }

    /// The lock table's documented size.
    pub fn capacity(&self) -> i64 {
        self.max_locks_per_transaction * (self.max_connections + self.max_prepared_transactions)
    }

    /// A plan stops before its transaction holds this many locks: half the table,
    /// the other half left to everyone else.
    pub fn stop_at(&self) -> i64 {
        self.capacity() / 2
    }

    /// A slice of a plan ends, where it may, once it holds this many.
    pub fn slice_at(&self) -> i64 {
        self.capacity() / 8
    }

    /// The settings, as the plan prints them.
    pub fn describe(&self) -> String {
        format!(
            "max_locks_per_transaction {} × (max_connections {} + max_prepared_transactions {}) = {}",
            self.max_locks_per_transaction,
            self.max_connections,
            self.max_prepared_transactions,
            self.capacity()
        )
    }

    /// Why a plan holding `held` locks stopped, running `function`.
    pub fn stop_message(&self, held: i64, function: Function) -> String {
        format!(
            "the plan stopped before the end of the run: its transaction held {held} locks, \
             and a plan stops before it holds half of the server's lock table ({} of {}); \
             {function} could not end a slice before that (a slice ends only where all that is \
             left is a continuation with a cursor); plan on a server with a larger \
             max_locks_per_transaction (a restored snapshot), or run without --until-idle",
            self.stop_at(),
            self.describe()
        )
    }

    /// The budget as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "max_locks_per_transaction": self.max_locks_per_transaction,
            "max_connections": self.max_connections,
            "max_prepared_transactions": self.max_prepared_transactions,
            "capacity": self.capacity(),
            "stop_at": self.stop_at(),
            "slice_at": self.slice_at(),
        })
    }
}

/// Locks the connected session holds in the shared lock table.
pub async fn held<C: GenericClient>(c: &C) -> Result<i64> {
    Ok(c.query_one(
        "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND NOT fastpath",
        &[],
    )
    .await?
    .get(0))
}

/// A sequence that moved while a plan ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceAdvance {
    /// `schema.name`.
    pub sequence: String,
    /// `last_value` before (`None`: never used, or not readable).
    pub before: Option<i64>,
    /// `last_value` after.
    pub after: Option<i64>,
}

impl SequenceAdvance {
    /// As the plan prints it.
    pub fn describe(&self) -> String {
        let v = |x: Option<i64>| x.map(|n| n.to_string()).unwrap_or("unused".into());
        format!("{} {} → {}", self.sequence, v(self.before), v(self.after))
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({"sequence": self.sequence, "before": self.before, "after": self.after})
    }
}

/// Every sequence's `last_value`, by name.
pub async fn sequences<C: GenericClient>(c: &C) -> Result<Vec<(String, Option<i64>)>> {
    Ok(c.query(
        "SELECT format('%I.%I', schemaname, sequencename), last_value FROM pg_sequences \
             ORDER BY 1",
        &[],
    )
    .await?
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect())
}

/// The sequences whose `last_value` differs between `before` and `after`.
pub fn advanced(
    before: &[(String, Option<i64>)],
    after: &[(String, Option<i64>)],
) -> Vec<SequenceAdvance> {
    after
        .iter()
        .filter_map(|(name, a)| {
            let b = before.iter().find(|(n, _)| n == name).and_then(|(_, b)| *b);
            (b != *a).then(|| SequenceAdvance {
                sequence: name.clone(),
                before: b,
                after: *a,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_half_the_documented_table_and_a_slice_an_eighth() {
        let b = LockBudget {
            max_locks_per_transaction: 64,
            max_connections: 100,
            max_prepared_transactions: 0,
        };
        assert_eq!((b.capacity(), b.stop_at(), b.slice_at()), (6400, 3200, 800));
        assert!(b.describe().ends_with("= 6400"));
        let s = b.stop_message(3300, Function::PatExpiring);
        assert!(
            s.contains("3300") && s.contains("3200") && s.contains("pat-expiring"),
            "{s}"
        );
    }

    #[test]
    fn only_sequences_that_moved_are_reported() {
        let before = vec![
            ("public.a".to_string(), Some(3)),
            ("public.b".to_string(), None),
        ];
        let after = vec![
            ("public.a".to_string(), Some(3)),
            ("public.b".to_string(), Some(1)),
            ("public.c".to_string(), None),
        ];
        let moved = advanced(&before, &after);
        assert_eq!(moved.len(), 1);
        assert_eq!(moved[0].describe(), "public.b unused → 1");
    }
}
