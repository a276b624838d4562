//! The Gitaly stand-in of the storage tests: `gitaly_stub.py` next to this file
//! (grpcio), a child process serving `gitaly.RepositoryService/RemoveRepository` on
//! 127.0.0.1 with Gitaly's answers (described in the script), its request messages
//! generated at start from Gitaly's own published protos (Debian's
//! golang-gitaly-proto-dev). Repositories are directories under one root per storage;
//! every call is recorded. Nothing leaves the machine.
//!
//! The child runs with `HK_TEST_PYTHON` (scripts/test.sh sets it), by default
//! `<repo>/.venv/bin/python`, with grpcio and grpcio-tools (requirements-dev.txt).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::python;
use crate::wait;

/// One RemoveRepository call as the stub saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitalyCall {
    /// `repository.storage_name`.
    pub storage: String,
    /// `repository.relative_path`.
    pub relative_path: String,
    /// `repository.gl_repository`.
    pub gl_repository: String,
    /// Whether the token was accepted; `None` when the stub has no token.
    pub authorized: Option<bool>,
    /// The gRPC status code name of the answer (`OK`, `NOT_FOUND`, …).
    pub code: String,
}

/// The running stub. Dropping it kills the child and removes its directory.
pub struct GitalyStub {
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: PathBuf,
    child: Child,
}

impl Drop for GitalyStub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl GitalyStub {
    /// Start a stub serving `storages`, checking Gitaly v2 tokens of `token` (none:
    /// every call is accepted); waits, bounded, until it listens.
    pub async fn start(storages: &[&str], token: Option<&str>) -> GitalyStub {
        let dir = std::env::temp_dir().join(format!("hk-gitaly-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = serde_json::json!({ "storages": storages, "token": token });
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        let log = std::fs::File::create(dir.join("stub.log")).unwrap();
        let python = python();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sinks/gitaly_stub.py");
        let child = Command::new(&python)
            .arg(&script)
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run the Gitaly stub with {} (set HK_TEST_PYTHON to a Python \
                     with grpcio and grpcio-tools, see requirements-dev.txt): {e}",
                    python.display()
                )
            });
        let mut stub = GitalyStub {
            port: 0,
            dir,
            child,
        };
        let port_file = stub.dir.join("port");
        let log_file = stub.dir.join("stub.log");
        let child = &mut stub.child;
        stub.port = wait::until(
            "the Gitaly stub to listen on 127.0.0.1",
            wait::SERVER_LISTEN,
            || {
                let exited = child.try_wait().ok().flatten();
                let port = std::fs::read_to_string(&port_file)
                    .ok()
                    .and_then(|p| p.trim().parse::<u16>().ok());
                if let (None, Some(status)) = (port, exited) {
                    panic!(
                        "the Gitaly stub exited ({status}) before listening; its log:\n{}",
                        std::fs::read_to_string(&log_file).unwrap_or_default()
                    );
                }
                async move { port }
            },
        )
        .await;
        stub
    }

    /// Its address as GitLab writes it: `tcp://127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    fn path(&self, storage: &str, relative_path: &str) -> PathBuf {
        self.dir.join("storages").join(storage).join(relative_path)
    }

    /// Create a (bare-looking) repository directory on `storage`.
    pub fn create_repo(&self, storage: &str, relative_path: &str) {
        let path = self.path(storage, relative_path);
        std::fs::create_dir_all(path.join("objects")).unwrap();
        std::fs::create_dir_all(path.join("refs")).unwrap();
        std::fs::write(path.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    /// Whether the repository directory exists on `storage`.
    pub fn exists(&self, storage: &str, relative_path: &str) -> bool {
        self.path(storage, relative_path).exists()
    }

    /// Every call so far, in order (complete lines only).
    pub fn calls(&self) -> Vec<GitalyCall> {
        let text = std::fs::read_to_string(self.dir.join("calls.jsonl")).unwrap_or_default();
        let text_of =
            |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
        text.split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                GitalyCall {
                    storage: text_of(&v, "storage"),
                    relative_path: text_of(&v, "relative_path"),
                    gl_repository: text_of(&v, "gl_repository"),
                    authorized: v["authorized"].as_bool(),
                    code: text_of(&v, "code"),
                }
            })
            .collect()
    }
}
