//! Structured JSON logs (behaviour §8).
//!
//! Owns: the one log format: a JSON object per line with `timestamp`, `level`,
//! `message`, the fields of the enclosing spans flattened to the top level, and the
//! event's own fields (a `_flatten` field holding an object is merged in); the JSON
//! panic hook [`init`] installs; the EMF metric lines ([`METRICS_TARGET`]), which
//! pass the level filter at every level and carry a `level` Lambda's filter keeps
//! ([`metrics_level`]). Callers log ids, never addresses, URLs, tokens or bodies.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

/// Where log lines go.
#[derive(Clone)]
pub enum Sink {
    /// Standard output (Lambda: CloudWatch reads it).
    Stdout,
    /// Standard error (`hk`, whose stdout carries its own report).
    Stderr,
    /// An in-memory buffer (tests).
    Buffer(Arc<Mutex<Vec<Value>>>),
}

/// The target of the EMF metric lines ([`crate::metrics::emit`]): enabled at every
/// level by [`targets`], whatever the configured log level.
pub const METRICS_TARGET: &str = "emf";

/// The JSON layer.
pub struct JsonLayer {
    sink: Sink,
    metrics_level: &'static str,
}

impl JsonLayer {
    /// A layer writing to `sink`; metric lines carry `level` `info`.
    pub fn new(sink: Sink) -> JsonLayer {
        JsonLayer {
            sink,
            metrics_level: "info",
        }
    }

    /// A layer writing to `sink` whose metric lines carry the `level` that Lambda's
    /// log-level filter keeps under `lambda_level` (`AWS_LAMBDA_LOG_LEVEL`):
    /// [`metrics_level`].
    pub fn for_lambda_level(sink: Sink, lambda_level: Option<&str>) -> JsonLayer {
        JsonLayer {
            sink,
            metrics_level: metrics_level(lambda_level),
        }
    }
}

/// The `level` of an EMF line so that Lambda's application log-level filter keeps it.
/// With the JSON log format, Lambda drops a line whose `level` is below the
/// function's `ApplicationLogLevel`, and treats a missing or unknown `level` as INFO
/// (docs/logs.md, "Metrics at every log level"). A metric line is therefore stamped
/// with the configured level itself when that is above INFO (`warn`, `error`,
/// `fatal`), else `info`: it passes the filter whatever the operator sets.
pub fn metrics_level(lambda_level: Option<&str>) -> &'static str {
    match lambda_level
        .map(|l| l.trim().to_ascii_uppercase())
        .as_deref()
    {
        Some("WARN") => "warn",
        Some("ERROR") => "error",
        Some("FATAL") => "fatal",
        _ => "info",
    }
}

struct SpanFields(Map<String, Value>);

struct Visitor<'a>(&'a mut Map<String, Value>);

impl Visitor<'_> {
    fn put(&mut self, field: &Field, v: Value) {
        if field.name() == "_flatten" {
            let parsed = match &v {
                Value::String(s) => serde_json::from_str::<Value>(s).ok(),
                other => Some(other.clone()),
            };
            if let Some(Value::Object(m)) = parsed {
                self.0.extend(m);
                return;
            }
        }
        self.0.insert(field.name().to_string(), v);
    }
}

