//! Storage outside the database that `storage-cleanup` removes when `group-destroy`
//! deletes a project (docs/storage-cleanup.md): Git repositories through Gitaly
//! ([`gitaly`]), container images through the registry API ([`registry`]) and files in
//! object storage ([`objects`]).
//!
//! Owns: [`Removal`], what one idempotent removal found, and the clients, each built
//! once at cold start from its configuration. Never touches the database.

pub mod gitaly;
pub mod objects;
pub mod registry;

/// What removing one item found: it was there and is now gone, or it was already gone
/// (a replay, or never created). Both mean done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// The item existed and was removed.
    Removed,
    /// The item did not exist.
    AlreadyGone,
}

impl Removal {
    /// `removed` or `already_gone`, as logs and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Removal::Removed => "removed",
            Removal::AlreadyGone => "already_gone",
        }
    }
}
