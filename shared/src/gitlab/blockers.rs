//! Rows that block a plain `DELETE` of a group's namespaces and projects
//! (docs/gitlab-differences.md, "Rows that block a group's deletion").
//!
//! Owns: the blocking foreign keys (`RESTRICT` / `NO ACTION` into `namespaces` or
//! `projects`, found in the catalog at run time), their [`Handling`], the count of their
//! rows under a group ([`scan`]), the deletion of those GitLab deletes itself
//! ([`delete_dependents`]) and [`violated`]. Statements over a key's rows are built by
//! the database (`format('%I')`), never in Rust. Never commits.

use std::collections::BTreeMap;

use tokio_postgres::GenericClient;

use crate::error::{Error, Result};

pub mod sql;

/// The table a blocking key refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Parent {
    /// `namespaces` (groups, project namespaces).
    Namespace,
    /// `projects`.
    Project,
}

impl Parent {
    /// The `routes.source_type` of this parent.
    fn source_type(self) -> &'static str {
        match self {
            Parent::Namespace => "Namespace",
            Parent::Project => "Project",
        }
    }

    /// How the log names one parent.
    fn noun(self) -> &'static str {
        match self {
            Parent::Namespace => "namespace",
            Parent::Project => "project",
        }
    }
}

/// What group-destroy does with the rows of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// The tree itself (`namespaces.parent_id`, `projects.namespace_id`): the
    /// depth-first order of the destroy takes care of it.
    Tree,
    /// Rows GitLab deletes in the database before the parent: group-destroy deletes
    /// them itself, in the parent's chunk, before the parent.
    DeletedFirst,
    /// Rows GitLab deletes through an outside service (the container registry, object
    /// storage), or unknown: the group's deletion is blocked until an operator acts.
    NeedsService {
        /// What the operator must do.
        action: &'static str,
    },
}

/// The action for a table this module does not know.
const UNKNOWN_ACTION: &str = "delete these rows through GitLab (UI or API), never by SQL: GitLab removes them with its own services";

/// How the rows of `table.column` are handled (GitLab 18; docs/gitlab-differences.md).
pub fn handling(table: &str, column: &str) -> Handling {
    match (table, column) {
        ("namespaces", "parent_id") | ("projects", "namespace_id") => Handling::Tree,
        // GitLab relies on a second foreign key, ON DELETE CASCADE (fk_0ace76afbb),
        // which fires after the NO ACTION one on an upgraded instance.
        ("project_saved_replies", "project_id")
        // Counters only; GitLab deletes them with plain `delete_all`
        // (ProjectRequirementStatuses::BulkDestroyService).
        | ("project_requirement_compliance_statuses", "project_id" | "namespace_id") => {
            Handling::DeletedFirst
        }
        ("container_repositories", "project_id") => Handling::NeedsService {
            action: "delete the project's container images in the container registry (GitLab UI: Deploy > Container registry, or API DELETE /projects/:id/registry/repositories/:repository_id); GitLab deletes the rows with the images",
        },
        ("packages_debian_project_distributions", "project_id") => Handling::NeedsService {
            action: "delete the project's Debian distributions through GitLab (API DELETE /projects/:id/debian_distributions/:codename), which removes their files from object storage",
        },
        ("packages_debian_group_distributions", "group_id") => Handling::NeedsService {
            action: "delete the group's Debian distributions through GitLab (API DELETE /groups/:id/-/debian_distributions/:codename), which removes their files from object storage",
        },
        ("virtual_registries_container_cache_entries", "group_id") => Handling::NeedsService {
            action: "delete the group's container virtual registries and their upstreams through GitLab; GitLab's cleanup worker then removes the cached files from object storage and their rows",
        },
        _ => Handling::NeedsService {
            action: UNKNOWN_ACTION,
        },
    }
}

/// One blocking foreign key, as the catalog has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The constraint's name.
    pub constraint: String,
    /// The referencing table (unqualified).
    pub table: String,
    /// The referencing column.
    pub column: String,
    /// The parent table.
    pub parent: Parent,
    /// `RESTRICT` or `NO ACTION`.
    pub action: &'static str,
    /// How group-destroy handles its rows.
    pub handling: Handling,
    /// Its rows by parent id, `$1` the parent ids (built with quoted identifiers).
    count_sql: String,
    /// The deletion of its rows, `$1` the parent ids (built with quoted identifiers).
    delete_sql: String,
}

impl Key {
    /// `table.column (constraint, ACTION)`, how the log and `hk check` name the key.
    pub fn name(&self) -> String {
        format!(
            "{}.{} ({}, {})",
            self.table, self.column, self.constraint, self.action
        )
    }
}

/// Every blocking key except the tree's own, from the catalog.
pub async fn keys<C: GenericClient>(c: &C) -> Result<Vec<Key>> {
    let rows = c.query(sql::BLOCKING_KEYS, &[]).await?;
    let mut out = Vec::new();
    for r in rows {
        let table: String = r.get(2);
        let column: String = r.get(3);
        let handling = handling(&table, &column);
        if handling == Handling::Tree {
            continue;
        }
        let parent = match r.get::<_, String>(4).as_str() {
            "projects" => Parent::Project,
            _ => Parent::Namespace,
        };
        let action = if r.get::<_, String>(5) == "r" {
            "RESTRICT"
        } else {
            "NO ACTION"
        };
        out.push(Key {
            constraint: r.get(0),
            table,
            column,
            parent,
            action,
            handling,
            count_sql: r.get(6),
            delete_sql: r.get(7),
        });
    }
    Ok(out)
}

