//! The SMTP sink of the delivery tests: aiosmtpd (a real SMTP server nobody here
//! wrote) run as a child process on 127.0.0.1 by `smtp_sink.py` next to this file. It
//! speaks ESMTP with STARTTLS (or implicit TLS, or none) using a throwaway certificate of the
//! test CA, accepts `AUTH PLAIN`/`AUTH LOGIN` (any credentials, or only those given to
//! [`SmtpSink::require_auth`]: 535 otherwise), and records every accepted message.
//! Rules can reject a recipient with a 4xx or 5xx reply. Nothing leaves the machine.
//!
//! The child runs with the Python of the test tools' venv: `HK_TEST_PYTHON`
//! (scripts/test.sh sets it), by default `<repo>/.venv/bin/python`. It talks to this
//! side through files in a directory of its own (described in `smtp_sink.py`): the
//! rules it reads, the connections and messages it appends, the port it listens on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use shared::notify::crypto::decode_m;

use super::certs::TestCa;
use super::python;
use crate::wait;

/// How the sink offers TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkTls {
    /// Plain greeting, `STARTTLS` advertised.
    StartTls,
    /// TLS from the first byte.
    Implicit,
    /// No TLS at all: `STARTTLS` not advertised, `AUTH` accepted in plain text (an
    /// internal relay).
    Plain,
}

/// A message the sink accepted.
#[derive(Debug, Clone)]
pub struct Received {
    /// `MAIL FROM` path.
    pub mail_from: String,
    /// `RCPT TO` paths.
    pub rcpt_to: Vec<String>,
    /// The message (headers and body), dot-unstuffed, CRLF line ends.
    pub data: String,
    /// Whether the transaction ran over TLS.
    pub tls: bool,
    /// `(username, password)` when the client authenticated.
    pub auth: Option<(String, String)>,
}

impl Received {
    /// A header's value (first occurrence, unfolded), case-insensitive.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next().unwrap_or("");
        let mut fields: Vec<(String, String)> = Vec::new();
        for line in head.split("\r\n") {
            if line.starts_with(' ') || line.starts_with('\t') {
                if let Some((_, v)) = fields.last_mut() {
                    v.push(' ');
                    v.push_str(line.trim());
                }
            } else if let Some((k, v)) = line.split_once(':') {
                fields.push((k.trim().to_string(), v.trim().to_string()));
            }
        }
        fields
            .into_iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// The body after the header block, as transferred.
    pub fn body(&self) -> &str {
        self.data
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or("")
    }

