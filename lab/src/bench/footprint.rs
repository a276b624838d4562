//! The `footprint` bench: per function binary, its stripped size, the time from
//! process start to ready (its first `GET …/invocation/next`), and the peak RSS of
//! `remove-expired-members` while it handles one SQS record whose page has 1,000
//! expired members.
//!
//! Owns: a minimal Lambda Runtime API on 127.0.0.1 (HTTP/1.1, keep-alive, the
//! `next`/`response`/`error` routes and the headers `lambda_runtime` requires), the
//! child processes it serves (spawned, measured, killed by their own handle), and the
//! reference figure measured in the same run (starting and reaping `true`), so a start
//! time is read next to what process creation costs on the machine at that moment.
//! The cold start with the database is `cold_start`'s.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use super::data::{self, B38Sizes};
use super::{median, BenchDbs, Options, Row, Scale, Target};
use shared::error::{Error, Result};
use shared::function::Function;
use shared::messages::Envelope;

/// What the fake Runtime API saw.
#[derive(Debug)]
enum Seen {
    /// A `GET …/invocation/next`, when it arrived.
    Next(Instant),
    /// A `POST …/response` body.
    Response(String),
    /// A `POST …/error` (init or invocation) body.
    Error(String),
}

pub(super) fn io(what: &str, e: std::io::Error) -> Error {
    Error::Invariant(format!("footprint: {what}: {e}"))
}

/// One HTTP/1.1 request: method, path, body.
async fn read_request(
    r: &mut BufReader<TcpStream>,
) -> std::io::Result<Option<(String, String, Vec<u8>)>> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).await? == 0 {
            return Ok(None);
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "content-length" {
                length = v.parse().unwrap_or(0);
            } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).await?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        r.read_exact(&mut body).await?;
    }
    Ok(Some((method, path, body)))
}

async fn serve(
    stream: TcpStream,
    events: Arc<Mutex<VecDeque<String>>>,
    tx: mpsc::UnboundedSender<Seen>,
) {
    let mut r = BufReader::new(stream);
    let mut n = 0u64;
    while let Ok(Some((method, path, body))) = read_request(&mut r).await {
        let reply = if method == "GET" && path.ends_with("/invocation/next") {
            let _ = tx.send(Seen::Next(Instant::now()));
            let event = events.lock().unwrap().pop_front();
            let Some(event) = event else {
                // Nothing to hand out: keep the runtime waiting until it is killed.
                std::future::pending::<()>().await;
                return;
            };
            n += 1;
            let deadline = chrono::Utc::now().timestamp_millis() + 600_000;
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                 Lambda-Runtime-Aws-Request-Id: bench-{n}\r\n\
                 Lambda-Runtime-Deadline-Ms: {deadline}\r\n\
                 Lambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:123456789012:function:bench\r\n\
                 Content-Length: {}\r\n\r\n{event}",
                event.len()
            )
        } else {
            let text = String::from_utf8_lossy(&body).to_string();
            let _ = tx.send(if path.ends_with("/response") {
                Seen::Response(text)
            } else {
                Seen::Error(text)
            });
            "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"status\":\"OK\"}\n"
                .to_string()
        };
        if r.get_mut().write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A fake Runtime API serving `events` in order; reports what it sees on the channel.
async fn runtime_api(
    events: Vec<String>,
) -> Result<(
    String,
    mpsc::UnboundedReceiver<Seen>,
    tokio::task::JoinHandle<()>,
)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| io("bind", e))?;
    let addr = listener
        .local_addr()
        .map_err(|e| io("addr", e))?
        .to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    let events = Arc::new(Mutex::new(VecDeque::from(events)));
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, events.clone(), tx.clone()));
        }
    });
    Ok((addr, rx, task))
}

