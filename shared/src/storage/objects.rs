//! (objects client: being built.)