/// The ids of a group's tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tree {
    /// The group, its subgroups and their project namespaces.
    pub namespaces: Vec<i64>,
    /// The projects in those namespaces.
    pub projects: Vec<i64>,
}

impl Tree {
    fn ids(&self, p: Parent) -> &Vec<i64> {
        match p {
            Parent::Namespace => &self.namespaces,
            Parent::Project => &self.projects,
        }
    }
}

/// The tree of group `group_id` (empty when the group is gone).
pub async fn tree<C: GenericClient>(c: &C, group_id: i64) -> Result<Tree> {
    let namespaces: Vec<i64> = c
        .query(sql::TREE_NAMESPACES, &[&group_id])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let projects: Vec<i64> = c
        .query(sql::TREE_PROJECTS, &[&namespaces])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    Ok(Tree {
        namespaces,
        projects,
    })
}

/// The rows of one key under a tree, by parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The key.
    pub key: Key,
    /// `(parent id, its full path if it has a route, rows)`, ascending parent ids.
    pub parents: Vec<(i64, Option<String>, i64)>,
}

impl Found {
    /// How many rows in all.
    pub fn rows(&self) -> i64 {
        self.parents.iter().map(|p| p.2).sum()
    }

    /// One line for the log or `hk check`: the key, the rows per parent (the first
    /// ten), and the operator action for a key that needs one.
    pub fn describe(&self) -> String {
        const SHOWN: usize = 10;
        let mut per: Vec<String> = self
            .parents
            .iter()
            .take(SHOWN)
            .map(|(id, path, n)| match path {
                Some(p) => format!("{n} for {} {p} ({id})", self.key.parent.noun()),
                None => format!("{n} for {} {id}", self.key.parent.noun()),
            })
            .collect();
        if self.parents.len() > SHOWN {
            per.push(format!("… {} more", self.parents.len() - SHOWN));
        }
        let mut s = format!(
            "{}: {} row(s) ({})",
            self.key.name(),
            self.rows(),
            per.join(", ")
        );
        if let Handling::NeedsService { action } = self.key.handling {
            s.push_str(": ");
            s.push_str(action);
        }
        s
    }
}

/// The rows of every key in `keys` under `tree`, keys without rows left out.
pub async fn scan<C: GenericClient>(c: &C, keys: &[Key], tree: &Tree) -> Result<Vec<Found>> {
    let mut out = Vec::new();
    for k in keys {
        let ids = tree.ids(k.parent);
        if ids.is_empty() {
            continue;
        }
        let counts: Vec<(i64, i64)> = c
            .query(k.count_sql.as_str(), &[ids])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        if counts.is_empty() {
            continue;
        }
        let parents: Vec<i64> = counts.iter().map(|c| c.0).collect();
        let paths: BTreeMap<i64, String> = c
            .query(sql::ROUTE_PATHS, &[&k.parent.source_type(), &parents])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        out.push(Found {
            key: k.clone(),
            parents: counts
                .into_iter()
                .map(|(id, n)| (id, paths.get(&id).cloned(), n))
                .collect(),
        });
    }
    Ok(out)
}

/// The found rows that need an outside service.
pub fn needing_service(found: &[Found]) -> Vec<&Found> {
    found
        .iter()
        .filter(|f| matches!(f.key.handling, Handling::NeedsService { .. }))
        .collect()
}

/// Delete the rows GitLab deletes in the database before the parent
/// ([`Handling::DeletedFirst`]) of the `parent` rows `ids`; how many.
pub async fn delete_dependents<C: GenericClient>(
    c: &C,
    keys: &[Key],
    parent: Parent,
    ids: &[i64],
) -> Result<u64> {
    let mut n = 0;
    if ids.is_empty() {
        return Ok(0);
    }
    let ids = ids.to_vec();
    for k in keys
        .iter()
        .filter(|k| k.parent == parent && k.handling == Handling::DeletedFirst)
    {
        n += c.execute(k.delete_sql.as_str(), &[&ids]).await?;
    }
    Ok(n)
}

/// The blocking key `e` violated, when `e` is a foreign-key violation (SQLSTATE 23503)
/// of one of `keys`.
pub fn violated<'k>(e: &Error, keys: &'k [Key]) -> Option<&'k Key> {
    let Error::Db(db) = e else { return None };
    let d = db.as_db_error()?;
    if d.code().code() != "23503" {
        return None;
    }
    let name = d.constraint()?;
    keys.iter().find(|k| k.constraint == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_keys_are_the_destroy_order_and_unknown_tables_block() {
        assert_eq!(handling("namespaces", "parent_id"), Handling::Tree);
        assert_eq!(handling("projects", "namespace_id"), Handling::Tree);
        assert_eq!(
            handling("project_saved_replies", "project_id"),
            Handling::DeletedFirst
        );
        assert_eq!(
            handling("project_requirement_compliance_statuses", "namespace_id"),
            Handling::DeletedFirst
        );
        assert!(matches!(
            handling("container_repositories", "project_id"),
            Handling::NeedsService { action } if action.contains("container registry")
        ));
        assert_eq!(
            handling("some_future_table", "group_id"),
            Handling::NeedsService {
                action: UNKNOWN_ACTION
            }
        );
    }
}