/// Peak and current resident set of a process, in decimal MB, the unit of the
/// footprint targets (`VmHWM`, `VmRSS`; `/proc` counts them in KiB). Before 2026-11-25
/// these rows printed MiB under the label MB.
fn rss_mb(pid: u32) -> Option<(f64, f64)> {
    rss_mb_of_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// [`rss_mb`] from the text of a `/proc/<pid>/status`.
fn rss_mb_of_status(status: &str) -> Option<(f64, f64)> {
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024.0 / 1_000_000.0)
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// The environment of a function binary: Lambda's variables, the database, SQS mode
/// with a queue URL for every function (nothing is sent by the measured page).
fn command(bin: &Path, f: Function, api: &str, database_url: &str) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(bin);
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", api)
        .env("AWS_LAMBDA_FUNCTION_NAME", f.name())
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("DATABASE_URL", database_url)
        .env("TRANSPORT", "sqs")
        .env(shared::metrics::SERVICE_ENV, "hk-bench")
        // B28's delivery configuration (checked at cold start by every function that
        // builds a notifier); mails are logged, nothing is sent by the measured work.
        .env("GITLAB_BASE_URL", "https://gitlab.example.com")
        .env("GITLAB_DB_KEY_BASE", "bench-db-key-base-0123456789abcdef")
        .env("MAIL_FROM", "GitLab <gitlab@example.com>")
        .env("EMAIL_TRANSPORT", "log")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    for g in Function::ALL {
        c.env(
            format!("QUEUE_URL_{}", g.env_suffix()),
            format!("http://127.0.0.1:9/123456789012/hk-{}", g.name()),
        );
    }
    c
}

/// Start a function binary and wait for its first `next`: (time to ready, idle RSS).
async fn start_once(bin: &Path, f: Function, database_url: &str) -> Result<(Duration, f64)> {
    let (api, mut rx, task) = runtime_api(Vec::new()).await?;
    let t0 = Instant::now();
    let mut child = command(bin, f, &api, database_url)
        .spawn()
        .map_err(|e| io("spawn", e))?;
    let seen = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await;
    let pid = child.id().unwrap_or(0);
    let rss = rss_mb(pid).map(|(_, now)| now).unwrap_or(f64::NAN);
    let _ = child.kill().await;
    task.abort();
    match seen {
        Ok(Some(Seen::Next(at))) => Ok((at - t0, rss)),
        Ok(Some(other)) => Err(Error::Invariant(format!(
            "footprint: {f} did not start: {other:?}"
        ))),
        _ => Err(Error::Invariant(format!(
            "footprint: {f} never asked for an event"
        ))),
    }
}

/// Start `true` and reap it: process creation on this machine, now.
async fn reference_start() -> Duration {
    let mut v = Vec::new();
    for _ in 0..7 {
        let t0 = Instant::now();
        if tokio::process::Command::new("true").status().await.is_ok() {
            v.push(t0.elapsed());
        }
    }
    median(&mut v)
}

/// Hand `remove-expired-members` one SQS record (its cron message) and read its peak
/// RSS once the response is posted.
/// An SQS event of one record: `f`'s cron message.
fn cron_event(f: Function, now: chrono::DateTime<chrono::Utc>) -> String {
    sqs_event(f, &Envelope::cron(f, "bench", now).to_body())
}

/// An SQS event of one record holding `body`, from `f`'s queue.
pub(super) fn sqs_event(f: Function, body: &str) -> String {
    serde_json::json!({"Records": [{
        "messageId": "bench-1", "receiptHandle": "r", "body": body,
        "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
        "md5OfBody": "", "eventSource": "aws:sqs",
        "eventSourceARN": format!("arn:aws:sqs:us-east-1:123456789012:hk-{}", f.name()),
        "awsRegion": "us-east-1"}]})
    .to_string()
}

