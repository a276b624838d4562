-- GitLab 18.8 → 18.11: the changes to the modelled tables (docs/gitlab-source-notes.md
-- §A.2, §B), in release order. LOCAL AND TEST databases only. `hk migrate --gitlab 18.11`
-- (the default) applies V1, V2 and this.

-- 18.10
-- ChangeNamespaceStateColumnDefault: NULL → 0 (ancestor_inherited).
ALTER TABLE namespaces ALTER COLUMN state SET DEFAULT 0;
-- AddDeletionScheduledAtColumn: when the group was scheduled for deletion (the
-- scheduling user stays in state_metadata->'deletion_scheduled_by_user_id').
ALTER TABLE namespace_details ADD COLUMN deletion_scheduled_at timestamp with time zone;
-- DropNamespaceDetailsDeletedAtColumn
ALTER TABLE namespace_details DROP COLUMN deleted_at;

-- 18.11
-- AddIpAddressToMembersDeletionSchedules
ALTER TABLE members_deletion_schedules ADD COLUMN ip_address inet;
-- AddStateToOrganizations
ALTER TABLE organizations ADD COLUMN state smallint DEFAULT 0 NOT NULL;
CREATE INDEX index_organizations_on_state ON organizations (state);

-- Marker versions (docs/gitlab-source-notes.md §A.1) after 18.8. No 18.10 or 18.11
-- marker version was confirmed; a check tells those releases by their columns
-- (namespace_details.deletion_scheduled_at, shared/src/gitlab/deletion_model.rs).
INSERT INTO schema_migrations (version) VALUES
    ('20260117231951'),  -- 18.9
    ('20260120231710'),  -- 18.9
    ('20260126124047');  -- finalizer of BackfillNamespaceState (after 18.8)
