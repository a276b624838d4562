//! The modules each function can run code of, read from `shared/src` at build time
//! (issue 52): the import graph of the crate's modules (`crate::…`, `super::…`,
//! `self::…` paths, `use` groups included, and a child module named by a bare path),
//! walked from each function's job module (the `job:` of its row in `function.rs`) and
//! from `lambda`, the glue around it. The cold-start schema check PREPAREs the
//! statements of these modules only (`crate::catalogue::for_function`).
//!
//! It also lists the job modules that have a `sql` submodule (`<module>/sql.rs`
//! declaring `statements!`), so the catalogue takes a function's own statements from
//! its row, not from a hand-written line (`crate::catalogue`).
//!
//! Owns: the scan and the generated tables, nothing else. `catalogue` and `preflight`
//! are not walked through: the one lists every statement and the other PREPAREs them,
//! neither runs one for a job. Generous by design: a module a job imports counts whole.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Modules that name every statement without running any.
const LISTERS: &[&str] = &["catalogue", "preflight"];

/// The glue every function binary runs around its job (its session's statements).
const ROOT: &str = "lambda";

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `gitlab/membership/sql.rs` → `["gitlab", "membership"]`: a file's module, its `sql`
/// submodule (and what nests in it) counted as its owner's.
fn node_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|s| s != "mod" && s != "lib")
        .collect();
    if let Some(i) = segs.iter().position(|s| s == "sql") {
        segs.truncate(i);
    }
    segs
}

/// The source without `//` comments (doc links are no imports).
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &[u8], mut i: usize) -> (String, usize) {
    let start = i;
    while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&s[start..i]).into_owned(), i)
}

/// Parse a path or use tree at `i` (after its prefix), pushing every full path onto
/// `out` with `base` before it; the index after it.
fn tree(s: &[u8], mut i: usize, base: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = base.to_vec();
    loop {
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < s.len() && s[i] == b'{' {
            i += 1;
            loop {
                while i < s.len() && (s[i].is_ascii_whitespace() || s[i] == b',') {
                    i += 1;
                }
                if i >= s.len() || s[i] == b'}' {
                    return i + 1;
                }
                let before = i;
                i = tree(s, i, &path, out);
                // `self`, `*` or `Name as Other`: skip to the next item.
                while i < s.len() && s[i] != b',' && s[i] != b'}' {
                    i += 1;
                }
                if i == before {
                    i += 1;
                }
            }
        }
        let (name, next) = ident(s, i);
        if name.is_empty() {
            out.push(path);
            return i;
        }
        if name != "self" {
            path.push(name);
        }
        i = next;
        if s[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The module paths `code` (of module `own`) names.
fn references(code: &str, own: &[String]) -> Vec<Vec<String>> {
    let s = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let word_start = i == 0 || !(s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_');
        if word_start && s[i..].starts_with(b"crate::") {
            i = tree(s, i + 7, &[], &mut out);
        } else if word_start && (s[i..].starts_with(b"super::") || s[i..].starts_with(b"self::")) {
            let mut base = own.to_vec();
            while s[i..].starts_with(b"super::") {
                base.pop();
                i += 7;
            }
            if s[i..].starts_with(b"self::") {
                i += 6;
            }
            i = tree(s, i, &base, &mut out);
        } else {
            i += 1;
        }
    }
    out
}

/// The `(function name, job module)` rows of `function.rs`'s table.
fn functions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut name = None;
    for line in text.lines().map(str::trim) {
        if let Some((_, rest)) = line.split_once(" = \"") {
            if line.ends_with('{') {
                name = rest.split('"').next().map(str::to_string);
            }
        }
        if let Some(job) = line.strip_prefix("job: ") {
            let segs: Vec<&str> = job.trim_end_matches(',').split("::").collect();
            if let (Some(n), true) = (name.take(), segs.len() == 3) {
                out.push((n, format!("{}::{}", segs[0], segs[1])));
            }
        }
    }
    out
}

/// Write `uses.rs` into `out_dir`: `USES`, per function its name and the modules its
/// job reaches; `JOB_SQL`, the job modules with statements and their lists.
pub fn generate(src: &Path, out_dir: &Path) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut nodes: BTreeSet<String> = BTreeSet::new();
    let mut parsed = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src).expect("under src");
        let own = node_of(rel);
        nodes.insert(own.join("::"));
        let text = fs::read_to_string(f).expect("readable source");
        // A file's own path, for `self::`: a `sql.rs` is `<owner>::sql`.
        let mut here = own.clone();
        if rel.iter().any(|s| s == "sql.rs" || s == "sql") {
            here.push("sql".into());
        }
        let code = code_only(&text);
        let mut refs = references(&code, &here);
        // A child module named by a bare path (`membership::Member`, `use claims;`).
        let bare: Vec<String> = code
            .lines()
            .filter(|l| {
                !l.trim_start().starts_with("pub mod ") && !l.trim_start().starts_with("mod ")
            })
            .flat_map(|l| l.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')))
            .filter_map(|w| w.split("::").next().filter(|_| w.contains("::")))
            .map(str::to_string)
            .collect();
        for b in bare {
            let mut child = own.clone();
            child.push(b);
            refs.push(child);
        }
        parsed.push((own.join("::"), refs));
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, refs) in parsed {
        let e = edges.entry(from.clone()).or_default();
        for r in refs {
            for n in (1..=r.len()).rev() {
                let cand = r[..n].join("::");
                if nodes.contains(&cand) {
                    e.insert(cand);
                    break;
                }
            }
        }
    }
    let table = fs::read_to_string(src.join("function.rs")).expect("function.rs");
    let mut out = String::from(
        "/// Per function (by name), the modules of `shared` its job can run code of.\n\
         pub const USES: &[(&str, &[&str])] = &[\n",
    );
    for (name, job) in functions(&table) {
        let mut seen = BTreeSet::new();
        let mut stack = vec![job.clone(), ROOT.to_string()];
        while let Some(n) = stack.pop() {
            if LISTERS.contains(&n.as_str()) || !seen.insert(n.clone()) {
                continue;
            }
            stack.extend(edges.get(&n).into_iter().flatten().cloned());
        }
        let list: Vec<String> = seen.iter().map(|m| format!("{m:?}")).collect();
        out.push_str(&format!("    ({name:?}, &[{}]),\n", list.join(", ")));
    }
    out.push_str("];\n");
    out.push_str(
        "/// Per job module with a `sql` submodule (by path), its statements: the\n\
         /// catalogue's entries of the functions' own modules, one per row.\n\
         pub const JOB_SQL: &[(&str, &[(&str, &str)])] = &[\n",
    );
    for (_, job) in functions(&table) {
        let dir = src.join(job.replace("::", "/"));
        if [dir.join("sql.rs"), dir.join("sql").join("mod.rs")]
            .iter()
            .any(|f| fs::read_to_string(f).is_ok_and(|t| t.contains("statements!")))
        {
            out.push_str(&format!("    ({job:?}, crate::{job}::sql::ALL),\n"));
        }
    }
    out.push_str("];\n");
    fs::write(out_dir.join("uses.rs"), out).expect("writable OUT_DIR");
}
