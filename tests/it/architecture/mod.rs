//! The architecture's invariants, read from the source tree (no database): only
//! `shared::lambda` names the Lambda crates; no function crate and not `shared` depends
//! on `hk`; `shared` carries no local-tooling dependency; every module has its `//!`
//! header and every `shared` module exactly one line in ARCHITECTURE.md's code map; the
//! modules of `shared` import each other without a cycle; no SQL text in `shared`
//! outside the statement catalogue's `sql` modules; no declared dependency unused; no
//! oversized file; every `behaviour §…` citation resolves in docs/behaviour.md.
//!
//! Each check names the file and the rule it found broken.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

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

/// The crates of the workspace: (directory, Cargo.toml text).
fn crates() -> Vec<(PathBuf, String)> {
    let r = root();
    let mut dirs = vec![r.join("shared"), r.join("cli"), r.join("tests")];
    let mut fns: Vec<PathBuf> = std::fs::read_dir(r.join("functions"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    fns.sort();
    dirs.extend(fns);
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
        let production = dir == r.join("shared") || dir.starts_with(r.join("functions"));
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

#[test]
fn every_module_has_a_header_saying_what_it_owns() {
    let r = root();
    let mut bad = Vec::new();
    for dir in ["shared/src", "cli/src", "functions"] {
        for f in rust_files(&r.join(dir)) {
            if !read(&f).starts_with("//!") {
                bad.push(rel(&f));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "modules without a `//!` header:\n{}",
        bad.join("\n")
    );
}

/// The modules of `shared` as the code map lists them: each file or folder directly
/// under `src/`, and each file or folder directly under a folder module, without the
/// `sql` submodules (they belong to their module) and `mod.rs`/`lib.rs`.
fn shared_modules() -> Vec<String> {
    let src = root().join("shared/src");
    let mut out = Vec::new();
    let entry = |p: &Path| -> Option<String> {
        let name = p.file_name()?.to_str()?.to_string();
        if name == "mod.rs" || name == "lib.rs" || name == "sql.rs" || name == "sql" {
            return None;
        }
        if p.is_dir() {
            // A folder that only holds a file module's `sql.rs` is that module's.
            if !p.join("mod.rs").exists() {
                return None;
            }
            return Some(format!("{}/", rel(p)));
        }
        Some(rel(p))
    };
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let p = e.path();
        if let Some(m) = entry(&p) {
            out.push(m);
        }
        if p.is_dir() && p.join("mod.rs").exists() {
            for e2 in std::fs::read_dir(&p).unwrap().flatten() {
                if let Some(m) = entry(&e2.path()) {
                    out.push(m);
                }
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_shared_module_has_exactly_one_line_in_the_code_map() {
    let arch = read(&root().join("ARCHITECTURE.md"));
    let start = arch
        .find("## Code map")
        .expect("ARCHITECTURE.md has a code map");
    let end = arch[start + 3..]
        .find("\n## ")
        .map(|i| start + 3 + i)
        .unwrap_or(arch.len());
    let lines: Vec<&str> = arch[start..end]
        .lines()
        .filter(|l| l.starts_with("* "))
        .collect();
    let mut bad = Vec::new();
    for m in shared_modules() {
        let needle = format!("`{m}`");
        let n = lines.iter().filter(|l| l.contains(&needle)).count();
        if n != 1 {
            bad.push(format!("{m}: {n} lines"));
        }
    }
    assert!(
        bad.is_empty(),
        "each shared module needs exactly one code-map line (`* `path` — …`):\n{}",
        bad.join("\n")
    );
}

/// The module a file of `shared/src` belongs to, as [`shared_modules`] names them.
fn unit_of_path(segments: &[&str], modules: &BTreeSet<String>) -> Option<String> {
    // Longest listed prefix: `batches/pat_expiring/` before `batches/`.
    for n in (1..=segments.len().min(2)).rev() {
        let base = format!("shared/src/{}", segments[..n].join("/"));
        for cand in [format!("{base}/"), format!("{base}.rs")] {
            if modules.contains(&cand) {
                return Some(cand);
            }
        }
    }
    None
}

#[test]
fn the_modules_of_shared_import_each_other_without_a_cycle() {
    let src = root().join("shared/src");
    let modules: BTreeSet<String> = shared_modules().into_iter().collect();
    let path_re = Regex::new(r"crate::([a-z_]+)(?:::([a-z_]+))?").unwrap();
    let group_re = Regex::new(r"crate::\{([^}]*)\}").unwrap();
    let rel_re = Regex::new(r"\b((?:super::)+|self::)(\{[^}]*\}|[a-z_]+)").unwrap();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in rust_files(&src) {
        let relp = f.strip_prefix(&src).unwrap();
        let segs: Vec<String> = relp
            .iter()
            .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
            .filter(|s| s != "mod" && s != "sql")
            .collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        let Some(from) = unit_of_path(&segs, &modules) else {
            continue;
        };
        let code = code_only(&read(&f));
        let mut targets: Vec<Vec<String>> = path_re
            .captures_iter(&code)
            .map(|c| {
                c.iter()
                    .skip(1)
                    .flatten()
                    .map(|m| m.as_str().to_string())
                    .collect()
            })
            .collect();
        for g in group_re.captures_iter(&code) {
            for item in g[1].split(',') {
                let parts: Vec<String> = item
                    .trim()
                    .split("::")
                    .take(2)
                    .map(|s| {
                        s.trim_matches(|c: char| !c.is_alphanumeric() && c != '_')
                            .to_string()
                    })
                    .filter(|s| !s.is_empty())
                    .collect();
                if !parts.is_empty() {
                    targets.push(parts);
                }
            }
        }
        // `super::x` and `self::x`, relative to the file's own module path.
        let own: Vec<String> = segs.iter().map(|s| s.to_string()).collect();
        for c in rel_re.captures_iter(&code) {
            let (prefix, rest) = (&c[1], c[2].to_string());
            let ups = prefix.matches("super::").count();
            if ups > own.len() {
                continue;
            }
            let mut t: Vec<String> = own[..own.len() - ups].to_vec();
            let names: Vec<String> = if rest.starts_with('{') {
                rest.trim_matches(|ch| ch == '{' || ch == '}')
                    .split(',')
                    .filter_map(|i| i.trim().split("::").next().map(str::to_string))
                    .filter(|n| !n.is_empty())
                    .collect()
            } else {
                vec![rest]
            };
            for n in names {
                let mut tt = t.clone();
                tt.push(n);
                targets.push(tt);
            }
            t.clear();
        }
        for t in targets {
            let t: Vec<&str> = t.iter().map(String::as_str).collect();
            if let Some(to) = unit_of_path(&t, &modules) {
                // A folder module's own children are part of it.
                if to != from
                    && !(to.starts_with(&from) && from.ends_with('/'))
                    && !(from.starts_with(&to) && to.ends_with('/'))
                {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let i = stack.iter().position(|s| s == m).unwrap();
                    let mut c = stack[i..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(cycle) = visit(n, &edges, &mut state, &mut stack) {
                panic!(
                    "import cycle between shared's modules: {}",
                    cycle.join(" -> ")
                );
            }
        }
    }
    assert!(
        edges.len() > 10,
        "the import graph was read ({} modules with imports)",
        edges.len()
    );
}

#[test]
fn no_sql_text_in_shared_outside_the_catalogue() {
    let sql = Regex::new(
        r#""[^"]*\b(SELECT\s+[a-z0-9_*(]|INSERT\s+INTO|UPDATE\s+[a-z_]+\s|DELETE\s+FROM|LOCK\s+TABLE|SET\s+LOCAL|SAVEPOINT|ROLLBACK|COMMIT|WITH\s+[a-z_]+\s+AS)"#,
    )
    .unwrap();
    let mut bad = Vec::new();
    for f in rust_files(&root().join("shared/src")) {
        let in_catalogue = f.file_name().is_some_and(|n| n == "sql.rs")
            || f.components().any(|c| c.as_os_str() == "sql");
        if in_catalogue {
            continue;
        }
        let code = code_only(&read(&f));
        for (i, line) in code.lines().enumerate() {
            if sql.is_match(line) {
                bad.push(format!("{}:{}: {}", rel(&f), i + 1, line.trim()));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "SQL outside the statement catalogue (move it to the module's `sql`):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_catalogue_lists_every_sql_module_once_and_every_name_once() {
    let all = shared::catalogue::all();
    assert!(
        all.len() > 100,
        "the catalogue holds {} statements",
        all.len()
    );
    let mut seen = BTreeSet::new();
    for s in &all {
        assert!(
            seen.insert((s.module, s.name)),
            "{}::{} listed twice",
            s.module,
            s.name
        );
    }
    // Every `sql` module of the tree is in the list.
    let src = root().join("shared/src");
    let listed: BTreeSet<&str> = all.iter().map(|s| s.module).collect();
    for f in rust_files(&src) {
        if f.file_name().is_some_and(|n| n == "sql.rs") {
            let text = read(&f);
            if !text.contains("statements!") {
                continue;
            }
            let module = f
                .parent()
                .unwrap()
                .strip_prefix(&src)
                .unwrap()
                .iter()
                .map(|s| s.to_string_lossy().to_string())
                .collect::<Vec<_>>()
                .join("::");
            assert!(
                listed.contains(module.as_str()),
                "{} is not in catalogue::MODULES",
                rel(&f)
            );
        }
    }
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

#[test]
fn no_source_file_is_oversized() {
    // Over 600 lines, each for a stated reason.
    let allowed: &[(&str, &str)] = &[];
    let mut bad = Vec::new();
    for dir in ["shared/src", "cli/src"] {
        for f in rust_files(&root().join(dir)) {
            let n = read(&f).lines().count();
            if n > 600 && !allowed.iter().any(|(p, _)| *p == rel(&f)) {
                bad.push(format!("{} ({n} lines)", rel(&f)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "files over 600 lines (split them, or list them here with the reason):\n{}",
        bad.join("\n")
    );
}

/// Every tracked text file a citation can live in.
fn doc_and_code_files() -> Vec<PathBuf> {
    let r = root();
    let skip = [
        "target",
        ".git",
        ".venv",
        ".venv-sam",
        ".venv-checkov",
        "node_modules",
        ".aws-sam",
        ".dev",
    ];
    let exts = ["rs", "md", "sh", "yaml", "yml", "toml", "sql", "txt"];
    let mut out = Vec::new();
    let mut stack = vec![r.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if !skip.contains(&name.as_str()) && !name.starts_with(".pg") {
                    stack.push(p);
                }
            } else if p
                .extension()
                .is_some_and(|x| exts.contains(&x.to_string_lossy().as_ref()))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_behaviour_citation_resolves_and_no_citation_leaves_the_repository() {
    let r = root();
    let doc = read(&r.join("docs/behaviour.md"));
    let anchor = Regex::new(r#"<a id="([a-z0-9.]+)"></a>"#).unwrap();
    let anchors: BTreeSet<String> = anchor
        .captures_iter(&doc)
        .map(|c| c[1].to_string())
        .collect();
    assert!(
        anchors.len() > 50,
        "docs/behaviour.md has {} anchors",
        anchors.len()
    );
    let token = Regex::new(
        r"§(B(?:28|38|43|51|70)(?:\.[0-9]+)*|D[0-9]+|S(?:[0-9]+(?:\.[0-9]+)*)?|R[0-9]+|[0-9]+(?:\.[0-9]+)*)",
    )
    .unwrap();
    let old = Regex::new(
        r"⚑|\b(?:common|schema)\.md|\b(?:b28-pat-expiring|b38-remove-expired-members|b43-prune-deletions|b51-adjourned-group-deletion|b70-placeholder-user-cleanup)\.md|shared/(?:spec|seeds|guides)\b",
    )
    .unwrap();
    let mut bad = Vec::new();
    for f in doc_and_code_files() {
        if rel(&f) == "tests/it/architecture/mod.rs" {
            continue;
        }
        let text = read(&f);
        for (i, line) in text.lines().enumerate() {
            for c in token.captures_iter(line) {
                let id = c[1].trim_end_matches('.');
                let a = if id.starts_with(|ch: char| ch.is_ascii_digit()) {
                    format!("c{id}")
                } else {
                    id.to_lowercase()
                };
                if !anchors.contains(&a) {
                    bad.push(format!(
                        "{}:{}: §{id} has no section in docs/behaviour.md",
                        rel(&f),
                        i + 1
                    ));
                }
            }
            if old.is_match(line) {
                bad.push(format!(
                    "{}:{}: cites a document outside the repository: {}",
                    rel(&f),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
