//! The module rules: every module opens with a `//!` header (the tests' too); every
//! `shared` module has exactly one line in ARCHITECTURE.md's code map (a function's
//! module under `batches/` or `workers/`: its header stands for it); the modules of
//! `shared` import each other without a cycle; SQL text lives only in the statement
//! catalogue's `sql` modules, each listed once.

use super::*;

#[test]
fn every_module_has_a_header_saying_what_it_owns() {
    let r = root();
    let mut bad = Vec::new();
    for dir in [
        "shared/src",
        "cli/src",
        "checks/src",
        "engine/src",
        "lab/src",
        "functions",
        "tests",
        "cli/tests",
    ] {
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
        // A function's module (declared by its row of the function table) has its
        // `//!` header as its entry: the code map's line for its folder says so.
        let function_module = ["shared/src/batches/", "shared/src/workers/"]
            .iter()
            .any(|f| m.starts_with(f) && m != *f);
        if n != 1 && !(function_module && n == 0) {
            bad.push(format!("{m}: {n} lines"));
        }
    }
    assert!(
        bad.is_empty(),
        "each shared module needs exactly one code-map line (`* `path` — …`), a \
         function's module under batches/ or workers/ none or one:\n{}",
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
