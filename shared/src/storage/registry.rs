//! (registry client: being built.)
