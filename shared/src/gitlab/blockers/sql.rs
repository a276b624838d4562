//! The SQL of [`crate::gitlab::blockers`]: the blocking foreign keys read from the
//! catalog, with the statements that count and delete their rows built in the database
//! by `format('%I')` (every identifier quoted), and the group's tree.

crate::statements::statements! {
    /// Every single-column foreign key with `ON DELETE RESTRICT` (`r`) or `NO ACTION`
    /// (`a`) into `namespaces` or `projects` (the key of a partitioned table once, not
    /// per partition): constraint, schema, table, column, parent table, action, and the
    /// statements over its rows, grouped by parent id (`$1` the parent ids) and deleting
    /// them (`$1` the parent ids), built with quoted identifiers.
    BLOCKING_KEYS = "SELECT c.conname::text, n.nspname::text, t.relname::text, a.attname::text,
                    r.relname::text, c.confdeltype::text,
                    format('SELECT %I::bigint, count(*)::bigint FROM %I.%I WHERE %I = ANY($1::bigint[]) GROUP BY 1 ORDER BY 1',
                           a.attname, n.nspname, t.relname, a.attname),
                    format('DELETE FROM %I.%I WHERE %I = ANY($1::bigint[])',
                           n.nspname, t.relname, a.attname)
             FROM pg_constraint c
             JOIN pg_class t ON t.oid = c.conrelid
             JOIN pg_namespace n ON n.oid = t.relnamespace
             JOIN pg_class r ON r.oid = c.confrelid
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
             WHERE c.contype = 'f' AND c.confdeltype IN ('r', 'a') AND c.conparentid = 0
               AND cardinality(c.conkey) = 1
               AND c.confrelid IN ('namespaces'::regclass, 'projects'::regclass)
             ORDER BY r.relname, t.relname, a.attname, c.conname";
    /// The namespaces of the tree of group `$1` (itself, its subgroups, their project
    /// namespaces), ascending.
    TREE_NAMESPACES = "WITH g AS (SELECT traversal_ids AS t FROM namespaces WHERE id = $1::bigint)
             SELECT n.id::bigint FROM g, namespaces n
             WHERE n.traversal_ids >= g.t
               AND n.traversal_ids < (g.t[1:cardinality(g.t) - 1] || (g.t[cardinality(g.t)] + 1))
               AND $1::bigint = ANY(n.traversal_ids)
             ORDER BY n.id";
    /// The projects in namespaces `$1`, ascending.
    TREE_PROJECTS = "SELECT id::bigint FROM projects WHERE namespace_id = ANY($1::bigint[]) ORDER BY id";
    /// The full paths of the sources `$2` of type `$1` (`Project` or `Namespace`).
    ROUTE_PATHS = "SELECT source_id::bigint, path FROM routes
             WHERE source_type = $1 AND source_id = ANY($2::bigint[])";
}
