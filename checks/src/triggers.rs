//! What the trigger functions of a table the bundle writes need from the role.
//!
//! Owns: reading the body of a trigger function (one that is not `SECURITY DEFINER`,
//! so it runs as the connected role: GitLab's loose-foreign-key trigger on `users`,
//! `namespaces` and `projects` inserts into `loose_foreign_keys_deleted_records`, its
//! sync triggers write side tables) for the tables its static SQL writes or reads:
//! `INSERT INTO t` (and `ON CONFLICT (…)`: SELECT on `t`; `… DO UPDATE`: UPDATE on
//! `t`), `UPDATE t` and `DELETE FROM t` (each also SELECT on `t`: its WHERE reads
//! columns), `FROM t` / `JOIN t`. Comments and string literals are skipped, so
//! dynamic SQL (`EXECUTE format(…)`) is not derived; names that resolve to no table
//! (transition tables, keywords) are dropped by the caller.

use super::tree::{DELETE, INSERT, SELECT, UPDATE};

/// `pg_trigger.tgtype` bits of the events: INSERT, DELETE, UPDATE.
pub const TG_INSERT: i32 = 1 << 2;
/// `TRIGGER_TYPE_DELETE`.
pub const TG_DELETE: i32 = 1 << 3;
/// `TRIGGER_TYPE_UPDATE`.
pub const TG_UPDATE: i32 = 1 << 4;

/// The body without comments and string literals (each replaced by a space).
fn code(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '-' if chars.peek() == Some(&'-') => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
                out.push(' ');
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
                out.push(' ');
            }
            '\'' => {
                // '' inside a literal is a quote: two literals back to back read the same.
                for n in chars.by_ref() {
                    if n == '\'' {
                        break;
                    }
                }
                out.push(' ');
            }
            c => out.push(c),
        }
    }
    out
}

/// `(table name as written, privilege bit)` for each table the body's static SQL names
/// as a target or a source.
pub fn uses(src: &str) -> Vec<(String, u32)> {
    let words: Vec<String> = code(src)
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.' || c == '"'))
        .filter(|w| !w.is_empty())
        .map(|w| w.replace('"', "").to_lowercase())
        .collect();
    let mut out = Vec::new();
    let mut last_insert: Option<String> = None;
    for (i, w) in words.iter().enumerate() {
        let next = |k: usize| words.get(i + k).cloned();
        let prev = if i > 0 { words[i - 1].as_str() } else { "" };
        match w.as_str() {
            "insert" if next(1).as_deref() == Some("into") => {
                if let Some(t) = next(2) {
                    out.push((t.clone(), INSERT));
                    last_insert = Some(t);
                }
            }
            // `ON CONFLICT (columns)` reads the conflict target's columns.
            "conflict" if prev == "on" && next(1).is_some_and(|n| n != "do") => {
                if let Some(t) = &last_insert {
                    out.push((t.clone(), SELECT));
                }
            }
            "update" if prev == "do" => {
                if let Some(t) = &last_insert {
                    out.push((t.clone(), UPDATE));
                }
            }
            // An UPDATE or DELETE reads the columns of its WHERE (and SET expressions):
            // SELECT on its table too.
            "update" if prev != "for" && prev != "key" => {
                if let Some(t) = next(1) {
                    out.push((t.clone(), UPDATE));
                    out.push((t, SELECT));
                }
            }
            "delete" if next(1).as_deref() == Some("from") => {
                if let Some(t) = next(2) {
                    out.push((t.clone(), DELETE));
                    out.push((t, SELECT));
                }
            }
            "from" | "join" if prev != "delete" => {
                if let Some(t) = next(1) {
                    out.push((t, SELECT));
                }
            }
            _ => {}
        }
    }
    out.retain(|(t, _)| is_name(t));
    out.sort();
    out.dedup();
    out
}

/// `name` or `schema.name`, each an unquoted identifier.
fn is_name(t: &str) -> bool {
    let parts: Vec<&str> = t.split('.').collect();
    parts.len() <= 2
        && parts.iter().all(|p| {
            p.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && p.chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loose_foreign_key_trigger_inserts_into_its_table() {
        let body = "
BEGIN
  -- a comment naming DELETE FROM users
  INSERT INTO loose_foreign_keys_deleted_records
  (fully_qualified_table_name, primary_key_value)
  SELECT current_schema() || '.' || TG_ARGV[0], old_table.id FROM old_table;
  RETURN NULL;
END";
        assert_eq!(
            uses(body),
            [
                ("loose_foreign_keys_deleted_records".to_string(), INSERT),
                ("old_table".to_string(), SELECT),
            ]
        );
        assert_eq!(
            uses("SELECT 1 FROM a.b.c; SELECT 2 FROM 1abc"),
            [],
            "not a relation name"
        );
    }

    #[test]
    fn upserts_updates_deletes_and_strings_are_told_apart() {
        let body = "BEGIN
  IF TG_OP = 'UPDATE' THEN
    INSERT INTO \"namespace_details\" (namespace_id) VALUES (NEW.id)
      ON CONFLICT (namespace_id) DO UPDATE SET x = 1;
  END IF;
  UPDATE public.projects SET a = 1 WHERE id = NEW.id;
  PERFORM 1 FROM users u FOR UPDATE;
  DELETE FROM routes WHERE source_id = OLD.id; /* UPDATE nothing */
  EXECUTE format('DELETE FROM %I', 'hidden');
  RETURN NEW;
END";
        assert_eq!(
            uses(body),
            [
                ("namespace_details".to_string(), INSERT),
                ("namespace_details".to_string(), SELECT),
                ("namespace_details".to_string(), UPDATE),
                ("public.projects".to_string(), SELECT),
                ("public.projects".to_string(), UPDATE),
                ("routes".to_string(), SELECT),
                ("routes".to_string(), DELETE),
                ("users".to_string(), SELECT),
            ]
        );
    }
}
