//! The SQL of [`crate::gitlab::storage`]: where a project's storage lives (GitLab's
//! paths and keys, computed in the database), what a group's tree holds of each kind,
//! and the rows the manifest removes with the project. The SHA-256 of an id is
//! `encode(sha256(id::text::bytea), 'hex')`, as GitLab's hashed storage computes it.

/// GitLab's hashed disk path of project `p` (`@hashed/<h[0..1]>/<h[2..3]>/<h>`).
macro_rules! hashed {
    ($p:literal) => {
        concat!(
            "(SELECT '@hashed/' || substr(h, 1, 2) || '/' || substr(h, 3, 2) || '/' || h
               FROM (SELECT encode(sha256((",
            $p,
            ")::text::bytea), 'hex') AS h) x)"
        )
    };
}

crate::statements::statements! {
    /// Project `$1`'s container repositories: id, registry path (the project's full
    /// path, then the name when it has one, lower case) and `delete_started_at`.
    CONTAINER_REPOSITORIES = "SELECT c.id::bigint,
                    lower(COALESCE(pr.path, nr.path || '/' || p.path)
                          || CASE WHEN c.name = '' THEN '' ELSE '/' || c.name END),
                    c.delete_started_at
               FROM container_repositories c
               JOIN projects p ON p.id = c.project_id
               LEFT JOIN routes pr ON pr.source_type = 'Project' AND pr.source_id = p.id
               LEFT JOIN routes nr ON nr.source_type = 'Namespace' AND nr.source_id = p.namespace_id
              WHERE c.project_id = $1::bigint
              ORDER BY c.id";
    /// Mark container repositories `$1` as sent to storage-cleanup at `$2`:
    /// `delete_started_at` only, on rows without a `status`. GitLab's
    /// `ContainerRegistry::CleanupWorker` acts on `status` 0 (delete_scheduled) and 2
    /// (delete_ongoing), never on this mark.
    MARK_CONTAINER_REPOSITORIES = "UPDATE container_repositories SET delete_started_at = $2
              WHERE id = ANY($1::bigint[]) AND status IS NULL";
    /// Undo the mark of container repository `$1` (a row GitLab itself has not marked).
    UNMARK_CONTAINER_REPOSITORY = "UPDATE container_repositories SET delete_started_at = NULL
              WHERE id = $1::bigint AND status IS NULL AND delete_started_at IS NOT NULL";
    /// Container repository `$1` of project `$2` locked, if it still exists: id, name.
    LOCK_CONTAINER_REPOSITORY = "SELECT id::bigint, name::text FROM container_repositories
              WHERE id = $1::bigint AND project_id = $2::bigint FOR UPDATE";
    /// Project `$1` and its namespace `FOR SHARE` (a transfer updates one of them):
    /// whether it lies under group `$2`.
    SHARE_PROJECT_UNDER = "SELECT $2::bigint = ANY(n.traversal_ids::bigint[])
               FROM projects p JOIN namespaces n ON n.id = p.namespace_id
              WHERE p.id = $1::bigint FOR SHARE OF p, n";
    /// Project `$1`'s route `FOR SHARE` (a rename of it or of a group above updates
    /// it): its full path.
    SHARE_PROJECT_ROUTE = "SELECT path::text FROM routes
              WHERE source_type = 'Project' AND source_id = $1::bigint FOR SHARE";
    /// Without a project route: its namespace's route `FOR SHARE` and the project's path.
    SHARE_NAMESPACE_ROUTE = "SELECT r.path || '/' || p.path
               FROM projects p JOIN routes r ON r.source_type = 'Namespace' AND r.source_id = p.namespace_id
              WHERE p.id = $1::bigint FOR SHARE OF r";
    /// Project `$1`'s root registry path: its full path (its route, or its namespace's
    /// route and its path), lower case, as `ContainerRegistry::Path` names it.
    ROOT_REGISTRY_PATH = "SELECT lower(COALESCE(pr.path, nr.path || '/' || p.path))
               FROM projects p
               LEFT JOIN routes pr ON pr.source_type = 'Project' AND pr.source_id = p.id
               LEFT JOIN routes nr ON nr.source_type = 'Namespace' AND nr.source_id = p.namespace_id
              WHERE p.id = $1::bigint";
    /// The routes of live projects whose full path is `$1` (case-insensitive, as
    /// GitLab's routes are unique), `FOR SHARE`: a new or renamed project at a root
    /// registry path keeps its images.
    SHARE_PROJECT_ROUTES_AT = "SELECT r.source_id::bigint FROM routes r
              WHERE r.source_type = 'Project' AND lower(r.path) = $1
                AND EXISTS (SELECT 1 FROM projects p WHERE p.id = r.source_id)
                FOR SHARE OF r";
    /// Whether project `$1` has a repository storage move scheduled (2) or started (3).
    STORAGE_MOVE_IN_PROGRESS = "SELECT EXISTS (SELECT 1 FROM project_repository_storage_moves
              WHERE project_id = $1::bigint AND state IN (2, 3))";
    /// The instance's identity (`application_settings.uuid`, the first row).
    INSTANCE_UUID = "SELECT uuid::text FROM application_settings ORDER BY id LIMIT 1";
    /// Whether snippet `$1` exists.
    SNIPPET_EXISTS = "SELECT EXISTS (SELECT 1 FROM snippets WHERE id = $1::bigint)";
    /// Whether a package file's direct-upload final path is `$1`.
    FINAL_PATH_IN_USE = "SELECT EXISTS (SELECT 1 FROM packages_package_files WHERE file_final_path = $1)";
    /// Uploads of any model but `Project` beside project `$1` (design thumbnails,
    /// import/export files): path as recorded.
    OTHER_UPLOADS_OF_PROJECT = "SELECT path::text FROM uploads
              WHERE project_id = $1::bigint AND model_type IS DISTINCT FROM 'Project' ORDER BY id";
    /// Their rows.
    DELETE_OTHER_UPLOADS_OF_PROJECT = "DELETE FROM uploads
              WHERE project_id = $1::bigint AND model_type IS DISTINCT FROM 'Project'";
    /// Group `$1`'s own uploads (avatar, group files): path as recorded.
    UPLOADS_OF_GROUP = "SELECT path::text FROM uploads
              WHERE ((model_type = 'Namespace' AND model_id = $1::bigint)
                  OR (namespace_id = $1::bigint AND model_type IS DISTINCT FROM 'Project'))
              ORDER BY id";
    /// Their rows.
    DELETE_UPLOADS_OF_GROUP = "DELETE FROM uploads
              WHERE ((model_type = 'Namespace' AND model_id = $1::bigint)
                  OR (namespace_id = $1::bigint AND model_type IS DISTINCT FROM 'Project'))";
    /// Container repository `$1`'s row.
    DELETE_CONTAINER_REPOSITORY = "DELETE FROM container_repositories WHERE id = $1::bigint";
    /// Project `$1`'s Git repositories (project, wiki, design) and its snippets'
    /// repositories: storage name, path relative to it, and the snippet's id. A project
    /// repository without a shard row (GitLab 19.0 made `shard_id` nullable) is on the
    /// project's `repository_storage`, as GitLab's `Project#repository_storage` says.
    REPOSITORIES = "SELECT COALESCE(s.name, p.repository_storage)::text, r.disk_path || x.sfx, NULL::bigint
               FROM project_repositories r
               JOIN projects p ON p.id = r.project_id
               LEFT JOIN shards s ON s.id = r.shard_id
              CROSS JOIN (VALUES ('.git'), ('.wiki.git'), ('.design.git')) AS x(sfx)
              WHERE r.project_id = $1::bigint
             UNION ALL
             SELECT s.name::text, sr.disk_path || '.git', sn.id::bigint
               FROM snippets sn
               JOIN snippet_repositories sr ON sr.snippet_id = sn.id
               JOIN shards s ON s.id = sr.shard_id
              WHERE sn.project_id = $1::bigint
              ORDER BY 1, 2";
    /// The LFS objects project `$1` links and no other project does, locked (a link
    /// from another project takes the row `FOR KEY SHARE` and waits): id, oid, whether
    /// in object storage.
    LFS_ONLY_OF_PROJECT = "SELECT o.id::bigint, o.oid::text, COALESCE(o.file_store, 1) = 2
               FROM lfs_objects o
              WHERE o.id IN (SELECT lfs_object_id FROM lfs_objects_projects WHERE project_id = $1::bigint)
                AND NOT EXISTS (SELECT 1 FROM lfs_objects_projects op
                                 WHERE op.lfs_object_id = o.id AND op.project_id <> $1::bigint)
              ORDER BY o.id
                FOR UPDATE OF o";
    /// Project `$1`'s files: bucket, object key, and whether in object storage (uploads
    /// of the project, then its package files: the direct upload's final path when
    /// set, as GitLab's `ObjectStorage#store_path` reads it).
    OBJECTS = concat!("SELECT 'uploads'::text,
                    CASE WHEN u.uploader = 'FileUploader' AND u.path NOT LIKE '@hashed/%'
                         THEN ", hashed!("u.model_id"), " || '/' || u.path
                         WHEN u.uploader = 'FileUploader' THEN u.path
                         ELSE regexp_replace(u.path, '^uploads/-/system/', '') END,
                    u.store = 2
               FROM uploads u
              WHERE u.model_type = 'Project' AND u.model_id = $1::bigint
             UNION ALL
             SELECT 'packages'::text,
                    COALESCE(f.file_final_path,
                      substr(h, 1, 2) || '/' || substr(h, 3, 2) || '/' || h || '/packages/' || pk.id
                      || '/files/' || f.id || '/' || f.file),
                    COALESCE(f.file_store, 1) = 2
               FROM packages_packages pk
               JOIN packages_package_files f ON f.package_id = pk.id
              CROSS JOIN LATERAL (SELECT encode(sha256(pk.project_id::text::bytea), 'hex') AS h) x
              WHERE pk.project_id = $1::bigint
              ORDER BY 1, 2");
    /// Project `$1`'s links to LFS objects.
    DELETE_LFS_LINKS = "DELETE FROM lfs_objects_projects WHERE project_id = $1::bigint";
    /// LFS objects `$1` (no project links them any more).
    DELETE_LFS_OBJECTS = "DELETE FROM lfs_objects WHERE id = ANY($1::bigint[])";
    /// Project `$1`'s upload rows (polymorphic: no foreign key removes them).
    DELETE_UPLOADS = "DELETE FROM uploads WHERE model_type = 'Project' AND model_id = $1::bigint";
    /// What projects `$1` and namespaces `$2` hold of each kind: repositories (project,
    /// wiki and design per project repository row, and snippets'), files in object
    /// storage, files on GitLab's local disk, and uploads of the groups or beside the
    /// projects (any model but `Project`). (Container repositories are the blocking
    /// keys' to count.)
    TREE_COUNTS = "WITH files AS (
          SELECT u.store AS stored FROM uploads u
           WHERE u.model_type = 'Project' AND u.model_id = ANY($1::bigint[])
          UNION ALL
          SELECT COALESCE(f.file_store, 1) FROM packages_packages pk
            JOIN packages_package_files f ON f.package_id = pk.id
           WHERE pk.project_id = ANY($1::bigint[])
          UNION ALL
          SELECT COALESCE(o.file_store, 1) FROM lfs_objects o
           WHERE o.id IN (SELECT lfs_object_id FROM lfs_objects_projects WHERE project_id = ANY($1::bigint[]))
             AND NOT EXISTS (SELECT 1 FROM lfs_objects_projects op
                              WHERE op.lfs_object_id = o.id AND op.project_id <> ALL($1::bigint[])))
        SELECT 3 * (SELECT count(*) FROM project_repositories WHERE project_id = ANY($1::bigint[]))
                 + (SELECT count(*) FROM snippets sn JOIN snippet_repositories sr ON sr.snippet_id = sn.id
                     WHERE sn.project_id = ANY($1::bigint[])),
               (SELECT count(*) FROM files WHERE stored = 2),
               (SELECT count(*) FROM files WHERE stored <> 2),
               (SELECT count(*) FROM uploads u WHERE u.model_type IS DISTINCT FROM 'Project'
                  AND (u.project_id = ANY($1::bigint[]) OR u.namespace_id = ANY($2::bigint[])
                       OR (u.model_type = 'Namespace' AND u.model_id = ANY($2::bigint[]))))";
    /// Whether project `$1` exists.
    PROJECT_EXISTS = "SELECT EXISTS (SELECT 1 FROM projects WHERE id = $1::bigint)";
    /// Whether an LFS object with oid `$1` exists.
    LFS_OID_EXISTS = "SELECT EXISTS (SELECT 1 FROM lfs_objects WHERE oid = $1)";
}

/// Statements for GitLab 19.3 and later (`lfs_objects_projects.oid`): a link may name
/// its LFS object by oid alone, with `lfs_object_id` NULL.
pub mod oid_links {
    crate::statements::statements! {
        /// [`super::LFS_ONLY_OF_PROJECT`] where a link may carry only the oid: an object
        /// another project links by id or by oid is kept.
        LFS_ONLY_OF_PROJECT_BY_OID = "SELECT o.id::bigint, o.oid::text, COALESCE(o.file_store, 1) = 2
               FROM lfs_objects o
              WHERE (o.id IN (SELECT lfs_object_id FROM lfs_objects_projects WHERE project_id = $1::bigint)
                     OR o.oid IN (SELECT oid FROM lfs_objects_projects WHERE project_id = $1::bigint))
                AND NOT EXISTS (SELECT 1 FROM lfs_objects_projects op
                                 WHERE (op.lfs_object_id = o.id OR op.oid = o.oid)
                                   AND op.project_id <> $1::bigint)
              ORDER BY o.id
                FOR UPDATE OF o";
    }
}