async fn page_rss(bin: &Path, database_url: &str, opts: &Options) -> Result<(f64, String)> {
    let event = cron_event(Function::RemoveExpiredMembers, opts.now);
    let (api, mut rx, task) = runtime_api(vec![event]).await?;
    let log_path = std::env::temp_dir().join(format!("hk-bench-page-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).map_err(|e| io("log file", e))?;
    let mut child = command(bin, Function::RemoveExpiredMembers, &api, database_url)
        .stdout(log)
        .spawn()
        .map_err(|e| io("spawn", e))?;
    let pid = child.id().unwrap_or(0);
    let mut answer = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(120), rx.recv()).await {
            Ok(Some(Seen::Next(_))) => continue,
            Ok(Some(Seen::Response(b))) => {
                answer = Some(Ok(b));
                break;
            }
            Ok(Some(Seen::Error(b))) => {
                answer = Some(Err(b));
                break;
            }
            _ => break,
        }
    }
    // The response is posted after the page: the peak is final; read it before the
    // process is gone.
    let peak = rss_mb(pid).map(|(hwm, _)| hwm).unwrap_or(f64::NAN);
    let _ = child.kill().await;
    task.abort();
    let logged = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    let errors: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("\"level\":\"error\"") || l.contains("\"message\":\"done\""))
        .take(3)
        .collect();
    match answer {
        Some(Ok(b)) if !b.contains("itemIdentifier") => Ok((peak, b)),
        Some(Ok(b)) | Some(Err(b)) => Err(Error::Invariant(format!(
            "footprint: the page failed: {b} {}",
            errors.join(" ")
        ))),
        None => Err(Error::Invariant(format!(
            "footprint: no response to the page {}",
            errors.join(" ")
        ))),
    }
}

/// Start `f`'s binary with `env` added and hand it `event` (one SQS record): the time
/// from spawning the process to the response posted for that first record.
pub(super) async fn first_record(
    bin: &Path,
    f: Function,
    event: String,
    database_url: &str,
    env: &[(&str, String)],
) -> Result<Duration> {
    let (api, mut rx, task) = runtime_api(vec![event]).await?;
    // The function's log lines (stdout), read back only to say why a record failed.
    let log_path = std::env::temp_dir().join(format!(
        "hk-bench-first-{}-{}.log",
        f.name(),
        std::process::id()
    ));
    let log = std::fs::File::create(&log_path).map_err(|e| io("log file", e))?;
    let t0 = Instant::now();
    let mut cmd = command(bin, f, &api, database_url);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(log);
    let mut child = cmd.spawn().map_err(|e| io("spawn", e))?;
    let mut answer = None;
    while let Ok(Some(seen)) = tokio::time::timeout(FIRST_RECORD_LIMIT, rx.recv()).await {
        match seen {
            Seen::Next(_) => continue,
            Seen::Response(b) => answer = Some((t0.elapsed(), Ok(b))),
            Seen::Error(b) => answer = Some((t0.elapsed(), Err(b))),
        }
        break;
    }
    let _ = child.kill().await;
    task.abort();
    let logged = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    let why = logged
        .lines()
        .rfind(|l| l.contains("\"level\":\"error\""))
        .unwrap_or("no error logged");
    match answer {
        Some((t, Ok(b))) if !b.contains("itemIdentifier") => Ok(t),
        Some((_, Ok(b))) | Some((_, Err(b))) => Err(Error::Invariant(format!(
            "footprint: {f} failed its first record over TLS: {b}; its log: {why}"
        ))),
        None => Err(Error::Invariant(format!(
            "footprint: {f} answered no first record within {FIRST_RECORD_LIMIT:?}"
        ))),
    }
}

/// How long a first record may take before the bench gives up on it.
const FIRST_RECORD_LIMIT: Duration = Duration::from_secs(60);

/// A function's binary in `dir`: `dir/<function>` (a cargo profile directory such as
/// `target/release`) or `dir/<function>/bootstrap` (`target/lambda`, what
/// `scripts/package-lambdas.sh` builds and deploys).
pub(super) fn binary(dir: &Path, f: Function) -> PathBuf {
    let plain = dir.join(f.name());
    if plain.is_file() {
        plain
    } else {
        plain.join("bootstrap")
    }
}

