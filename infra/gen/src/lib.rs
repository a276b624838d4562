//! The generated regions of `infra/template.yaml`, of the behaviour contract
//! (`docs/behaviour.md` §R3, §9.7) and of docs/logs.md (`class` per function),
//! rendered from the function table (`shared::Function`, the rows of `with_functions!`
//! in shared/src/function.rs).
//!
//! Owns: the region markers and their splicing ([`regenerate`]), the list of generated
//! files and regions ([`generate`]), and the docs' tables. The template's
//! per-function resources are in `function`, its stack-wide lists (parameters,
//! conditions, the scheduler role's queues, the schema and stalled alarms, the
//! dashboard, the outputs) in `stack`.
//!
//! A region is the lines between a line containing `BEGIN GENERATED <name>` and one
//! containing `END GENERATED <name>`; everything else in the file is hand-written.
//! The test `deployment::generated` (tests/it/deployment/generated.rs) regenerates
//! every region and fails when a file differs; with `HK_REGENERATE=1` it writes the
//! files instead (CONTRIBUTING.md, "Adding a cron function").
//!
//! A separate crate, depending on `shared` only: regenerating needs neither `hk` nor
//! an AWS SDK, and the generator's inputs are visibly the function table and the
//! metrics catalogue.

use std::path::{Path, PathBuf};

use shared::Function;

mod function;
mod stack;

/// One generated file: where it lives (relative to the repository root) and its text
/// with every region rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    /// Relative to the repository root, e.g. `infra/template.yaml`.
    pub path: PathBuf,
    /// The file as it is now.
    pub current: String,
    /// The file with every region regenerated.
    pub expected: String,
}

/// Every generated file of the repository at `root`, current and regenerated.
///
/// # Panics
///
/// When a file cannot be read or a region's markers are missing: the generator and
/// the files are out of step, which is a bug to fix by hand.
pub fn generate(root: &Path) -> Vec<Generated> {
    let template = |name: &str| -> String {
        match name {
            "parameter-group-cutover" => stack::parameter_group_cutover(),
            "parameter-group-mappings" => stack::parameter_group_mappings(),
            "schedule-parameters" => stack::schedule_parameters(),
            "mapping-parameters" => stack::mapping_parameters(),
            "conditions" => stack::conditions(),
            "scheduler-role-queues" => stack::scheduler_role_queues(),
            "functions" => function::all(root),
            "schema-alarms" => stack::schema_alarms(),
            "housekeeping-stalled" => stack::housekeeping_stalled(),
            "dashboard" => stack::dashboard(),
            "outputs" => stack::outputs(),
            other => panic!("infra/template.yaml: unknown generated region {other:?}"),
        }
    };
    let behaviour = |name: &str| -> String {
        match name {
            "r3-functions" => r3_table(),
            "c9.7-crons" => cron_table(),
            other => panic!("docs/behaviour.md: unknown generated region {other:?}"),
        }
    };
    let logs = |name: &str| -> String {
        match name {
            "class-per-function" => class_table(),
            other => panic!("docs/logs.md: unknown generated region {other:?}"),
        }
    };
    vec![
        file(root, "infra/template.yaml", &template),
        file(root, "docs/behaviour.md", &behaviour),
        file(root, "docs/logs.md", &logs),
    ]
}

/// Writes every file whose regions changed; returns the paths written.
pub fn write(root: &Path, files: &[Generated]) -> Vec<PathBuf> {
    let mut written = Vec::new();
    for g in files.iter().filter(|g| g.current != g.expected) {
        std::fs::write(root.join(&g.path), &g.expected)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", g.path.display()));
        written.push(g.path.clone());
    }
    written
}

fn file(root: &Path, rel: &str, render: &dyn Fn(&str) -> String) -> Generated {
    let current = std::fs::read_to_string(root.join(rel))
        .unwrap_or_else(|e| panic!("cannot read {rel}: {e}"));
    let expected = regenerate(&current, render).unwrap_or_else(|e| panic!("{rel}: {e}"));
    Generated {
        path: rel.into(),
        current,
        expected,
    }
}

/// `text` with the lines of every region replaced by `render(<name>)` (which ends in
/// a newline); the marker lines stay.
pub fn regenerate(text: &str, render: &dyn Fn(&str) -> String) -> Result<String, String> {
    const BEGIN: &str = "BEGIN GENERATED ";
    let mut out = String::with_capacity(text.len());
    let mut lines = text.split_inclusive('\n');
    let mut regions = 0;
    while let Some(line) = lines.next() {
        out.push_str(line);
        let Some(at) = line.find(BEGIN) else { continue };
        let name = line[at + BEGIN.len()..]
            .split(|c: char| c.is_whitespace() || c == ':')
            .next()
            .unwrap_or_default()
            .to_string();
        let end = format!("END GENERATED {name}");
        let closing = lines
            .by_ref()
            .find(|l| l.contains(&end))
            .ok_or_else(|| format!("region {name:?} has no {end:?} line"))?;
        out.push_str(&render(&name));
        out.push_str(closing);
        regions += 1;
    }
    if regions == 0 {
        return Err("no generated region".into());
    }
    Ok(out)
}

