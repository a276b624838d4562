//! AWS clients pointed at the moto server of the test script.

use aws_config::{BehaviorVersion, Region, SdkConfig};

/// The moto endpoint from the environment.
pub fn moto_endpoint() -> String {
    std::env::var("MOTO_ENDPOINT").unwrap_or_else(|_| {
        panic!("MOTO_ENDPOINT is not set: run the tests through scripts/test.sh, which starts moto on 127.0.0.1")
    })
}

/// SDK configuration for moto (static test credentials, us-east-1).
pub async fn moto_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(shared::aws::https_client(true))
        .endpoint_url(moto_endpoint())
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "moto",
        ))
        .load()
        .await
}

/// Create a queue with a unique name; returns (url, arn).
pub async fn create_queue(sqs: &aws_sdk_sqs::Client, prefix: &str) -> (String, String) {
    let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .expect("create queue")
        .queue_url
        .expect("queue url");
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("queue attributes")
        .attributes
        .and_then(|a| {
            a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .cloned()
        })
        .expect("queue arn");
    (url, arn)
}

/// A loopback HTTP proxy in front of moto that can inject faults the emulator cannot
/// produce: a `SendMessageBatch` entry reported as failed (the entry is withheld from
/// moto, so a retry delivers it exactly once), or whole calls answered with HTTP 500.
pub mod proxy {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    #[derive(Default)]
    struct Plan {
        /// Next N SendMessageBatch calls lose their first entry to a reported failure.
        fail_batch_entries: usize,
        /// Calls whose "METHOD PATH TARGET" contains the key get a 500, N times.
        fail_calls: HashMap<String, usize>,
        /// Every call seen, as "METHOD PATH TARGET".
        seen: Vec<String>,
        /// Every call's signature and request body, in order.
        bodies: Vec<(String, Vec<u8>)>,
    }

    /// The running proxy.
    #[derive(Clone)]
    pub struct FaultProxy {
        /// `http://127.0.0.1:<port>`.
        pub endpoint: String,
        plan: Arc<Mutex<Plan>>,
    }