impl Visit for Visitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, serde_json::json!(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::from(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}

impl<S> Layer<S> for JsonLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut m = Map::new();
        attrs.record(&mut Visitor(&mut m));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(m));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut ext = span.extensions_mut();
            if let Some(f) = ext.get_mut::<SpanFields>() {
                values.record(&mut Visitor(&mut f.0));
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::from(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        let level = if event.metadata().target() == METRICS_TARGET {
            self.metrics_level.to_string()
        } else {
            event.metadata().level().as_str().to_ascii_lowercase()
        };
        line.insert("level".into(), Value::from(level));
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(f) = span.extensions().get::<SpanFields>() {
                    line.extend(f.0.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
        event.record(&mut Visitor(&mut line));
        line.entry("target")
            .or_insert_with(|| Value::from(event.metadata().target()));
        let value = Value::Object(line);
        match &self.sink {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{value}");
            }
            Sink::Stderr => {
                let mut out = std::io::stderr().lock();
                let _ = writeln!(out, "{value}");
            }
            Sink::Buffer(b) => b.lock().unwrap_or_else(|p| p.into_inner()).push(value),
        }
    }
}

/// The level filter's spec: `AWS_LAMBDA_LOG_LEVEL` (`lambda_level`), then `RUST_LOG`
/// (`rust_log`), then `info`.
fn filter_spec(lambda_level: Option<&str>, rust_log: Option<&str>) -> String {
    lambda_level
        .map(|l| l.to_ascii_lowercase())
        .or_else(|| rust_log.map(str::to_string))
        .unwrap_or_else(|| "info".into())
}

/// Parse a filter spec; a bare level applies to this crate, `hk` and `checks` (the
/// `hk-check` function's), `warn` elsewhere. Directives are `level` or
/// `target=level`, comma-separated (a `Targets` filter: no regular expressions, so the
/// functions do not carry a regex engine). The metric lines ([`METRICS_TARGET`]) are
/// enabled whatever the spec says when `metrics_always` (a function: the alarms read
/// them); otherwise (`hk` on a terminal) they follow this crate's level.
pub fn targets(spec: &str, metrics_always: bool) -> Targets {
    let spec = if spec.contains('=') || spec.contains(',') {
        spec.to_string()
    } else {
        format!("warn,shared={spec},hk={spec},checks={spec},{METRICS_TARGET}={spec}")
    };
    let t = spec.parse().unwrap_or_else(|_| {
        Targets::new()
            .with_default(LevelFilter::WARN)
            .with_target("shared", LevelFilter::INFO)
            .with_target("hk", LevelFilter::INFO)
            .with_target("checks", LevelFilter::INFO)
            .with_target(METRICS_TARGET, LevelFilter::INFO)
    });
    if metrics_always {
        t.with_target(METRICS_TARGET, LevelFilter::TRACE)
    } else {
        t
    }
}

/// The subscriber [`init`] installs for a function (writing to `sink`, metric lines at
/// every level), for a given `AWS_LAMBDA_LOG_LEVEL` and `RUST_LOG`.
pub fn subscriber(
    sink: Sink,
    lambda_level: Option<&str>,
    rust_log: Option<&str>,
) -> impl Subscriber + Send + Sync {
    layered(sink, lambda_level, rust_log, true)
}

fn layered(
    sink: Sink,
    lambda_level: Option<&str>,
    rust_log: Option<&str>,
    metrics_always: bool,
) -> impl Subscriber + Send + Sync {
    Registry::default()
        .with(targets(
            &filter_spec(lambda_level, rust_log),
            metrics_always,
        ))
        .with(JsonLayer::for_lambda_level(sink, lambda_level))
}

/// Install the global subscriber writing to `sink` (levels from
/// `AWS_LAMBDA_LOG_LEVEL`, then `RUST_LOG`), and the JSON panic hook. On standard
/// output (a function) the metric lines pass at every level; on standard error (`hk`)
/// they follow the level like any line. Idempotent: a second call installs nothing new.
pub fn init(sink: Sink) {
    let lambda_level = std::env::var("AWS_LAMBDA_LOG_LEVEL").ok();
    let rust_log = std::env::var("RUST_LOG").ok();
    let always = matches!(sink, Sink::Stdout);
    let subscriber = layered(sink, lambda_level.as_deref(), rust_log.as_deref(), always);
    if tracing::subscriber::set_global_default(subscriber).is_ok() {
        install_panic_hook();
    }
}

/// The text of a panic payload (`&str` or `String`; anything else is unnamed).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Replace the default panic hook (plain text on stderr) with one that logs the panic
/// as a JSON `panic` line at error through the current subscriber.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let error = panic_message(info.payload());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(
            error = error.as_str(),
            error_class = "panic",
            location = location.as_str(),
            "panic"
        );
    }));
}

/// The prefix GitLab's `ApplicationWorker#logging_extras` gives a worker's
/// `log_extra_metadata_on_done` keys: `extra.` + the class name with `::` replaced by
/// `_`, then underscored (`Members::PruneDeletionsWorker` →
/// `extra.members_prune_deletions_worker.`).
pub fn gitlab_extra_prefix(class: &str) -> String {
    let name = class.replace("::", "_");
    let mut out = String::from("extra.");
    let mut prev: Option<char> = None;
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            match prev {
                Some(p) if p.is_ascii_lowercase() || p.is_ascii_digit() => out.push('_'),
                Some(p) if p.is_ascii_uppercase() && next_lower => out.push('_'),
                _ => {}
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
        prev = Some(c);
    }
    out.push('.');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_specs_set_levels_per_target() {
        use tracing::Level;
        let t = targets("debug", true);
        assert!(t.would_enable("shared::batches", &Level::DEBUG));
        assert!(t.would_enable("hk", &Level::DEBUG));
        assert!(t.would_enable("checks::function", &Level::DEBUG));
        assert!(!t.would_enable("hyper", &Level::INFO));
        assert!(t.would_enable("hyper", &Level::WARN));
        let t = targets("error,shared=info", true);
        assert!(t.would_enable("shared", &Level::INFO));
        assert!(!t.would_enable("tokio_postgres", &Level::WARN));
        let t = targets("not a [filter", true);
        assert!(t.would_enable("shared", &Level::INFO));
    }

    #[test]
    fn metric_lines_pass_every_filter_and_lambdas() {
        use tracing::Level;
        for spec in [
            "error",
            "warn",
            "info",
            "error,shared=error",
            "not a [filter",
        ] {
            assert!(
                targets(spec, true).would_enable(METRICS_TARGET, &Level::INFO),
                "{spec}"
            );
        }
        // hk on a terminal: as this crate's level.
        assert!(!targets("warn", false).would_enable(METRICS_TARGET, &Level::INFO));
        assert!(targets("info", false).would_enable(METRICS_TARGET, &Level::INFO));
        assert_eq!(metrics_level(Some("WARN")), "warn");
        assert_eq!(metrics_level(Some("ERROR")), "error");
        assert_eq!(metrics_level(Some("DEBUG")), "info");
        assert_eq!(metrics_level(None), "info");
    }
}
