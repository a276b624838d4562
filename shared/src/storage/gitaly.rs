//! (gitaly client: being built.)
