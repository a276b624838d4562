//! A real SMTP sink on 127.0.0.1 for the delivery tests: it speaks ESMTP with
//! STARTTLS (or implicit TLS) using a throwaway certificate of the test CA, accepts
//! `AUTH PLAIN`/`AUTH LOGIN`, and records every accepted message. Rules can reject a
//! recipient with a 4xx or 5xx reply. Nothing leaves the machine.

use std::sync::{Arc, Mutex};

use shared::notify::crypto::decode_m;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use super::certs::TestCa;

/// How the sink offers TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkTls {
    /// Plain greeting, `STARTTLS` advertised.
    StartTls,
    /// TLS from the first byte.
    Implicit,
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

#[derive(Default)]
struct State {
    received: Vec<Received>,
    reject: Vec<(String, u16)>,
    connections: u64,
}

/// The running sink. Dropping it stops accepting.
pub struct SmtpSink {
    /// Its port on 127.0.0.1.
    pub port: u16,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl SmtpSink {
    /// Start a sink on an ephemeral port of 127.0.0.1.
    pub async fn start(tls: SinkTls) -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let acceptor = TestCa::get()
            .issue(&["localhost"], &["127.0.0.1"])
            .acceptor();
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                st.lock().unwrap().connections += 1;
                let st = st.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match tls {
                        SinkTls::Implicit => {
                            if let Ok(s) = acceptor.accept(tcp).await {
                                let _ = session(s, true, true, &st).await;
                            }
                        }
                        SinkTls::StartTls => {
                            if let Ok(Some(tcp)) = session(tcp, false, true, &st).await {
                                // After STARTTLS the client speaks first (EHLO again).
                                if let Ok(s) = acceptor.accept(tcp).await {
                                    let _ = session(s, true, false, &st).await;
                                }
                            }
                        }
                    }
                });
            }
        });
        SmtpSink { port, state, task }
    }

    /// Reply `code` to `RCPT TO` paths containing `needle`.
    pub fn reject(&self, needle: &str, code: u16) {
        self.state
            .lock()
            .unwrap()
            .reject
            .push((needle.to_string(), code));
    }

    /// Every accepted message so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.lock().unwrap().connections
    }
}

async fn reply<W: AsyncWrite + Unpin>(w: &mut W, text: &str) -> std::io::Result<()> {
    w.write_all(text.as_bytes()).await?;
    w.flush().await
}

/// One SMTP session on `stream` (`greet`: send the 220 greeting first). Returns the
/// stream when the client asked for STARTTLS (the caller wraps it in TLS and runs a
/// second session).
async fn session<S>(
    stream: S,
    tls: bool,
    greet: bool,
    st: &Arc<Mutex<State>>,
) -> std::io::Result<Option<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut s = BufReader::new(stream);
    let mut mail_from = String::new();
    let mut rcpt: Vec<String> = Vec::new();
    let mut auth: Option<(String, String)> = None;
    if greet {
        reply(s.get_mut(), "220 sink.test ESMTP ready\r\n").await?;
    }
    let mut line = String::new();
    loop {
        line.clear();
        if s.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let cmd = line.trim_end().to_string();
        let upper = cmd.to_ascii_uppercase();
        if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            let mut r = String::from("250-sink.test\r\n");
            if !tls {
                r.push_str("250-STARTTLS\r\n");
            } else {
                r.push_str("250-AUTH PLAIN LOGIN\r\n");
            }
            r.push_str("250 8BITMIME\r\n");
            reply(s.get_mut(), &r).await?;
        } else if upper == "STARTTLS" && !tls {
            reply(s.get_mut(), "220 2.0.0 go ahead\r\n").await?;
            return Ok(Some(s.into_inner()));
        } else if upper.starts_with("AUTH PLAIN") {
            let arg = cmd[10..].trim();
            let raw = if arg.is_empty() {
                reply(s.get_mut(), "334 \r\n").await?;
                line.clear();
                s.read_line(&mut line).await?;
                decode_m(line.trim()).unwrap_or_default()
            } else {
                decode_m(arg).unwrap_or_default()
            };
            let parts: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|p| String::from_utf8_lossy(p).to_string())
                .collect();
            if parts.len() == 3 {
                auth = Some((parts[1].clone(), parts[2].clone()));
            }
            reply(s.get_mut(), "235 2.7.0 authenticated\r\n").await?;
        } else if upper.starts_with("AUTH LOGIN") {
            reply(s.get_mut(), "334 VXNlcm5hbWU6\r\n").await?;
            line.clear();
            s.read_line(&mut line).await?;
            let user =
                String::from_utf8_lossy(&decode_m(line.trim()).unwrap_or_default()).to_string();
            reply(s.get_mut(), "334 UGFzc3dvcmQ6\r\n").await?;
            line.clear();
            s.read_line(&mut line).await?;
            let pass =
                String::from_utf8_lossy(&decode_m(line.trim()).unwrap_or_default()).to_string();
            auth = Some((user, pass));
            reply(s.get_mut(), "235 2.7.0 authenticated\r\n").await?;
        } else if upper.starts_with("MAIL FROM:") {
            mail_from = path(&cmd[10..]);
            rcpt.clear();
            reply(s.get_mut(), "250 2.1.0 ok\r\n").await?;
        } else if upper.starts_with("RCPT TO:") {
            let p = path(&cmd[8..]);
            let rule = st
                .lock()
                .unwrap()
                .reject
                .iter()
                .find(|(n, _)| p.contains(n.as_str()))
                .map(|(_, c)| *c);
            match rule {
                Some(code) => {
                    reply(s.get_mut(), &format!("{code} rejected <{p}>\r\n")).await?;
                }
                None => {
                    rcpt.push(p);
                    reply(s.get_mut(), "250 2.1.5 ok\r\n").await?;
                }
            }
        } else if upper == "DATA" {
            reply(s.get_mut(), "354 end with <CRLF>.<CRLF>\r\n").await?;
            let mut data = String::new();
            loop {
                line.clear();
                if s.read_line(&mut line).await? == 0 {
                    return Ok(None);
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                let l = line.strip_prefix('.').unwrap_or(&line);
                data.push_str(l);
            }
            st.lock().unwrap().received.push(Received {
                mail_from: mail_from.clone(),
                rcpt_to: std::mem::take(&mut rcpt),
                data,
                tls,
                auth: auth.clone(),
            });
            reply(s.get_mut(), "250 2.0.0 queued\r\n").await?;
        } else if upper == "RSET" || upper == "NOOP" {
            reply(s.get_mut(), "250 2.0.0 ok\r\n").await?;
        } else if upper == "QUIT" {
            reply(s.get_mut(), "221 2.0.0 bye\r\n").await?;
            return Ok(None);
        } else {
            reply(s.get_mut(), "502 5.5.2 command not recognized\r\n").await?;
        }
    }
}

fn path(arg: &str) -> String {
    let a = arg.trim();
    let a = a.split_whitespace().next().unwrap_or("");
    a.trim_start_matches('<').trim_end_matches('>').to_string()
}