/// The function binaries' directory: `bin_dir`, as given (a function missing there is
/// reported as not built, never measured from another build).
fn binaries(opts: &Options) -> PathBuf {
    opts.bin_dir.clone()
}

/// `footprint`: size and start time of every function binary, and the peak RSS of a
/// 1,000-member page.
pub async fn run(scale: &Scale, opts: &Options, dbs: &mut BenchDbs) -> Result<Vec<Row>> {
    let dir = binaries(opts);
    let label = dir.display().to_string();
    {
        let c = dbs.create("fp_b38").await?;
        // The binary reads the system clock: date the page relative to the real today.
        data::b38(
            &c,
            chrono::Utc::now().date_naive(),
            B38Sizes::for_expired(scale.footprint_page),
        )
        .await?;
    }
    let url = dbs.url("fp_b38");
    let reference = reference_start().await;
    let mut rows = Vec::new();
    for f in Function::ALL {
        let bin = binary(&dir, *f);
        let Ok(meta) = std::fs::metadata(&bin) else {
            rows.push(Row::new(
                "footprint",
                format!("{f}: binary"),
                format!("not built in {label} (cargo build --release -p {f})"),
                f64::NAN,
                "MB",
                Some(Target::le(8.0)),
            ));
            continue;
        };
        rows.push(Row::new(
            "footprint",
            format!("{f}: stripped binary size"),
            format!("{label}/{f}: {} bytes", meta.len()),
            // Decimal megabytes, the goal's unit (before 2026-11-24 evening this row
            // printed MiB under the label MB).
            meta.len() as f64 / 1_000_000.0,
            "MB",
            Some(Target::le(8.0)),
        ));
        let mut starts = Vec::new();
        let mut idle = Vec::new();
        for _ in 0..5 {
            let (t, rss) = start_once(&bin, *f, &url).await?;
            starts.push(t);
            idle.push(rss);
        }
        let ready = median(&mut starts);
        idle.sort_by(f64::total_cmp);
        rows.push(Row::new(
            "footprint",
            format!("{f}: process start → ready for the first event"),
            format!(
                "median of 5; RSS when ready {:.1} MB; reference (start and reap `true`) {:.2} ms",
                idle[idle.len() / 2],
                reference.as_secs_f64() * 1000.0
            ),
            ready.as_secs_f64() * 1000.0,
            "ms",
            Some(Target::le(50.0)),
        ));
    }
    let bin = binary(&dir, Function::RemoveExpiredMembers);
    if bin.is_file() {
        let (peak, answer) = page_rss(&bin, &url, opts).await?;
        rows.push(Row::new(
            "footprint",
            format!(
                "remove-expired-members: peak RSS handling a {}-member page",
                scale.footprint_page
            ),
            format!("VmHWM after the response {answer}"),
            peak,
            "MB",
            Some(Target::le(48.0)),
        ));
    }
    dbs.drop_db("fp_b38").await?;
    rows.extend(super::cold_start::with_db(&dir, scale.cold_starts, opts).await?);
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::rss_mb_of_status;

    #[test]
    fn rss_is_read_in_decimal_megabytes_from_kib() {
        let status =
            "Name:\tbootstrap\nVmPeak:\t  20000 kB\nVmHWM:\t   12500 kB\nVmRSS:\t   10000 kB\n";
        let (peak, now) = rss_mb_of_status(status).unwrap();
        // 12,500 KiB = 12,800,000 bytes = 12.8 MB (12.2 MiB); 10,000 KiB = 10.24 MB.
        assert!((peak - 12.8).abs() < 1e-9, "{peak}");
        assert!((now - 10.24).abs() < 1e-9, "{now}");
        assert_eq!(rss_mb_of_status("Name:\tx\nVmRSS:\t1 kB\n"), None);
    }
}
