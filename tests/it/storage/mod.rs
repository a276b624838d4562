//! Storage clients of `storage-cleanup` against real servers: the container registry
//! (Debian's `docker-registry`).

mod registry;
