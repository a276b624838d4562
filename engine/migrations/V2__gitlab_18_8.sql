-- GitLab 18.2 → 18.8: the changes to the modelled tables (docs/gitlab-source-notes.md
-- §A.2), in release order. LOCAL AND TEST databases only. `hk migrate --gitlab 18.8`
-- (the default) applies V1 and this.

-- 18.3
-- ChangeDefaultOrganizationIdOnUsers: inserts must give users.organization_id.
ALTER TABLE users ALTER COLUMN organization_id DROP DEFAULT;
-- ValidateOrganizationIdFkOnUsers
ALTER TABLE users VALIDATE CONSTRAINT fk_d7b9ff90af;
-- ValidateFkForRoutesNamespaceId
ALTER TABLE routes VALIDATE CONSTRAINT fk_679ff8213d;
-- ChangeDeletionAdjournedPeriodSettingDefault (existing rows keep their value)
ALTER TABLE application_settings ALTER COLUMN deletion_adjourned_period SET DEFAULT 30;
-- AddGroupIdAndUserTypeToPersonalAccessTokens, IndexPersonalAccessTokensOnGroupId,
-- AddForeignKeyToPersonalAccessTokensGroupId
ALTER TABLE personal_access_tokens ADD COLUMN group_id bigint, ADD COLUMN user_type smallint;
CREATE INDEX index_personal_access_tokens_on_group_id ON personal_access_tokens (group_id);
ALTER TABLE personal_access_tokens ADD CONSTRAINT fk_7cea2c7262 FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE SET NULL;
-- ChangeIndexProjectGroupLinksOnGroupIdProjectId: the (group_id, project_id) index
-- becomes unique.
DROP INDEX index_project_group_links_on_group_id_and_project_id;
CREATE UNIQUE INDEX unique_index_project_group_links_on_group_id_and_project_id
    ON project_group_links (group_id, project_id);

-- 18.4
-- AddStateToNamespaces
ALTER TABLE namespaces ADD COLUMN state smallint;
-- AddStateMetadataToNamespaceDetails (CHECK added NOT VALID, validated by 18.6–18.8)
ALTER TABLE namespace_details ADD COLUMN state_metadata jsonb DEFAULT '{}' NOT NULL;
ALTER TABLE namespace_details ADD CONSTRAINT check_namespace_details_state_metadata_is_hash
    CHECK ((jsonb_typeof(state_metadata) = 'object'::text));
-- AddGranularToPersonalAccessTokens
ALTER TABLE personal_access_tokens ADD COLUMN granular boolean DEFAULT false NOT NULL;

-- 18.5
-- CreateVirtualRegistriesContainerCacheEntries
-- Container virtual registry cache entries (from GitLab 18.5; hash-partitioned on
-- relative_path): group_id NO ACTION. Each row is a cached file
-- in object storage (object_storage_key).
CREATE TABLE virtual_registries_container_cache_entries (
    group_id bigint NOT NULL,
    upstream_id bigint NOT NULL,
    downloads_count bigint DEFAULT 0 NOT NULL,
    upstream_checked_at timestamp with time zone DEFAULT now() NOT NULL,
    downloaded_at timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    file_store integer DEFAULT 1 NOT NULL,
    size integer NOT NULL,
    status smallint DEFAULT 0 NOT NULL,
    file_sha1 bytea NOT NULL,
    upstream_etag text,
    content_type text DEFAULT 'application/octet-stream'::text NOT NULL,
    relative_path text NOT NULL,
    file text NOT NULL,
    object_storage_key text NOT NULL,
    CONSTRAINT check_file_sha1_length CHECK ((octet_length(file_sha1) = 20)),
    PRIMARY KEY (upstream_id, relative_path, status)
) PARTITION BY HASH (relative_path);
-- GitLab keeps the partitions in schema gitlab_partitions_static (16 of them); two here.
CREATE SCHEMA IF NOT EXISTS gitlab_partitions_static;
CREATE TABLE gitlab_partitions_static.virtual_registries_container_cache_entries_00
    PARTITION OF virtual_registries_container_cache_entries FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE gitlab_partitions_static.virtual_registries_container_cache_entries_01
    PARTITION OF virtual_registries_container_cache_entries FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE INDEX index_virtual_registries_container_cache_entries_on_group_id
    ON virtual_registries_container_cache_entries (group_id);
ALTER TABLE virtual_registries_container_cache_entries
    ADD CONSTRAINT fk_rails_5c3a01ae96 FOREIGN KEY (group_id) REFERENCES namespaces(id);

-- 18.6
-- RemoveUsersRoleColumn
ALTER TABLE users DROP COLUMN role;

-- Marker versions (docs/gitlab-source-notes.md §A.1) of 18.3 to 18.8.
INSERT INTO schema_migrations (version) VALUES
    ('20250722084637'),  -- 18.3
    ('20250813085941'),  -- 18.4
    ('20250821175200'),  -- 18.4
    ('20250909232224'),  -- 18.4
    ('20250915232121'),  -- 18.5
    ('20250918140756'),  -- 18.5
    ('20251014132633'),  -- 18.6
    ('20251119195901'),  -- 18.7
    ('20251231013427');  -- 18.8
