-- GitLab 18.11 → 19.5: the changes to the modelled tables (docs/gitlab-source-notes.md
-- §A.3), in release order where the migration's milestone was read, then the ones whose
-- milestone was not (present by 19.5). LOCAL AND TEST databases only. `hk migrate
-- --gitlab 19.5` (the default) applies V1 to V3 and this.

-- 19.0
-- QueueFixNamespaceState repairs states; AddNamespacesStateNotNullConstraint (NOT VALID)
-- and AddNotNullConstraintToNamespacesState (validation): namespaces.state is never NULL.
UPDATE namespaces SET state = 0 WHERE state IS NULL;
ALTER TABLE namespaces ADD CONSTRAINT check_9d490f2140 CHECK ((state IS NOT NULL)) NOT VALID;
ALTER TABLE namespaces VALIDATE CONSTRAINT check_9d490f2140;
-- MakeShardIdNullableOnProjectRepositories: a repository may have no shard row (the
-- project's repository_storage names its storage).
ALTER TABLE project_repositories ALTER COLUMN shard_id DROP NOT NULL;

-- 19.1
-- UseAuditEventsIdSeqForScopedAuditEvents: the scoped audit tables draw their ids from
-- audit_events_id_seq (the legacy table's, advanced by years of dual writes), detached
-- from the legacy table so it survives that table's drop.
ALTER SEQUENCE audit_events_id_seq OWNED BY NONE;
ALTER TABLE group_audit_events ALTER COLUMN id SET DEFAULT nextval('audit_events_id_seq'::regclass);
ALTER TABLE project_audit_events ALTER COLUMN id SET DEFAULT nextval('audit_events_id_seq'::regclass);
ALTER TABLE user_audit_events ALTER COLUMN id SET DEFAULT nextval('audit_events_id_seq'::regclass);
ALTER TABLE instance_audit_events ALTER COLUMN id SET DEFAULT nextval('audit_events_id_seq'::regclass);
-- AddUserTypeToGhostUserMigrations: GitLab's model stamps the user's user_type on create
-- (`before_create :set_user_type`) and its workers pick rows by it (`for_humans`,
-- `for_non_humans`), so a row without it is consumed by neither.
ALTER TABLE ghost_user_migrations ADD COLUMN user_type smallint;
-- The partitioned uploads table (uploads_9ba88c4165, backfilled by BackfillPartitionedUploads)
-- takes the name `uploads`; the legacy table is renamed uploads_archived and its last key
-- dropped (RemoveUploadsArchivedToUsersForeignKey, 19.1), then it goes. Partitioned by
-- model_type; the model has the partitions of the model types the bundle reads or a
-- fixture writes (GitLab has 23, one per model type), and a default partition for the
-- others (GitLab has none), so a read-only copy of a live 19.x database takes every row.
CREATE TABLE uploads_partitioned (
    id bigint NOT NULL,
    size bigint NOT NULL,
    model_id bigint NOT NULL,
    uploaded_by_user_id bigint,
    organization_id bigint,
    namespace_id bigint,
    project_id bigint,
    created_at timestamp without time zone,
    store integer DEFAULT 1 NOT NULL,
    version integer DEFAULT 1,
    path text NOT NULL,
    checksum text,
    model_type text NOT NULL,
    uploader text NOT NULL,
    mount_point text,
    secret text,
    CONSTRAINT check_2849dedce7 CHECK ((char_length(path) <= 511)),
    CONSTRAINT check_b888b1df14 CHECK ((char_length(checksum) <= 64)),
    PRIMARY KEY (id, model_type)
) PARTITION BY LIST (model_type);
CREATE TABLE project_uploads PARTITION OF uploads_partitioned FOR VALUES IN ('Project');
CREATE TABLE namespace_uploads PARTITION OF uploads_partitioned FOR VALUES IN ('Namespace');
CREATE TABLE user_uploads PARTITION OF uploads_partitioned FOR VALUES IN ('User');
CREATE TABLE snippet_uploads PARTITION OF uploads_partitioned FOR VALUES IN ('Snippet');
CREATE TABLE other_uploads PARTITION OF uploads_partitioned DEFAULT;
INSERT INTO uploads_partitioned (id, size, model_id, uploaded_by_user_id, organization_id, namespace_id,
        project_id, created_at, store, version, path, checksum, model_type, uploader, mount_point, secret)
    SELECT id, size, model_id, uploaded_by_user_id, organization_id, namespace_id, project_id, created_at,
           store, version, path, checksum, model_type, uploader, mount_point, secret
      FROM uploads WHERE model_type IS NOT NULL AND model_id IS NOT NULL;
CREATE SEQUENCE uploads_id_seq_19;
SELECT setval('uploads_id_seq_19', COALESCE((SELECT max(id) FROM uploads), 0) + 1, false);
DROP TABLE uploads;
ALTER TABLE uploads_partitioned RENAME TO uploads;
ALTER SEQUENCE uploads_id_seq_19 RENAME TO uploads_id_seq;
ALTER SEQUENCE uploads_id_seq OWNED BY uploads.id;
ALTER TABLE uploads ALTER COLUMN id SET DEFAULT nextval('uploads_id_seq'::regclass);
CREATE INDEX index_uploads_9ba88c4165_on_model_uploader_created_at
    ON uploads (model_id, model_type, uploader, created_at);
CREATE INDEX index_uploads_9ba88c4165_on_project_id ON uploads (project_id);
CREATE INDEX index_uploads_9ba88c4165_on_namespace_id ON uploads (namespace_id);
CREATE INDEX index_uploads_9ba88c4165_on_organization_id ON uploads (organization_id);
CREATE INDEX index_uploads_9ba88c4165_on_uploaded_by_user_id ON uploads (uploaded_by_user_id);
ALTER TABLE uploads ADD CONSTRAINT fk_rails_67403e76d7
    FOREIGN KEY (uploaded_by_user_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE uploads ADD CONSTRAINT fk_rails_728a7c799d
    FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE uploads ADD CONSTRAINT fk_rails_dc321bb575
    FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE uploads ADD CONSTRAINT fk_rails_e5afc14eb7
    FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE;
-- CreateNamespaceStatePropagations: the transactional outbox of namespace state changes.
-- GitLab writes a record (status 0 pending, 1 processing) with each state change; its
-- StatePropagationWorker carries the state to the descendants, then deletes the record.
CREATE TABLE namespace_state_propagations (
    id bigserial PRIMARY KEY,
    namespace_id bigint NOT NULL,
    started_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    source_state smallint NOT NULL,
    target_state smallint NOT NULL,
    status smallint DEFAULT 0 NOT NULL
);
CREATE INDEX idx_namespace_state_propagations_on_namespace_id ON namespace_state_propagations (namespace_id);
CREATE INDEX idx_namespace_state_propagations_on_status_created_at ON namespace_state_propagations (status, created_at);
CREATE UNIQUE INDEX idx_namespace_state_propagations_unique_pending_processing
    ON namespace_state_propagations (namespace_id, target_state) WHERE (status IN (0, 1));
ALTER TABLE namespace_state_propagations ADD CONSTRAINT fk_9798d3f752
    FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;

-- 19.3
-- RemoveNotNullFromLfsObjectsProjectsLfsObjectId: rows copied by an organization move may
-- have no lfs_object_id; the link also carries the object's oid. The key from
-- lfs_object_id to lfs_objects is gone; the one from project_id cascades.
ALTER TABLE lfs_objects_projects ALTER COLUMN lfs_object_id DROP NOT NULL;
ALTER TABLE lfs_objects_projects ADD COLUMN oid text,
    ADD CONSTRAINT check_76ef4585ad CHECK ((char_length(oid) <= 255));
CREATE INDEX index_lfs_objects_projects_on_oid ON lfs_objects_projects (oid);
ALTER TABLE lfs_objects_projects DROP CONSTRAINT fk_2eb33f7a78;
ALTER TABLE lfs_objects_projects ADD CONSTRAINT fk_2eb33f7a78
    FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE NOT VALID;

-- 19.4
-- AddIndexToNamespaceDetailsOnDeletionScheduledAt (and its (namespace_id, …) companion).
CREATE INDEX index_namespace_details_on_deletion_scheduled_at
    ON namespace_details (deletion_scheduled_at) WHERE deletion_scheduled_at IS NOT NULL;
CREATE INDEX index_namespace_details_on_id_and_deletion_scheduled_at
    ON namespace_details (namespace_id, deletion_scheduled_at) WHERE deletion_scheduled_at IS NOT NULL;

-- By 19.5, milestone not read.
-- project_repositories: the RESTRICT key to shards is dropped (a shard row no longer pins
-- a repository); the cascading key from projects is fk_7a810d4121 (added NOT VALID).
ALTER TABLE project_repositories DROP CONSTRAINT fk_rails_c3258dc63b;
ALTER TABLE project_repositories DROP CONSTRAINT fk_rails_c1770f3a4e;
ALTER TABLE project_repositories ADD CONSTRAINT fk_7a810d4121
    FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE NOT VALID;
-- namespaces: the template-project keys move to namespace_template_settings.
ALTER TABLE namespaces DROP CONSTRAINT fk_319256d87a;
ALTER TABLE namespaces DROP CONSTRAINT fk_e7a0b20a6b;
DROP INDEX index_namespaces_on_file_template_project_id;
DROP INDEX index_namespaces_on_custom_project_templates_group_id_and_type;
-- personal_access_tokens.sudo; import_source_users.reassignment_expires_at.
ALTER TABLE personal_access_tokens ADD COLUMN sudo boolean DEFAULT false NOT NULL;
ALTER TABLE import_source_users ADD COLUMN reassignment_expires_at timestamp with time zone;

-- Marker versions (docs/gitlab-source-notes.md §A.1) of 19.0 to 19.5.
INSERT INTO schema_migrations (version) VALUES
    ('20260330104732'),  -- 19.0
    ('20260604190000'),  -- 19.1
    ('20260617120000'),  -- 19.2
    ('20260727141402'),  -- 19.3
    ('20260818153000'),  -- 19.4
    ('20260916223000');  -- 19.5

-- (milestone not read) The legacy audit_events table is gone by 19.5 (GitLab 19.5's
-- db/structure.sql has no CREATE TABLE audit_events; the scoped tables are written
-- alone once stop_legacy_audit_event_writes is on).
DROP TABLE audit_events;