    /// The body decoded from its `Content-Transfer-Encoding` (quoted-printable,
    /// base64, or none).
    pub fn text(&self) -> String {
        let cte = self
            .header("Content-Transfer-Encoding")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let raw = self.body();
        let bytes = match cte.as_str() {
            "base64" => decode_m(raw).unwrap_or_default(),
            "quoted-printable" => {
                let joined = raw.replace("=\r\n", "");
                let b = joined.as_bytes();
                let mut out = Vec::with_capacity(b.len());
                let mut i = 0;
                while i < b.len() {
                    if b[i] == b'=' && i + 2 < b.len() {
                        let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                        if let Ok(v) = u8::from_str_radix(hex, 16) {
                            out.push(v);
                            i += 3;
                            continue;
                        }
                    }
                    out.push(b[i]);
                    i += 1;
                }
                out
            }
            _ => raw.as_bytes().to_vec(),
        };
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// The running sink: an aiosmtpd child process. Dropping it kills the child.
pub struct SmtpSink {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    child: Child,
    reject: Mutex<Vec<(String, u16)>>,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl SmtpSink {
    /// Start a sink on a free port of 127.0.0.1 (the child binds port 0 and reports
    /// the port it got); waits, bounded, until it listens.
    pub async fn start(tls: SinkTls) -> SmtpSink {
        Self::start_on(tls, 0).await
    }

    /// Start a sink on `port` of 127.0.0.1 (0: any free port); waits, bounded, until
    /// it listens.
    pub async fn start_on(tls: SinkTls, port: u16) -> SmtpSink {
        let mut sink = Self::spawn(tls, port, false);
        sink.listening().await;
        sink
    }

    /// A sink for `port` that does not listen yet: its process is started and ready,
    /// and [`SmtpSink::open`] makes it listen at once (an SMTP outage that ends when
    /// the test says so). Until then nothing listens on the port.
    pub fn closed_on(tls: SinkTls, port: u16) -> SmtpSink {
        let mut sink = Self::spawn(tls, port, true);
        sink.port = port;
        sink
    }

    /// Open the port of a [`SmtpSink::closed_on`] sink; waits, bounded, until it listens.
    pub async fn open(&mut self) {
        std::fs::remove_file(self.dir.join("hold")).unwrap();
        self.listening().await;
    }

    fn spawn(tls: SinkTls, port: u16, hold: bool) -> SmtpSink {
        let dir = std::env::temp_dir().join(format!("hk-smtp-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        if hold {
            std::fs::write(dir.join("hold"), b"").unwrap();
        }
        let leaf = TestCa::get().issue(&["localhost"], &["127.0.0.1"]);
        std::fs::write(dir.join("cert.pem"), &leaf.cert_pem).unwrap();
        std::fs::write(dir.join("key.pem"), &leaf.key_pem).unwrap();
        let log = std::fs::File::create(dir.join("sink.log")).unwrap();
        let python = python();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sinks/smtp_sink.py");
        let mode = match tls {
            SinkTls::StartTls => "starttls",
            SinkTls::Implicit => "implicit",
            SinkTls::Plain => "plain",
        };
        let child = Command::new(&python)
            .arg(&script)
            .arg(&dir)
            .arg(mode)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run the SMTP sink with {} (set HK_TEST_PYTHON to a Python \
                     with aiosmtpd, see requirements-dev.txt): {e}",
                    python.display()
                )
            });
        SmtpSink {
            port: 0,
            dir,
            child,
            reject: Mutex::new(Vec::new()),
        }
    }

    /// Wait until the child listens and take its port.
    async fn listening(&mut self) {
        let what = "the SMTP sink (aiosmtpd) to listen on 127.0.0.1";
        let port_file = self.dir.join("port");
        let log_file = self.dir.join("sink.log");
        let child = &mut self.child;
        self.port = wait::until(what, wait::SERVER_LISTEN, || {
            let exited = child.try_wait().ok().flatten();
            let port = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|p| p.trim().parse::<u16>().ok());
            if let (None, Some(status)) = (port, exited) {
                panic!(
                    "the SMTP sink exited ({status}) before listening; its log:\n{}",
                    std::fs::read_to_string(&log_file).unwrap_or_default()
                );
            }
            async move { port }
        })
        .await;
    }

    /// Reply `code` to `RCPT TO` paths containing `needle`.
    pub fn reject(&self, needle: &str, code: u16) {
        let mut rules = self.reject.lock().unwrap();
        rules.push((needle.to_string(), code));
        // Replaced atomically: the sink reads the file at every RCPT.
        let tmp = self.dir.join("rules.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&*rules).unwrap()).unwrap();
        std::fs::rename(&tmp, self.dir.join("rules.json")).unwrap();
    }

    /// From now on accept only `username`/`password` at `AUTH` (535 otherwise), e.g.
    /// a password rotation between two sends.
    pub fn require_auth(&self, username: &str, password: &str) {
        let tmp = self.dir.join("auth.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&[username, password]).unwrap()).unwrap();
        std::fs::rename(&tmp, self.dir.join("auth.json")).unwrap();
    }

    /// Refused `AUTH` attempts so far.
    pub fn auth_failures(&self) -> u64 {
        self.events()
            .iter()
            .filter(|e| e.get("auth_failed").is_some())
            .count() as u64
    }

    /// What the sink recorded so far, one JSON object per event (complete lines only).
    fn events(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join("events.jsonl")).unwrap_or_default();
        text.split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| serde_json::from_str(l).expect("a line of the SMTP sink's events"))
            .collect()
    }

    /// Every accepted message so far.
    pub fn received(&self) -> Vec<Received> {
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        self.events()
            .iter()
            .filter(|e| e.get("connect").is_none() && e.get("auth_failed").is_none())
            .map(|e| Received {
                mail_from: s(&e["mail_from"]),
                rcpt_to: e["rcpt_to"]
                    .as_array()
                    .map(|a| a.iter().map(s).collect())
                    .unwrap_or_default(),
                data: s(&e["data"]),
                tls: e["tls"].as_bool().unwrap_or(false),
                auth: e["auth"].as_array().map(|a| (s(&a[0]), s(&a[1]))),
            })
            .collect()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.events()
            .iter()
            .filter(|e| e.get("connect").is_some())
            .count() as u64
    }
}
