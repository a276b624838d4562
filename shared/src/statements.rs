//! How a module declares its SQL statements: the `statements!` macro and the
//! [`Statement`] the catalogue lists.
//!
//! Owns: the declaration form only (one `pub const NAME: &str` per statement plus the
//! module's `ALL` list, so a statement cannot be declared without being listed). Every
//! `sql` module uses it, and [`crate::catalogue`] collects them.

/// One SQL statement of the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statement {
    /// The module that runs it, for example `batches::remove_expired_members`.
    pub module: &'static str,
    /// Its constant's name in that module's `sql` submodule.
    pub name: &'static str,
    /// The SQL text, exactly as sent.
    pub text: &'static str,
    /// The deletion-state models it is declared for: it PREPAREs on those, and only
    /// their databases run it.
    pub models: Models,
    /// The column (table, column) it needs that not every supported release has: it
    /// PREPAREs, and runs, only where the column exists; `None` for most.
    pub needs: Option<Column>,
}

/// A column of a table, `(table, column)`.
pub type Column = (&'static str, &'static str);

/// A set of deletion-state models, one bit each (the models, their bits and the named
/// sets are `crate::gitlab::deletion_model`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Models(pub(crate) u8);

/// Declares a module's statements: `NAME = "SQL";` (or any constant expression such
/// as `concat!(…)`), each becoming `pub const NAME: &str`, and `ALL`, the list of
/// `(name, text)` the catalogue reads.
macro_rules! statements {
    ($($(#[$meta:meta])* $name:ident = $text:expr;)*) => {
        $($(#[$meta])* pub const $name: &str = $text;)*
        /// Every statement of this module, by constant name.
        pub const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),*];
    };
}
pub(crate) use statements;