/// `RemoveExpiredMembers` for `remove-expired-members`: the stem of its logical IDs.
pub fn camel(name: &str) -> String {
    name.split('-')
        .map(|w| w[..1].to_uppercase() + &w[1..])
        .collect()
}

/// The cron functions, in table order.
fn crons() -> impl Iterator<Item = Function> {
    Function::ALL.iter().copied().filter(|f| f.cron().is_some())
}

/// GitLab's five-field cron of an EventBridge expression: `cron(10 0 * * ? *)` is
/// `10 0 * * *`, `cron(0/5 * * * ? *)` is `*/5 * * * *`.
fn unix_cron(eventbridge: &str) -> String {
    let inner = eventbridge
        .strip_prefix("cron(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{eventbridge}: not cron(…)"));
    inner
        .split(' ')
        .take(5)
        .map(|field| match field {
            "?" => "*".to_string(),
            f => f
                .strip_prefix("0/")
                .map_or(f.to_string(), |n| format!("*/{n}")),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How often a cron fires: every `n` minutes, or daily.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Every {
    Minutes(u32),
    Day,
}

fn every(f: Function) -> Every {
    let cron = f.cron().expect("a cron function");
    let unix = unix_cron(cron);
    let fields: Vec<&str> = unix.split(' ').collect();
    match fields.as_slice() {
        [m, "*", "*", "*", "*"] if m.starts_with("*/") => Every::Minutes(
            m[2..]
                .parse()
                .unwrap_or_else(|_| panic!("{f}: cron minute {m}")),
        ),
        [m, h, "*", "*", "*"] if m.parse::<u32>().is_ok() && h.parse::<u32>().is_ok() => Every::Day,
        _ => panic!(
            "{f}: cron {cron} is neither daily nor every n minutes; teach infra/gen its \
             heartbeat alarm"
        ),
    }
}

fn backticked(kinds: &[&str]) -> String {
    kinds
        .iter()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Behaviour §R3's table: one row per function.
fn r3_table() -> String {
    let mut out = String::from(
        "| Function | Role | GitLab worker | Trigger | Consumes | Produces |\n|---|---|---|---|---|---|\n",
    );
    for f in Function::ALL.iter().copied() {
        let trigger = f
            .cron()
            .map_or("queue".to_string(), |c| format!("`{}`", unix_cron(c)));
        let produces: Vec<String> = f
            .sends_to()
            .iter()
            .map(|to| {
                if *to == f {
                    "itself (continuation or re-send)".to_string()
                } else {
                    backticked(to.accepts())
                }
            })
            .collect();
        let produces = if produces.is_empty() {
            "none".to_string()
        } else {
            produces.join("; ")
        };
        out.push_str(&format!(
            "| `{}` | {} | `{}` | {trigger} | {} | {produces} |\n",
            f.name(),
            role(f),
            f.gitlab_class(),
            backticked(f.accepts()),
        ));
    }
    out
}

/// A function's role: the first sentence (or the part before a colon) of its row's doc
/// comment, e.g. `B38 cron batch`.
fn role(f: Function) -> String {
    let doc = f.doc().trim();
    let end = [": ", ". "]
        .iter()
        .filter_map(|sep| doc.find(sep))
        .min()
        .unwrap_or(doc.len());
    doc[..end].trim_end_matches('.').to_string()
}

/// docs/logs.md's table: the `class` field of each function's log lines (by message
/// type where they differ).
fn class_table() -> String {
    let mut out = String::from("| Function | `class` |\n|---|---|\n");
    for f in Function::ALL.iter().copied() {
        let classes: Vec<(&str, &str)> = f
            .accepts()
            .iter()
            .map(|kind| (f.gitlab_class_for(kind), *kind))
            .collect();
        let same = classes.iter().all(|(c, _)| *c == classes[0].0);
        let cell = if same {
            format!("`{}`", classes[0].0)
        } else {
            classes
                .iter()
                .map(|(c, kind)| format!("`{c}` (`{kind}`)"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!("| `{}` | {cell} |\n", f.name()));
    }
    out
}

/// Behaviour §9.7's table: the cron functions' schedules.
fn cron_table() -> String {
    let mut out = String::from("| Function | GitLab cron | EventBridge |\n|---|---|---|\n");
    for f in crons() {
        let cron = f.cron().unwrap_or_default();
        out.push_str(&format!(
            "| {} | `{}` | `{cron}` |\n",
            f.name(),
            unix_cron(cron)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crons_read_as_gitlab_writes_them() {
        assert_eq!(unix_cron("cron(10 0 * * ? *)"), "10 0 * * *");
        assert_eq!(unix_cron("cron(0/5 * * * ? *)"), "*/5 * * * *");
    }

    #[test]
    fn a_region_is_replaced_between_its_markers_and_a_missing_end_is_an_error() {
        let text = "a\n# BEGIN GENERATED x: note\nold\n# END GENERATED x\nb\n";
        let out = regenerate(text, &|n| format!("new {n}\n")).unwrap();
        assert_eq!(
            out,
            "a\n# BEGIN GENERATED x: note\nnew x\n# END GENERATED x\nb\n"
        );
        let err = regenerate("# BEGIN GENERATED y\n", &|_| String::new()).unwrap_err();
        assert!(err.contains("END GENERATED y"), "{err}");
    }
}
