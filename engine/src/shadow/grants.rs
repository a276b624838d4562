//! `hk grants --role <name> --read-only`: the GRANTs the role of a `--read-only`
//! copy needs on the live database (issue 47, docs/shadow.md), and nothing more.
//!
//! Owns: `read_only_grants`, which derives on the live database the tables and
//! columns the copy reads (`super::selection::derive`: the catalogue statements'
//! columns, keys, cascades, parity's columns, `schema_migrations`) and prints, for a
//! role name: `CONNECT` on the database, `USAGE` on `public`, column-level `SELECT`
//! on each of those tables, and `SELECT` on each sequence one of their columns owns
//! (the copy reads its position, so that ids the plan creates do not collide). No
//! write privilege, no table outside the selection (so no password hash, token
//! digest, note or issue text can be read with it).

use anyhow::Result;
use shared::db::Connector;

/// The script's GRANT lines for `role` (any name: it is quoted here), derived on the
/// database `connector` reaches, connected as a role that may read the catalogue.
pub async fn read_only_grants(connector: &Connector, role: &str) -> Result<Vec<String>> {
    let selection = super::selection::derive(connector).await?;
    let c = connector.connect("hk-grants-read-only").await?;
    let r = c
        .query_one(
            "SELECT quote_ident($1), quote_ident(current_database())",
            &[&role],
        )
        .await?;
    let (role, database): (String, String) = (r.get(0), r.get(1));
    let mut out = vec![
        format!("GRANT CONNECT ON DATABASE {database} TO {role};"),
        format!("GRANT USAGE ON SCHEMA public TO {role};"),
    ];
    let tables: Vec<String> = selection.keys().cloned().collect();
    for (table, columns) in &selection {
        // Only the columns this database has (a model column GitLab dropped later is
        // defaulted on the copy, not read).
        let have: Vec<String> = c
            .query(
                "SELECT quote_ident(a.attname::text) FROM pg_attribute a
                  WHERE a.attrelid = to_regclass('public.' || quote_ident($1))
                    AND a.attnum > 0 AND NOT a.attisdropped AND a.attname::text = ANY($2)
                  ORDER BY a.attnum",
                &[table, &columns.iter().cloned().collect::<Vec<_>>()],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        if !have.is_empty() {
            out.push(format!(
                "GRANT SELECT ({}) ON public.{} TO {role};",
                have.join(", "),
                quote(table)
            ));
        }
    }
    for r in c
        .query(
            "SELECT DISTINCT format('%I.%I', n.nspname, s.relname)
               FROM pg_class s JOIN pg_namespace n ON n.oid = s.relnamespace
               JOIN pg_depend d ON d.objid = s.oid AND d.classid = 'pg_class'::regclass
                AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
               JOIN pg_class t ON t.oid = d.refobjid
              WHERE s.relkind = 'S' AND n.nspname = 'public' AND t.relname::text = ANY($1)
              ORDER BY 1",
            &[&tables],
        )
        .await?
    {
        let seq: String = r.get(0);
        out.push(format!("GRANT SELECT ON SEQUENCE {seq} TO {role};"));
    }
    Ok(out)
}

/// `name` as an SQL identifier.
fn quote(name: &str) -> String {
    if name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}
