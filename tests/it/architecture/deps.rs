//! The dependency rules: only `shared::lambda` names the Lambda crates; no function
//! crate, not `shared` and not `checks` (which the `hk-check` function links) depends
//! on `hk`; `shared` carries no local-tooling
//! dependency; every declared dependency is used.

use super::*;

/// The crates of the workspace, as the root Cargo.toml's `members` lists them (a
/// `dir/*` entry: each folder under `dir` with a Cargo.toml): (directory, Cargo.toml
/// text), sorted by directory.
pub(super) fn crates() -> Vec<(PathBuf, String)> {
    let r = root();
    let manifest = read(&r.join("Cargo.toml"));
    let start = manifest
        .find("members = [")
        .expect("the workspace lists its members");
    let list = &manifest[start..];
    let list = &list[..list.find(']').expect("members end with ]")];
    let mut dirs = Vec::new();
    for line in list.lines() {
        let t = line.trim();
        if t.starts_with('#') {
            continue;
        }
        let Some(member) = t.split('"').nth(1) else {
            continue;
        };
        match member.strip_suffix("/*") {
            Some(parent) => dirs.extend(
                std::fs::read_dir(r.join(parent))
                    .unwrap()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join("Cargo.toml").exists()),
            ),
            None => dirs.push(r.join(member)),
        }
    }
    dirs.sort();
    assert!(
        dirs.len() > 6,
        "the workspace's members were not read: {dirs:?}"
    );
    dirs.into_iter()
        .map(|d| {
            let t = read(&d.join("Cargo.toml"));
            (d, t)
        })
        .collect()
}

/// The dependency names of a manifest's `[dependencies]` (and, with `dev`, its
/// `[dev-dependencies]`), with their whole lines.
fn dependencies(manifest: &str, dev: bool) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.to_string();
            continue;
        }
        let wanted = section == "[dependencies]" || (dev && section == "[dev-dependencies]");
        if !wanted || t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(name) = t.split(['=', '.', ' ']).next() {
            out.push((name.to_string(), t.to_string()));
        }
    }
    out
}

#[test]
fn only_shared_lambda_names_the_lambda_crates() {
    let r = root();
    let mut bad = Vec::new();
    for f in rust_files(&r.join("shared/src"))
        .into_iter()
        .chain(rust_files(&r.join("functions")))
    {
        if rel(&f) == "shared/src/lambda.rs" {
            continue;
        }
        let code = code_only(&read(&f));
        for name in ["lambda_runtime", "aws_lambda_events"] {
            if code.contains(name) {
                bad.push(format!("{} names {name}", rel(&f)));
            }
        }
    }
    for (dir, manifest) in crates() {
        if dir.starts_with(r.join("functions")) {
            for (dep, _) in dependencies(&manifest, true) {
                if dep == "lambda_runtime" || dep == "aws_lambda_events" {
                    bad.push(format!("{} depends on {dep}", rel(&dir)));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "only shared::lambda may name the Lambda crates:\n{}",
        bad.join("\n")
    );
}

#[test]
fn no_function_crate_and_not_shared_depends_on_hk() {
    let r = root();
    let mut bad = Vec::new();
    for (dir, manifest) in crates() {
        let production = dir == r.join("shared")
            || dir == r.join("checks")
            || dir.starts_with(r.join("functions"));
        if !production {
            continue;
        }
        for (dep, line) in dependencies(&manifest, true) {
            if dep == "hk" || line.contains("\"../cli\"") || line.contains("\"../../cli\"") {
                bad.push(format!("{}: {line}", rel(&dir)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the Lambda build must not link hk:\n{}",
        bad.join("\n")
    );
}

#[test]
fn shared_carries_no_local_tooling_dependency() {
    let manifest = read(&root().join("shared/Cargo.toml"));
    let deps = dependencies(&manifest, false);
    let mut bad = Vec::new();
    for (dep, line) in &deps {
        if [
            "rand_chacha",
            "rand",
            "refinery",
            "reqwest",
            "clap",
            "anyhow",
        ]
        .contains(&dep.as_str())
        {
            bad.push(line.clone());
        }
        if dep == "tokio" && line.contains("\"process\"") {
            bad.push(format!("{line} (process spawning)"));
        }
    }
    assert!(
        bad.is_empty(),
        "shared/Cargo.toml has local-tooling dependencies:\n{}",
        bad.join("\n")
    );
}

/// Where a dependency's crate name appears in a crate's sources.
fn uses(dir: &Path, name: &str) -> bool {
    let ident = name.replace('-', "_");
    let re = Regex::new(&format!(r"\b{ident}(::|\s*;|\s*\{{|!)")).unwrap();
    let files = rust_files(dir);
    files.iter().any(|f| re.is_match(&read(f)))
}

#[test]
fn no_declared_dependency_is_unused() {
    // Used without being named in code, each for a stated reason.
    let by_features: &[(&str, &str)] = &[
        // Feature switch of native-tls (vendored OpenSSL for the Lambda build).
        ("shared", "native-tls"),
        // The codec of the Gitaly client that build.rs generates into OUT_DIR.
        ("shared", "tonic-prost"),
    ];
    let mut bad = Vec::new();
    for (dir, manifest) in crates() {
        let krate = dir.file_name().unwrap().to_string_lossy().to_string();
        for (dep, _) in dependencies(&manifest, true) {
            if by_features.contains(&(krate.as_str(), dep.as_str())) {
                continue;
            }
            if !uses(&dir, &dep) {
                bad.push(format!("{}: {dep}", rel(&dir.join("Cargo.toml"))));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "declared but never used:\n{}",
        bad.join("\n")
    );
}
