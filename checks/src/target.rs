//! The database `hk check`, `hk grants` and the `hk-check` function reach, connected
//! as the functions connect.
//!
//! Owns: building the [`Connector`] from a configuration lookup (the process
//! environment for `hk`, Lambda's for the function): `DATABASE_URL` or
//! `DATABASE_SECRET_ARN` (read through Secrets Manager), `DATABASE_CA_BUNDLE`, the TLS
//! rule of [`shared::config::Config`] (required unless the host is loopback) and the
//! session timeouts; and whether the configured host is this machine ([`is_loopback`]),
//! which the TLS line reports.

use anyhow::Result;
use tokio_postgres::config::Host;

use shared::config::Config;
use shared::db::Connector;

/// The connector and whether every configured host is loopback.
pub struct Target {
    /// Opens sessions as the functions do.
    pub connector: Connector,
    /// Whether the configured host is this machine (TLS is then not required).
    pub loopback: bool,
    /// `GITLAB_SCHEMA_ACCEPTED`: the newest migration accepted past the tested range.
    pub schema_accepted: Option<String>,
    /// `AUDIT_EVENTS`: whether the removals write EE audit events.
    pub audit_events: bool,
    /// `GROUP_HOOKS`: whether the removals send EE group hooks.
    pub group_hooks: bool,
}

/// Whether every host of `pg` is this machine (`localhost`, a loopback address or a
/// Unix socket).
pub fn is_loopback(pg: &tokio_postgres::Config) -> bool {
    pg.get_hosts().iter().all(|h| match h {
        Host::Tcp(name) => {
            name == "localhost"
                || name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        Host::Unix(_) => true,
    })
}

/// The target of the configuration `get` reads. `SERVICE_NAME` (the metrics'
/// dimension, required of a queue-fed function) is not needed to check: absent, the
/// local value stands in.
pub async fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Target> {
    let config = Config::from_lookup(|k| {
        get(k).or_else(|| {
            (k == shared::metrics::SERVICE_ENV).then(|| shared::metrics::LOCAL_SERVICE.into())
        })
    })?;
    let aws = shared::aws::from_env(&get);
    let pg = shared::aws::database_config(&config.database.source, Some(&aws)).await?;
    let loopback = is_loopback(&pg);
    let connector = Connector::new(pg, &config.database)?;
    Ok(Target {
        connector,
        loopback,
        schema_accepted: config.schema_accepted,
        audit_events: config.settings.audit_events,
        group_hooks: config.settings.group_hooks,
    })
}
