//! The workspace's crates in layers, read from the manifests: their path dependencies
//! (every section, dev and build ones too) form no cycle — so the integration tests'
//! support library never depends on a crate whose own tests use it — and point down
//! only: `hk`'s commands (`cli/`) may use the lab and the engine, the lab the engine,
//! the engine neither; no function, neither `shared` nor `checks`, links the engine,
//! the lab, `hk` or the tests.

use super::deps::crates;
use super::*;

/// `x = { path = "…" }` in a manifest line.
fn path_of(line: &str) -> Option<String> {
    let re = Regex::new(r#"\bpath\s*=\s*"([^"]+)""#).unwrap();
    re.captures(line).map(|c| c[1].to_string())
}

/// The dependency name a manifest line declares (`name = …`, `name.workspace = …`).
fn name_of(line: &str) -> Option<String> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') || t.starts_with('[') {
        return None;
    }
    t.split(['=', '.', ' ']).next().map(str::to_string)
}

/// The root's `[workspace.dependencies]` that are path dependencies: name → directory.
fn workspace_paths() -> BTreeMap<String, PathBuf> {
    let r = root();
    let mut section = String::new();
    let mut out = BTreeMap::new();
    for line in read(&r.join("Cargo.toml")).lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.to_string();
            continue;
        }
        if section != "[workspace.dependencies]" {
            continue;
        }
        if let (Some(name), Some(path)) = (name_of(t), path_of(t)) {
            out.insert(name, canonical(&r.join(path)));
        }
    }
    out
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Each workspace crate's path dependencies, from every dependency section of its
/// manifest (`x.workspace = true` resolved through the root's table): crate directory
/// → (dependency directory, section).
fn graph() -> BTreeMap<PathBuf, Vec<(PathBuf, String)>> {
    let shared_paths = workspace_paths();
    let mut out = BTreeMap::new();
    for (dir, manifest) in crates() {
        let mut section = String::new();
        let mut edges = Vec::new();
        for line in manifest.lines() {
            let t = line.trim();
            if t.starts_with('[') {
                section = t.to_string();
                continue;
            }
            if !section.ends_with("dependencies]") {
                continue;
            }
            let Some(name) = name_of(t) else {
                continue;
            };
            let to = match path_of(t) {
                Some(p) => Some(canonical(&dir.join(p))),
                None if t.contains("workspace = true") => shared_paths.get(&name).cloned(),
                None => None,
            };
            if let Some(to) = to {
                edges.push((to, section.clone()));
            }
        }
        out.insert(canonical(&dir), edges);
    }
    out
}

fn short(p: &Path) -> String {
    rel(p.strip_prefix(canonical(&root())).unwrap_or(p))
}

#[test]
fn the_workspace_crates_depend_on_each_other_without_a_cycle() {
    let g = graph();
    let r = canonical(&root());
    // The reading works: hk's known edges are there.
    let hk = &g[&r.join("cli")];
    for to in ["shared", "checks", "engine", "lab", "tests"] {
        assert!(
            hk.iter().any(|(d, _)| *d == r.join(to)),
            "cli/Cargo.toml read without its dependency on {to}: {hk:?}"
        );
    }
    // Depth-first: a dependency already on the path is a cycle.
    fn visit(
        g: &BTreeMap<PathBuf, Vec<(PathBuf, String)>>,
        at: &PathBuf,
        path: &mut Vec<(PathBuf, String)>,
        done: &mut BTreeSet<PathBuf>,
        cycles: &mut Vec<String>,
    ) {
        if done.contains(at) {
            return;
        }
        for (to, section) in g.get(at).into_iter().flatten() {
            if let Some(i) = path.iter().position(|(d, _)| d == to) {
                let mut cycle = short(&path[i].0);
                for (d, s) in &path[i + 1..] {
                    cycle.push_str(&format!(" —{s}→ {}", short(d)));
                }
                cycle.push_str(&format!(" —{section}→ {}", short(to)));
                cycles.push(cycle);
                continue;
            }
            path.push((to.clone(), section.clone()));
            visit(g, to, path, done, cycles);
            path.pop();
        }
        done.insert(at.clone());
    }
    let mut done = BTreeSet::new();
    let mut cycles = Vec::new();
    for start in g.keys() {
        let mut path = vec![(start.clone(), String::new())];
        visit(&g, start, &mut path, &mut done, &mut cycles);
    }
    assert!(
        cycles.is_empty(),
        "workspace crates that depend on each other in a cycle (dev-dependencies count):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_workspace_crates_depend_downwards_only() {
    // (a crate, or `functions` for each function's, and what it must not depend on).
    let forbidden: &[(&str, &[&str])] = &[
        ("shared", &["checks", "engine", "lab", "cli", "tests"]),
        ("checks", &["engine", "lab", "cli", "tests"]),
        ("functions", &["engine", "lab", "cli", "tests"]),
        ("engine", &["lab", "cli", "tests"]),
        ("lab", &["cli", "tests"]),
        ("tests", &["cli"]),
    ];
    let r = canonical(&root());
    let mut bad = Vec::new();
    for (dir, edges) in graph() {
        for (from, never) in forbidden {
            if !dir.starts_with(r.join(from)) {
                continue;
            }
            for (to, section) in &edges {
                if never.iter().any(|n| *to == r.join(n)) {
                    bad.push(format!("{} {section} {}", short(&dir), short(to)));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "dependencies against the layers (commands → lab → engine → checks → shared):\n{}",
        bad.join("\n")
    );
}
