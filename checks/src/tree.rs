//! The server's rewritten parse trees, read for `hk check`'s privileges check.
//!
//! Owns: tokenizing PostgreSQL's node-string format (the text `debug_print_rewritten`
//! sends, by `pg_strtok`'s rules) and reading every `RTEPermissionInfo` node in it:
//! the relation, the privileges the executor will check on it (`requiredPerms`) and
//! the columns each one covers. This is PostgreSQL's own account of what a statement
//! needs, subqueries and CTEs included; PREPARE computes it without checking it.

use std::collections::BTreeSet;

/// `ACL_INSERT`: the bit of `requiredPerms`.
pub const INSERT: u32 = 1;
/// `ACL_SELECT` (also the read of `SELECT … FOR UPDATE`, with [`UPDATE`]).
pub const SELECT: u32 = 2;
/// `ACL_UPDATE` (also `FOR UPDATE` / `FOR SHARE` row locks, on no column).
pub const UPDATE: u32 = 4;
/// `ACL_DELETE`.
pub const DELETE: u32 = 8;

/// The privileges a statement can need on a table, in GRANT order.
pub const PRIVILEGES: [(u32, &str); 4] = [
    (SELECT, "SELECT"),
    (INSERT, "INSERT"),
    (UPDATE, "UPDATE"),
    (DELETE, "DELETE"),
];

/// A system column in a column set: no column privilege covers one (they have no
/// ACL), so the executor accepts only the table privilege (`WHERE m.ctid = …` needs
/// `SELECT` on the table).
pub const SYSTEM_COLUMN: i16 = i16::MIN;

/// `FirstLowInvalidHeapAttributeNumber` (PostgreSQL 12 and later): a column set's
/// member is the attribute number minus this.
const FIRST_LOW_INVALID_ATTNO: i32 = -7;

/// Relations below this oid are PostgreSQL's own (`FirstNormalObjectId`): the client
/// library's type look-ups read them, the catalogue statements never need a grant
/// there.
pub const FIRST_NORMAL_OID: u32 = 16384;

/// One `RTEPermissionInfo`: what the executor checks on one relation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PermInfo {
    /// The relation's oid.
    pub relid: u32,
    /// The privileges ([`SELECT`], [`INSERT`], [`UPDATE`], [`DELETE`] bits).
    pub required: u32,
    /// Columns read (attribute numbers; 0 the whole row).
    pub selected: BTreeSet<i16>,
    /// Columns the INSERT supplies (defaults fill the others).
    pub inserted: BTreeSet<i16>,
    /// Columns the UPDATE sets.
    pub updated: BTreeSet<i16>,
}

impl PermInfo {
    /// The columns privilege `bit` covers.
    pub fn columns(&self, bit: u32) -> &BTreeSet<i16> {
        match bit {
            INSERT => &self.inserted,
            UPDATE => &self.updated,
            _ => &self.selected,
        }
    }
}

/// The tokens of a node string: whitespace separates, `(`, `)`, `{` and `}` are tokens
/// of their own, a backslash makes the next character a plain one.
pub fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            '(' | ')' | '{' | '}' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                out.push(c.to_string());
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A column set `(b 8 9)` at `t[i]` as attribute numbers; any system column (`ctid`,
/// `xmin`, …) as [`SYSTEM_COLUMN`].
fn bitmap(t: &[String], i: usize) -> BTreeSet<i16> {
    let mut out = BTreeSet::new();
    if t.get(i).map(String::as_str) != Some("(") {
        return out;
    }
    for tok in t[i + 1..].iter().take_while(|x| *x != ")") {
        if let Ok(m) = tok.parse::<i32>() {
            let attno = m + FIRST_LOW_INVALID_ATTNO;
            out.insert(if attno >= 0 {
                attno as i16
            } else {
                SYSTEM_COLUMN
            });
        }
    }
    out
}

/// Every `RTEPermissionInfo` of a tree (of every query level) on a relation of the
/// database's own (oid at or above [`FIRST_NORMAL_OID`]).
pub fn perm_infos(tree: &str) -> Vec<PermInfo> {
    let t = tokens(tree);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < t.len() {
        if t[i] == "{" && t[i + 1] == "RTEPERMISSIONINFO" {
            let mut p = PermInfo::default();
            let mut j = i + 2;
            while j < t.len() && t[j] != "}" {
                let next = t.get(j + 1).map(String::as_str).unwrap_or("");
                match t[j].as_str() {
                    ":relid" => p.relid = next.parse().unwrap_or(0),
                    ":requiredPerms" => p.required = next.parse().unwrap_or(0),
                    ":selectedCols" => p.selected = bitmap(&t, j + 1),
                    ":insertedCols" => p.inserted = bitmap(&t, j + 1),
                    ":updatedCols" => p.updated = bitmap(&t, j + 1),
                    _ => {}
                }
                j += 1;
            }
            if p.relid >= FIRST_NORMAL_OID {
                out.push(p);
            }
            i = j;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As PostgreSQL 16 prints `INSERT INTO t (a) VALUES ($1) ON CONFLICT (b) DO
    /// UPDATE SET a = excluded.a RETURNING id` (shortened), line breaks included.
    const UPSERT: &str = "({QUERY :commandType 3 :rtable ({RANGETBLENTRY :alias <> :eref
{ALIAS :aliasname t :colnames (\"id\" \"a\" \"b\")} :rtekind 0 :relid 16392}) :rteperminfos
({RTEPERMISSIONINFO :relid 16392 :inh false :requiredPerms 7 :checkAsUser 0 :selectedCols
(b 8 10) :insertedCols (b 9) :updatedCols (b 9)} {RTEPERMISSIONINFO :relid 16392 :inh
false :requiredPerms 2 :checkAsUser 0 :selectedCols (b 9) :insertedCols (b) :updatedCols
(b)}) :jointree {FROMEXPR :fromlist <> :quals <>} :aliasname \\*SELECT\\* })";

    #[test]
    fn the_permission_infos_are_read_with_their_columns() {
        let p = perm_infos(UPSERT);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0].relid, 16392);
        assert_eq!(p[0].required, SELECT | INSERT | UPDATE);
        assert_eq!(p[0].selected, BTreeSet::from([1, 3]));
        assert_eq!(p[0].inserted, BTreeSet::from([2]));
        assert_eq!(p[0].columns(UPDATE), &BTreeSet::from([2]));
        assert_eq!(p[1].required, SELECT);
        assert!(p[1].inserted.is_empty());
    }

    #[test]
    fn the_catalogs_own_relations_and_escapes_are_handled() {
        let t = tokens("{A :x a\\ b :y (b 7)}");
        assert_eq!(t, ["{", "A", ":x", "a b", ":y", "(", "b", "7", ")", "}"]);
        let catalog = "{RTEPERMISSIONINFO :relid 1247 :requiredPerms 2 :selectedCols (b 7)}";
        assert!(perm_infos(catalog).is_empty());
        let whole_row = "{RTEPERMISSIONINFO :relid 20000 :requiredPerms 2 :selectedCols (b 7)}";
        assert_eq!(perm_infos(whole_row)[0].selected, BTreeSet::from([0]));
        // ctid (-1) and the first column.
        let ctid = "{RTEPERMISSIONINFO :relid 20000 :requiredPerms 2 :selectedCols (b 6 8)}";
        assert_eq!(
            perm_infos(ctid)[0].selected,
            BTreeSet::from([SYSTEM_COLUMN, 1])
        );
    }
}