    struct Req {
        line: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
        h.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
        loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                return Some(i + 4);
            }
            let mut chunk = [0u8; 8192];
            let n = s.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn parse_head(head: &[u8]) -> (String, Vec<(String, String)>) {
        let text = String::from_utf8_lossy(head);
        let mut lines = text.split("\r\n");
        let first = lines.next().unwrap_or_default().to_string();
        let headers = lines
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                l.split_once(':')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            })
            .collect();
        (first, headers)
    }

    async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Req> {
        let end = read_head(s, buf).await?;
        let (line, headers) = parse_head(&buf[..end]);
        let len: usize = header(&headers, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < end + len {
            let mut chunk = [0u8; 8192];
            let n = s.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = buf[end..end + len].to_vec();
        buf.drain(..end + len);
        Some(Req {
            line,
            headers,
            body,
        })
    }

    fn dechunk(mut b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(i) = b.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(String::from_utf8_lossy(&b[..i]).trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            out.extend_from_slice(&b[i + 2..i + 2 + size]);
            b = &b[i + 2 + size + 2..];
        }
        out
    }

    async fn forward(
        upstream: &str,
        req: &Req,
        body: &[u8],
    ) -> (String, Vec<(String, String)>, Vec<u8>) {
        let mut up = TcpStream::connect(upstream).await.expect("moto reachable");
        let mut out = format!("{}\r\n", req.line);
        for (k, v) in &req.headers {
            if !k.eq_ignore_ascii_case("content-length") && !k.eq_ignore_ascii_case("connection") {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        out.push_str(&format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        ));
        up.write_all(out.as_bytes()).await.unwrap();
        up.write_all(body).await.unwrap();
        let mut raw = Vec::new();
        up.read_to_end(&mut raw).await.unwrap();
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("response head")
            + 4;
        let (status, headers) = parse_head(&raw[..end]);
        let chunked = header(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked"));
        let body = if chunked {
            dechunk(&raw[end..])
        } else {
            raw[end..].to_vec()
        };
        (status, headers, body)
    }

    async fn respond(s: &mut TcpStream, status: &str, headers: &[(String, String)], body: &[u8]) {
        let mut out = format!("{status}\r\n");
        for (k, v) in headers {
            let k_l = k.to_ascii_lowercase();
            if k_l != "content-length" && k_l != "transfer-encoding" && k_l != "connection" {
                out.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        out.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        let _ = s.write_all(out.as_bytes()).await;
        let _ = s.write_all(body).await;
    }

    async fn serve(mut s: TcpStream, upstream: String, plan: Arc<Mutex<Plan>>) {
        let mut buf = Vec::new();
        while let Some(req) = read_request(&mut s, &mut buf).await {
            let target = header(&req.headers, "x-amz-target")
                .unwrap_or("")
                .to_string();
            let sig = format!(
                "{} {}",
                req.line.rsplit_once(' ').map(|x| x.0).unwrap_or(&req.line),
                target
            );
            let (fail_call, drop_entry) = {
                let mut p = plan.lock().unwrap();
                p.seen.push(sig.clone());
                p.bodies.push((sig.clone(), req.body.clone()));
                let fail = p
                    .fail_calls
                    .iter_mut()
                    .find(|(k, n)| **n > 0 && sig.contains(k.as_str()))
                    .map(|(_, n)| *n -= 1)
                    .is_some();
                let drop =
                    !fail && target.ends_with("SendMessageBatch") && p.fail_batch_entries > 0;
                if drop {
                    p.fail_batch_entries -= 1;
                }
                (fail, drop)
            };
            if fail_call {
                let h = vec![(
                    "content-type".to_string(),
                    "application/x-amz-json-1.0".to_string(),
                )];
                respond(
                    &mut s,
                    "HTTP/1.1 500 Internal Server Error",
                    &h,
                    br#"{"__type":"InternalFailure","message":"injected failure"}"#,
                )
                .await;
                continue;
            }
            if drop_entry {
                let mut v: Value = serde_json::from_slice(&req.body).expect("json request");
                let removed = v["Entries"].as_array_mut().expect("entries").remove(0);
                let (status, headers, mut r) =
                    if v["Entries"].as_array().is_some_and(|e| e.is_empty()) {
                        // Nothing left to forward (moto rejects an empty batch): answer here.
                        let h = vec![(
                            "content-type".to_string(),
                            "application/x-amz-json-1.0".to_string(),
                        )];
                        (
                            "HTTP/1.1 200 OK".to_string(),
                            h,
                            serde_json::json!({"Successful": []}),
                        )
                    } else {
                        let body = serde_json::to_vec(&v).unwrap();
                        let (status, headers, rbody) = forward(&upstream, &req, &body).await;
                        (
                            status,
                            headers,
                            serde_json::from_slice::<Value>(&rbody).expect("json response"),
                        )
                    };
                let failed = r
                    .as_object_mut()
                    .unwrap()
                    .entry("Failed")
                    .or_insert(Value::Array(vec![]));
                failed.as_array_mut().unwrap().push(serde_json::json!({
                    "Id": removed["Id"], "SenderFault": false, "Code": "InternalError", "Message": "injected entry failure"
                }));
                respond(&mut s, &status, &headers, &serde_json::to_vec(&r).unwrap()).await;
                continue;
            }
            let (status, headers, rbody) = forward(&upstream, &req, &req.body).await;
            respond(&mut s, &status, &headers, &rbody).await;
        }
    }

    impl FaultProxy {
        /// Start a proxy in front of `upstream` (`http://host:port`).
        pub async fn start(upstream: &str) -> FaultProxy {
            let upstream = upstream
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string();
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let endpoint = format!("http://{}", listener.local_addr().unwrap());
            let plan = Arc::new(Mutex::new(Plan::default()));
            let p = plan.clone();
            tokio::spawn(async move {
                while let Ok((s, _)) = listener.accept().await {
                    tokio::spawn(serve(s, upstream.clone(), p.clone()));
                }
            });
            FaultProxy { endpoint, plan }
        }

        /// The next `n` SendMessageBatch calls report their first entry as failed.
        pub fn fail_batch_entries(&self, n: usize) {
            self.plan.lock().unwrap().fail_batch_entries = n;
        }

        /// The next `n` calls whose "METHOD PATH TARGET" contains `pattern` get a 500.
        pub fn fail_calls(&self, pattern: &str, n: usize) {
            self.plan
                .lock()
                .unwrap()
                .fail_calls
                .insert(pattern.to_string(), n);
        }

        /// The JSON request bodies of the calls seen so far whose signature contains
        /// `pattern` (for example `SendMessageBatch`), in order.
        pub fn request_bodies(&self, pattern: &str) -> Vec<Value> {
            self.plan
                .lock()
                .unwrap()
                .bodies
                .iter()
                .filter(|(sig, _)| sig.contains(pattern))
                .map(|(_, b)| serde_json::from_slice(b).expect("a JSON request body"))
                .collect()
        }

        /// Calls seen so far whose signature contains `pattern`.
        pub fn calls(&self, pattern: &str) -> usize {
            self.plan
                .lock()
                .unwrap()
                .seen
                .iter()
                .filter(|s| s.contains(pattern))
                .count()
        }
    }
}

/// SDK configuration for an arbitrary endpoint (a proxy in front of moto).
pub async fn config_for(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(shared::aws::https_client(true))
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "testing", "testing", None, None, "moto",
        ))
        .load()
        .await
}
