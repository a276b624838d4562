//! The architecture's invariants, read from the source tree (no database), by concern:
//!
//! * `deps`: only `shared::lambda` names the Lambda crates; no function crate and not
//!   `shared` depends on `hk`; `shared` carries no local-tooling dependency; no declared
//!   dependency unused.
//! * `layers`: the workspace crates' dependencies form no cycle (dev ones included)
//!   and point down only: commands → lab → engine → checks → shared.
//! * `modules`: every module (the tests' too) has its `//!` header and every `shared`
//!   module exactly one line in ARCHITECTURE.md's code map; the modules of `shared`
//!   import each other without a cycle; no SQL text in `shared` outside the statement
//!   catalogue's `sql` modules, and the catalogue lists every `sql` module.
//! * `size`: no Rust file over 600 lines, in the product or in the tests.
//! * `docs`: every `behaviour §…` citation resolves in docs/behaviour.md.
//! * `jobs`: no job's dependency is an `Option`; no message type written outside the
//!   function table.
//!
//! Each check names the file and the rule it found broken. Here: the tree as files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

mod deps;
mod docs;
mod jobs;
mod layers;
mod modules;
mod size;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The text without `//` comments and without the `#[cfg(test)]` module at the end.
fn code_only(text: &str) -> String {
    let body = match text.find("\n#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.trim_start().starts_with("//") {
            true => "",
            false => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}
