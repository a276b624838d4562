//! The advisory-lock catalogue (behaviour §7.3, §9.10).
//!
//! Owns: `lock_key`, the session-level overlap and group-destroy try-locks, and the
//! transaction-level group-owner, authorization and ghost-user locks, taken in the
//! ascending order given (callers decide the order). Its statements are in [`sql`].

use sha2::{Digest, Sha256};
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::error::Result;

pub mod sql;

/// `lock_key(s)`: the first 8 bytes of SHA-256("gitlab-housekeeping:" || s), as a
/// big-endian signed 64-bit integer.
pub fn lock_key(s: &str) -> i64 {
    let mut h = Sha256::new();
    h.update(b"gitlab-housekeeping:");
    h.update(s.as_bytes());
    let d = h.finalize();
    i64::from_be_bytes(d[..8].try_into().expect("sha256 has 32 bytes"))
}

/// Try the session-level lock for `key_str`; true when taken.
pub async fn try_session_lock<C: GenericClient>(c: &C, key_str: &str) -> Result<bool> {
    // Parsed, bound and run in one flight (one round trip, issue 52): every cron's
    // first and last statement.
    let row = c
        .query_typed_one(sql::TRY_SESSION_LOCK, &[(&lock_key(key_str), Type::INT8)])
        .await?;
    Ok(row.get(0))
}

/// Release the session-level lock for `key_str`.
pub async fn session_unlock<C: GenericClient>(c: &C, key_str: &str) -> Result<()> {
    c.query_typed(sql::SESSION_UNLOCK, &[(&lock_key(key_str), Type::INT8)])
        .await?;
    Ok(())
}

/// Take transaction-level locks for each key string, in the order given.
pub async fn xact_locks<C: GenericClient>(c: &C, key_strs: &[String]) -> Result<()> {
    if key_strs.is_empty() {
        return Ok(());
    }
    let keys: Vec<i64> = key_strs.iter().map(|s| lock_key(s)).collect();
    c.query_typed(sql::XACT_LOCKS, &[(&keys, Type::INT8_ARRAY)])
        .await?;
    Ok(())
}

/// The overlap-guard key of a function (behaviour §9.10).
pub fn function_key(function: &str) -> String {
    format!("function:{function}")
}

/// Group-owner locks for the given group ids, ascending and deduplicated (behaviour §7.3).
pub async fn group_owner_locks<C: GenericClient>(c: &C, group_ids: &[i64]) -> Result<()> {
    let mut ids = group_ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let keys: Vec<String> = ids.iter().map(|g| format!("group-owners:{g}")).collect();
    xact_locks(c, &keys).await
}

/// The authorization lock of one user (behaviour §3, §7.3).
pub async fn authorization_lock<C: GenericClient>(c: &C, user_id: i64) -> Result<()> {
    xact_locks(c, &[format!("project-authorizations:{user_id}")]).await
}
