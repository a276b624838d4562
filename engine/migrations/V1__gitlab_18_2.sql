-- GitLab 18.2's model of the tables the bundle touches, for LOCAL AND TEST databases
-- only. Never run this against a real GitLab database: GitLab owns that schema.
-- `hk migrate --gitlab 18.2` stops here; V2 brings the model to 18.8.
--
-- Written from GitLab's db/structure.sql and the migrations that changed these tables
-- between 18.0 and 18.8 (docs/gitlab-source-notes.md §A). Column names, types,
-- nullability (NOT NULL and GitLab's CHECK (col IS NOT NULL) constraints, kept with
-- GitLab's constraint names), defaults, primary keys, foreign keys (GitLab's names and
-- ON DELETE actions; a column GitLab has no FK on has none here), and the triggers among
-- these tables are GitLab's.
--
-- Left out, on purpose (each left-out column is nullable or has a default in GitLab, so an
-- insert that names only the columns below behaves as on GitLab):
-- * users: ~60 columns the bundle never reads (sign-in and password fields, OTP, theme
--   and layout preferences, tokens, avatar, ...).
-- * namespaces, projects: settings columns (LDAP sync, runners, mirrors, limits, ...).
-- * issues, merge_requests, notes: the columns besides keys, authors, the CHECK-enforced
--   ones and titles; `*_convert_to_bigint` shadow columns; issues.work_item_type_id and
--   notes' noteable ids point to tables not modelled here (no FK in the model).
-- * application_settings: every column but id, default_projects_limit,
--   deletion_adjourned_period, allow_local_requests_from_web_hooks_and_services,
--   deny_all_requests_except_allowed and the timestamps (several hundred in GitLab).
-- * web_hooks: the per-event flags other than those the bundle reads.
-- * user_details: every column but user_id, job_title, bio, orcid, github.
-- * Indexes: the primary keys, the unique indexes ON CONFLICT and lookups rely on, and an
--   index on every foreign-key column (GitLab has one for each); not GitLab's other
--   indexes. Index names follow GitLab's `index_<table>_on_<columns>` form.
-- * loose_foreign_keys_deleted_records is PARTITIONED BY LIST (partition) in GitLab (the
--   partitions are created by the application at boot). Here it is a plain table with
--   the same columns and primary key: the loose-FK triggers write the same rows.
--
-- Sequences: GitLab's `<table>_id_seq` with `nextval` defaults (bigserial), as
-- structure.sql has them; organizations_id_seq starts at 1000, id 1 is the default
-- organization.

CREATE TABLE schema_migrations (
    version character varying NOT NULL PRIMARY KEY,
    finished_at character varying
);
-- Marker versions (docs/gitlab-source-notes.md §A.1) of releases up to 18.2.
INSERT INTO schema_migrations (version) VALUES
    ('20250502102329'),  -- 18.0
    ('20250509115821'),  -- 18.0
    ('20250526065102'),  -- 18.1
    ('20250530000002'),  -- 18.1
    ('20250610152957'),  -- 18.1
    ('20250709143510');  -- 18.2

-- Trigger functions (GitLab's, same names and behaviour).
CREATE FUNCTION insert_into_loose_foreign_keys_deleted_records() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO loose_foreign_keys_deleted_records (fully_qualified_table_name, primary_key_value)
  SELECT TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, old_table.id FROM old_table;
  RETURN NULL;
END
$$;

CREATE FUNCTION delete_associated_project_namespace() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM namespaces WHERE namespaces.id = OLD.project_namespace_id AND namespaces.type = 'Project';
  RETURN NULL;
END
$$;

CREATE FUNCTION insert_namespaces_sync_event() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO namespaces_sync_events (namespace_id) VALUES (COALESCE(NEW.id, OLD.id));
  RETURN NULL;
END
$$;

CREATE FUNCTION insert_projects_sync_event() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO projects_sync_events (project_id) VALUES (COALESCE(NEW.id, OLD.id));
  RETURN NULL;
END
$$;

CREATE FUNCTION prevent_delete_of_default_organization() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.id = 1 THEN
    RAISE EXCEPTION 'Deletion of the default Organization is not allowed.';
  END IF;
  RETURN OLD;
END
$$;

CREATE FUNCTION sync_project_authorizations_to_migration_table() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  IF (TG_OP = 'INSERT' OR TG_OP = 'UPDATE') THEN
    INSERT INTO project_authorizations_for_migration (project_id, user_id, access_level)
    VALUES (NEW.project_id, NEW.user_id, NEW.access_level::smallint)
    ON CONFLICT (project_id, user_id) DO UPDATE SET access_level = NEW.access_level::smallint;
    RETURN NEW;
  ELSIF (TG_OP = 'DELETE') THEN
    DELETE FROM project_authorizations_for_migration
    WHERE project_id = OLD.project_id AND user_id = OLD.user_id;
    RETURN OLD;
  END IF;
  RETURN NULL;
END
$$;

-- namespace_details is kept by these two from namespaces and projects.
CREATE FUNCTION update_namespace_details_from_namespaces() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO namespace_details (description, description_html, cached_markdown_version, updated_at, created_at, namespace_id)
  VALUES (NEW.description, NEW.description_html, NEW.cached_markdown_version, NEW.updated_at, NEW.updated_at, NEW.id)
  ON CONFLICT (namespace_id) DO UPDATE SET
    description = NEW.description, description_html = NEW.description_html,
    cached_markdown_version = NEW.cached_markdown_version, updated_at = NEW.updated_at
  WHERE namespace_details.namespace_id = NEW.id;
  RETURN NULL;
END
$$;

CREATE FUNCTION update_namespace_details_from_projects() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO namespace_details (description, description_html, cached_markdown_version, updated_at, created_at, namespace_id)
  VALUES (NEW.description, NEW.description_html, NEW.cached_markdown_version, NEW.updated_at, NEW.updated_at, NEW.project_namespace_id)
  ON CONFLICT (namespace_id) DO UPDATE SET
    description = NEW.description, description_html = NEW.description_html,
    cached_markdown_version = NEW.cached_markdown_version, updated_at = NEW.updated_at
  WHERE namespace_details.namespace_id = NEW.project_namespace_id;
  RETURN NULL;
END
$$;

-- ---- tables ----

-- GitLab's loose-FK queue (plain table here; partitioned by `partition` in GitLab).
CREATE TABLE loose_foreign_keys_deleted_records (
    id bigserial NOT NULL,
    partition bigint DEFAULT 1 NOT NULL,
    primary_key_value bigint NOT NULL,
    status smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    fully_qualified_table_name text NOT NULL,
    consume_after timestamp with time zone DEFAULT now(),
    cleanup_attempts smallint DEFAULT 0,
    CONSTRAINT check_1a541f3235 CHECK ((char_length(fully_qualified_table_name) <= 150)),
    CONSTRAINT loose_foreign_keys_deleted_records_pkey PRIMARY KEY (partition, id)
);

CREATE TABLE organizations (
    id bigint NOT NULL PRIMARY KEY,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    name text DEFAULT '' NOT NULL,
    path text NOT NULL,
    visibility_level smallint DEFAULT 0 NOT NULL,
    CONSTRAINT check_0b4296b5ea CHECK ((char_length(path) <= 255)),
    CONSTRAINT check_d130d769e0 CHECK ((char_length(name) <= 255))
);
CREATE SEQUENCE organizations_id_seq START WITH 1000 INCREMENT BY 1 MINVALUE 1000 NO MAXVALUE CACHE 1;
ALTER SEQUENCE organizations_id_seq OWNED BY organizations.id;
ALTER TABLE organizations ALTER COLUMN id SET DEFAULT nextval('organizations_id_seq'::regclass);
CREATE UNIQUE INDEX unique_organizations_on_path_case_insensitive ON organizations (lower(path));
INSERT INTO organizations (id, name, path, created_at, updated_at)
VALUES (1, 'Default', 'default', '2020-01-01T00:00:00Z', '2020-01-01T00:00:00Z');
CREATE TRIGGER prevent_delete_of_default_organization_before_destroy BEFORE DELETE ON organizations
    FOR EACH ROW EXECUTE FUNCTION prevent_delete_of_default_organization();

CREATE TABLE users (
    id bigserial PRIMARY KEY,
    email character varying DEFAULT '' NOT NULL,
    encrypted_password character varying DEFAULT '' NOT NULL,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    name character varying,
    admin boolean DEFAULT false NOT NULL,
    projects_limit integer NOT NULL,
    username character varying,
    can_create_group boolean DEFAULT true NOT NULL,
    can_create_team boolean DEFAULT true NOT NULL,
    state character varying,
    color_scheme_id bigint DEFAULT 1 NOT NULL,
    confirmed_at timestamp without time zone,
    hide_no_ssh_key boolean DEFAULT false,
    notification_email character varying,
    hide_no_password boolean DEFAULT false,
    otp_required_for_login boolean DEFAULT false NOT NULL,
    public_email character varying,
    project_view integer DEFAULT 2,
    external boolean DEFAULT false,
    auditor boolean DEFAULT false NOT NULL,
    require_two_factor_authentication_from_group boolean DEFAULT false NOT NULL,
    two_factor_grace_period integer DEFAULT 48 NOT NULL,
    last_activity_on date,
    notified_of_own_activity boolean DEFAULT false,
    preferred_language character varying,
    private_profile boolean DEFAULT false NOT NULL,
    commit_email character varying,
    user_type smallint DEFAULT 0,
    role smallint,
    onboarding_in_progress boolean DEFAULT false NOT NULL,
    color_mode_id smallint DEFAULT 1 NOT NULL,
    composite_identity_enforced boolean DEFAULT false NOT NULL,
    -- AddOrganizationIdToUsers (18.2): NOT NULL DEFAULT 1; the default goes in 18.3.
    organization_id bigint DEFAULT 1 NOT NULL,
    CONSTRAINT check_061f6f1c91 CHECK ((project_view IS NOT NULL)),
    CONSTRAINT check_0dd5948e38 CHECK ((user_type IS NOT NULL)),
    CONSTRAINT check_3a60c18afc CHECK ((hide_no_password IS NOT NULL)),
    CONSTRAINT check_693c6f3aab CHECK ((hide_no_ssh_key IS NOT NULL)),
    CONSTRAINT check_c737c04b87 CHECK ((notified_of_own_activity IS NOT NULL))
);
CREATE UNIQUE INDEX index_users_on_username ON users (username);
CREATE INDEX index_users_on_username_lower ON users (lower((username)::text));
CREATE UNIQUE INDEX index_users_on_email ON users (email);
CREATE INDEX index_users_on_email_lower ON users (lower((email)::text));
CREATE INDEX index_users_on_user_type_and_id ON users (user_type, id);
CREATE INDEX index_users_on_organization_id ON users (organization_id);
-- AddForeignKeyToUsersOnOrganizationId (18.2): added NOT VALID, validated in 18.3.
ALTER TABLE users ADD CONSTRAINT fk_d7b9ff90af FOREIGN KEY (organization_id) REFERENCES organizations(id) NOT VALID;
CREATE TRIGGER users_loose_fk_trigger AFTER DELETE ON users REFERENCING OLD TABLE AS old_table
    FOR EACH STATEMENT EXECUTE FUNCTION insert_into_loose_foreign_keys_deleted_records();

CREATE TABLE user_details (
    user_id bigint NOT NULL PRIMARY KEY,
    job_title character varying(200) DEFAULT '' NOT NULL,
    bio character varying(255) DEFAULT '' NOT NULL,
    orcid text DEFAULT '' NOT NULL,
    github text DEFAULT '' NOT NULL,
    -- GitLab's length limits (its constraint names not read).
    CHECK ((char_length(orcid) <= 256)),
    CHECK ((char_length(github) <= 500))
);
ALTER TABLE user_details ADD CONSTRAINT fk_rails_12e0b3043d FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;

CREATE TABLE organization_users (
    id bigserial PRIMARY KEY,
    organization_id bigint NOT NULL,
    user_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    access_level smallint DEFAULT 10 NOT NULL
);
CREATE UNIQUE INDEX index_organization_users_on_organization_id_and_user_id ON organization_users (organization_id, user_id);
CREATE INDEX index_organization_users_on_user_id ON organization_users (user_id);
ALTER TABLE organization_users ADD CONSTRAINT fk_8471abad75 FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE RESTRICT;
ALTER TABLE organization_users ADD CONSTRAINT fk_8d9b20725d FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;

CREATE TABLE namespaces (
    id bigserial PRIMARY KEY,
    name character varying NOT NULL,
    path character varying NOT NULL,
    owner_id bigint,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    type character varying DEFAULT 'User' NOT NULL,
    description character varying DEFAULT '' NOT NULL,
    membership_lock boolean DEFAULT false,
    share_with_group_lock boolean DEFAULT false,
    visibility_level integer DEFAULT 20 NOT NULL,
    request_access_enabled boolean DEFAULT true NOT NULL,
    ldap_sync_status character varying DEFAULT 'ready' NOT NULL,
    description_html text,
    parent_id bigint,
    require_two_factor_authentication boolean DEFAULT false NOT NULL,
    two_factor_grace_period integer DEFAULT 48 NOT NULL,
    cached_markdown_version integer,
    file_template_project_id bigint,
    custom_project_templates_group_id bigint,
    subgroup_creation_level integer DEFAULT 1,
    shared_runners_enabled boolean DEFAULT true NOT NULL,
    allow_descendants_override_disabled_shared_runners boolean DEFAULT false NOT NULL,
    traversal_ids bigint[] DEFAULT '{}' NOT NULL,
    organization_id bigint,
    CONSTRAINT check_2eae3bdf93 CHECK ((organization_id IS NOT NULL))
);
CREATE INDEX index_namespaces_on_parent_id_and_id ON namespaces (parent_id, id);
CREATE INDEX index_namespaces_on_owner_id ON namespaces (owner_id);
CREATE INDEX index_namespaces_on_type_and_id ON namespaces (type, id);
CREATE INDEX index_namespaces_on_path_lower ON namespaces (lower((path)::text));
CREATE INDEX index_namespaces_on_traversal_ids ON namespaces (traversal_ids);
CREATE INDEX index_namespaces_on_organization_id ON namespaces (organization_id);
CREATE INDEX index_namespaces_on_file_template_project_id ON namespaces (file_template_project_id);
CREATE INDEX index_namespaces_on_custom_project_templates_group_id_and_type ON namespaces (custom_project_templates_group_id, type);
ALTER TABLE namespaces ADD CONSTRAINT fk_34fceca87c FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE;
ALTER TABLE namespaces ADD CONSTRAINT fk_7f813d8c90 FOREIGN KEY (parent_id) REFERENCES namespaces(id) ON DELETE RESTRICT NOT VALID;
ALTER TABLE namespaces ADD CONSTRAINT fk_e7a0b20a6b FOREIGN KEY (custom_project_templates_group_id) REFERENCES namespaces(id) ON DELETE SET NULL;

CREATE TABLE namespace_details (
    namespace_id bigint NOT NULL PRIMARY KEY,
    created_at timestamp with time zone,
    updated_at timestamp with time zone,
    cached_markdown_version integer,
    description text,
    description_html text,
    creator_id bigint,
    deleted_at timestamp with time zone
);
ALTER TABLE namespace_details ADD CONSTRAINT fk_rails_cc11a451f8 FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE namespaces_sync_events (
    id bigserial PRIMARY KEY,
    namespace_id bigint NOT NULL
);
CREATE INDEX index_namespaces_sync_events_on_namespace_id ON namespaces_sync_events (namespace_id);
ALTER TABLE namespaces_sync_events ADD CONSTRAINT fk_rails_9da32a0431 FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE routes (
    id bigserial PRIMARY KEY,
    source_id bigint NOT NULL,
    source_type character varying NOT NULL,
    path character varying NOT NULL,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    name character varying,
    namespace_id bigint,
    CONSTRAINT check_af84c6c93f CHECK ((namespace_id IS NOT NULL))
);
CREATE UNIQUE INDEX index_routes_on_source_type_and_source_id ON routes (source_type, source_id);
CREATE UNIQUE INDEX index_routes_on_path ON routes (path);
CREATE INDEX index_routes_on_lower_path ON routes (lower((path)::text));
CREATE INDEX index_routes_on_namespace_id ON routes (namespace_id);
-- AddForeignKeyRoutesNamespaceId (17.10) NOT VALID; ValidateFkForRoutesNamespaceId (18.3).
ALTER TABLE routes ADD CONSTRAINT fk_679ff8213d FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE NOT VALID;

CREATE TABLE projects (
    id bigserial PRIMARY KEY,
    name character varying,
    path character varying,
    description text,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    creator_id bigint,
    namespace_id bigint NOT NULL,
    last_activity_at timestamp without time zone,
    visibility_level integer DEFAULT 0 NOT NULL,
    archived boolean DEFAULT false NOT NULL,
    star_count integer DEFAULT 0 NOT NULL,
    approvals_before_merge integer DEFAULT 0 NOT NULL,
    mirror boolean DEFAULT false NOT NULL,
    shared_runners_enabled boolean DEFAULT true NOT NULL,
    build_allow_git_fetch boolean DEFAULT true NOT NULL,
    build_timeout integer DEFAULT 3600 NOT NULL,
    mirror_trigger_builds boolean DEFAULT false NOT NULL,
    pending_delete boolean DEFAULT false,
    public_builds boolean DEFAULT true NOT NULL,
    only_allow_merge_if_pipeline_succeeds boolean DEFAULT false NOT NULL,
    repository_storage character varying DEFAULT 'default' NOT NULL,
    request_access_enabled boolean DEFAULT true NOT NULL,
    ci_config_path character varying,
    description_html text,
    printing_merge_request_link_enabled boolean DEFAULT true NOT NULL,
    auto_cancel_pending_pipelines integer DEFAULT 1 NOT NULL,
    cached_markdown_version integer,
    marked_for_deletion_at date,
    marked_for_deletion_by_user_id bigint,
    project_namespace_id bigint,
    hidden boolean DEFAULT false NOT NULL,
    organization_id bigint,
    CONSTRAINT check_1a6f946a8a CHECK ((organization_id IS NOT NULL)),
    CONSTRAINT check_fa75869cb1 CHECK ((project_namespace_id IS NOT NULL))
);
CREATE INDEX index_projects_on_namespace_id_and_id ON projects (namespace_id, id);
CREATE UNIQUE INDEX index_projects_on_project_namespace_id ON projects (project_namespace_id);
CREATE INDEX index_projects_on_organization_id ON projects (organization_id);
CREATE INDEX index_projects_on_creator_id_and_id ON projects (creator_id, id);
ALTER TABLE projects ADD CONSTRAINT fk_projects_namespace_id FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE RESTRICT;
ALTER TABLE projects ADD CONSTRAINT fk_6ca23af0a3 FOREIGN KEY (project_namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE projects ADD CONSTRAINT fk_9aee26923d FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE;
ALTER TABLE namespaces ADD CONSTRAINT fk_319256d87a FOREIGN KEY (file_template_project_id) REFERENCES projects(id) ON DELETE SET NULL;

CREATE TABLE projects_sync_events (
    id bigserial PRIMARY KEY,
    project_id bigint NOT NULL
);
CREATE INDEX index_projects_sync_events_on_project_id ON projects_sync_events (project_id);
ALTER TABLE projects_sync_events ADD CONSTRAINT fk_rails_bbf0eef59f FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;

CREATE TRIGGER trigger_delete_project_namespace_on_project_delete AFTER DELETE ON projects
    FOR EACH ROW WHEN ((old.project_namespace_id IS NOT NULL)) EXECUTE FUNCTION delete_associated_project_namespace();
CREATE TRIGGER trigger_namespaces_traversal_ids_on_update AFTER UPDATE ON namespaces
    FOR EACH ROW WHEN ((old.traversal_ids IS DISTINCT FROM new.traversal_ids)) EXECUTE FUNCTION insert_namespaces_sync_event();
CREATE TRIGGER trigger_projects_parent_id_on_insert AFTER INSERT ON projects
    FOR EACH ROW EXECUTE FUNCTION insert_projects_sync_event();
CREATE TRIGGER trigger_projects_parent_id_on_update AFTER UPDATE ON projects
    FOR EACH ROW WHEN ((old.namespace_id IS DISTINCT FROM new.namespace_id)) EXECUTE FUNCTION insert_projects_sync_event();
CREATE TRIGGER trigger_update_details_on_namespace_insert AFTER INSERT ON namespaces
    FOR EACH ROW WHEN (((new.type)::text <> 'Project'::text)) EXECUTE FUNCTION update_namespace_details_from_namespaces();
CREATE TRIGGER trigger_update_details_on_namespace_update AFTER UPDATE ON namespaces
    FOR EACH ROW WHEN ((((new.type)::text <> 'Project'::text) AND (((old.description)::text IS DISTINCT FROM (new.description)::text)
        OR (old.description_html IS DISTINCT FROM new.description_html)
        OR (old.cached_markdown_version IS DISTINCT FROM new.cached_markdown_version))))
    EXECUTE FUNCTION update_namespace_details_from_namespaces();
CREATE TRIGGER trigger_update_details_on_project_insert AFTER INSERT ON projects
    FOR EACH ROW EXECUTE FUNCTION update_namespace_details_from_projects();
CREATE TRIGGER trigger_update_details_on_project_update AFTER UPDATE ON projects
    FOR EACH ROW WHEN (((old.description IS DISTINCT FROM new.description) OR (old.description_html IS DISTINCT FROM new.description_html)
        OR (old.cached_markdown_version IS DISTINCT FROM new.cached_markdown_version)))
    EXECUTE FUNCTION update_namespace_details_from_projects();
CREATE TRIGGER namespaces_loose_fk_trigger AFTER DELETE ON namespaces REFERENCING OLD TABLE AS old_table
    FOR EACH STATEMENT EXECUTE FUNCTION insert_into_loose_foreign_keys_deleted_records();
CREATE TRIGGER projects_loose_fk_trigger AFTER DELETE ON projects REFERENCING OLD TABLE AS old_table
    FOR EACH STATEMENT EXECUTE FUNCTION insert_into_loose_foreign_keys_deleted_records();

CREATE TABLE member_roles (
    id bigserial PRIMARY KEY,
    namespace_id bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    base_access_level integer,
    name text DEFAULT 'Custom' NOT NULL,
    description text,
    occupies_seat boolean DEFAULT false NOT NULL,
    permissions jsonb DEFAULT '{}' NOT NULL,
    organization_id bigint,
    CONSTRAINT check_4364846f58 CHECK ((char_length(description) <= 255)),
    CONSTRAINT check_9907916995 CHECK ((char_length(name) <= 255))
);
CREATE INDEX index_member_roles_on_namespace_id ON member_roles (namespace_id);
CREATE INDEX index_member_roles_on_organization_id ON member_roles (organization_id);
ALTER TABLE member_roles ADD CONSTRAINT fk_rails_cf0ee35814 FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE member_roles ADD CONSTRAINT fk_fc154c5d30 FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE;

-- members.user_id: no FK (a loose FK of users, async_delete).
CREATE TABLE members (
    id bigserial PRIMARY KEY,
    access_level integer NOT NULL,
    source_id bigint NOT NULL,
    source_type character varying NOT NULL,
    user_id bigint,
    notification_level integer NOT NULL,
    type character varying,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    created_by_id bigint,
    invite_email character varying,
    invite_token character varying,
    invite_accepted_at timestamp without time zone,
    requested_at timestamp without time zone,
    expires_at date,
    ldap boolean DEFAULT false NOT NULL,
    override boolean DEFAULT false NOT NULL,
    state smallint DEFAULT 0,
    invite_email_success boolean DEFAULT true NOT NULL,
    member_namespace_id bigint,
    member_role_id bigint,
    expiry_notified_at timestamp with time zone,
    request_accepted_at timestamp with time zone,
    CONSTRAINT check_508774aac0 CHECK ((member_namespace_id IS NOT NULL))
);
CREATE INDEX index_members_on_source_id_and_source_type ON members (source_id, source_type);
CREATE INDEX index_members_on_user_id_source_id_source_type ON members (user_id, source_id, source_type);
CREATE INDEX index_members_on_expires_at ON members (expires_at);
CREATE UNIQUE INDEX index_members_on_invite_token ON members (invite_token);
CREATE INDEX index_members_on_requested_at ON members (requested_at);
CREATE INDEX index_members_on_member_namespace_id ON members (member_namespace_id);
CREATE INDEX index_members_on_member_role_id ON members (member_role_id);
CREATE INDEX index_members_on_access_level ON members (access_level);
ALTER TABLE members ADD CONSTRAINT fk_2f85abf8f1 FOREIGN KEY (member_namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE members ADD CONSTRAINT fk_member_role_on_members FOREIGN KEY (member_role_id) REFERENCES member_roles(id) ON DELETE SET NULL;

-- project_authorizations.user_id: no FK (a loose FK of users, async_delete).
CREATE TABLE project_authorizations (
    user_id bigint NOT NULL,
    project_id bigint NOT NULL,
    access_level integer NOT NULL,
    is_unique boolean,
    CONSTRAINT project_authorizations_pkey PRIMARY KEY (user_id, project_id, access_level)
);
CREATE INDEX index_project_authorizations_on_project_id ON project_authorizations (project_id);
ALTER TABLE project_authorizations ADD CONSTRAINT fk_rails_0f84bb11f3 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;

-- CreateTriggerOnProjectAuthorizations (18.0): every change mirrored here.
CREATE TABLE project_authorizations_for_migration (
    user_id bigint NOT NULL,
    project_id bigint NOT NULL,
    access_level smallint NOT NULL,
    CONSTRAINT project_authorizations_for_migration_pkey PRIMARY KEY (user_id, project_id)
);
CREATE UNIQUE INDEX index_project_authorizations_for_migration_on_project_user ON project_authorizations_for_migration (project_id, user_id);
ALTER TABLE project_authorizations_for_migration ADD CONSTRAINT fk_rails_b91fc9995e FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
CREATE TRIGGER sync_project_authorizations_to_migration AFTER INSERT OR DELETE OR UPDATE ON project_authorizations
    FOR EACH ROW EXECUTE FUNCTION sync_project_authorizations_to_migration_table();

CREATE TABLE project_group_links (
    id bigserial PRIMARY KEY,
    project_id bigint NOT NULL,
    group_id bigint NOT NULL,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    group_access integer DEFAULT 30 NOT NULL,
    expires_at date,
    member_role_id bigint
);
-- Made UNIQUE by ChangeIndexProjectGroupLinksOnGroupIdProjectId (18.3, V2).
CREATE INDEX index_project_group_links_on_group_id_and_project_id ON project_group_links (group_id, project_id);
CREATE INDEX index_project_group_links_on_project_id ON project_group_links (project_id);
CREATE INDEX index_project_group_links_on_member_role_id ON project_group_links (member_role_id);
ALTER TABLE project_group_links ADD CONSTRAINT fk_28a1244b01 FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE NOT VALID;
ALTER TABLE project_group_links ADD CONSTRAINT fk_daa8cee94c FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE project_group_links ADD CONSTRAINT fk_30ec712bec FOREIGN KEY (member_role_id) REFERENCES member_roles(id) ON DELETE SET NULL;

CREATE TABLE group_group_links (
    id bigserial PRIMARY KEY,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    shared_group_id bigint NOT NULL,
    shared_with_group_id bigint NOT NULL,
    expires_at date,
    group_access smallint DEFAULT 30 NOT NULL,
    member_role_id bigint
);
CREATE UNIQUE INDEX index_group_group_links_on_shared_group_and_shared_with_group ON group_group_links (shared_group_id, shared_with_group_id);
CREATE INDEX index_group_group_links_on_shared_with_group_id ON group_group_links (shared_with_group_id);
CREATE INDEX index_group_group_links_on_member_role_id ON group_group_links (member_role_id);
ALTER TABLE group_group_links ADD CONSTRAINT fk_rails_d3a0488427 FOREIGN KEY (shared_group_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE group_group_links ADD CONSTRAINT fk_rails_2b2353ca49 FOREIGN KEY (shared_with_group_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE group_group_links ADD CONSTRAINT fk_2fbc7071a3 FOREIGN KEY (member_role_id) REFERENCES member_roles(id) ON DELETE SET NULL;

-- notification_settings: no FK at all (user_id is a loose FK of users, async_delete).
CREATE TABLE notification_settings (
    id bigserial PRIMARY KEY,
    user_id bigint NOT NULL,
    source_id bigint,
    source_type character varying,
    level integer DEFAULT 0 NOT NULL,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    notification_email character varying,
    moved_project boolean DEFAULT true NOT NULL,
    merge_when_pipeline_succeeds boolean DEFAULT false NOT NULL,
    approver boolean DEFAULT false NOT NULL,
    -- AddNewEventToNotificationSettings (18.1)
    service_account_failed_pipeline boolean DEFAULT false NOT NULL,
    service_account_success_pipeline boolean DEFAULT false NOT NULL,
    service_account_fixed_pipeline boolean DEFAULT false NOT NULL
);
CREATE UNIQUE INDEX index_notifications_on_user_id_and_source_id_and_source_type
    ON notification_settings (user_id, source_id, source_type);
CREATE INDEX index_notification_settings_on_source_id_and_source_type ON notification_settings (source_id, source_type);

CREATE TABLE group_deletion_schedules (
    group_id bigint NOT NULL PRIMARY KEY,
    user_id bigint NOT NULL,
    marked_for_deletion_on date NOT NULL
);
CREATE INDEX index_group_deletion_schedules_on_user_id ON group_deletion_schedules (user_id);
CREATE INDEX index_group_deletion_schedules_on_marked_for_deletion_on ON group_deletion_schedules (marked_for_deletion_on);
ALTER TABLE group_deletion_schedules ADD CONSTRAINT fk_rails_4b8c694a6c FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE group_deletion_schedules ADD CONSTRAINT fk_11e3ebfcdd FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;

CREATE TABLE members_deletion_schedules (
    id bigserial PRIMARY KEY,
    namespace_id bigint NOT NULL,
    user_id bigint NOT NULL,
    scheduled_by_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL
);
CREATE UNIQUE INDEX idx_members_deletion_schedules_on_namespace_id_and_user_id ON members_deletion_schedules (namespace_id, user_id);
CREATE INDEX index_members_deletion_schedules_on_user_id ON members_deletion_schedules (user_id);
CREATE INDEX index_members_deletion_schedules_on_scheduled_by_id ON members_deletion_schedules (scheduled_by_id);
ALTER TABLE members_deletion_schedules ADD CONSTRAINT fk_rails_ce06d97eb2 FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE members_deletion_schedules ADD CONSTRAINT fk_rails_9af19961f8 FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE members_deletion_schedules ADD CONSTRAINT fk_rails_8fb4cda076 FOREIGN KEY (scheduled_by_id) REFERENCES users(id) ON DELETE CASCADE;

CREATE TABLE import_placeholder_user_details (
    id bigserial PRIMARY KEY,
    placeholder_user_id bigint NOT NULL,
    namespace_id bigint,
    deletion_attempts integer DEFAULT 0 NOT NULL,
    organization_id bigint NOT NULL,
    last_deletion_attempt_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL
);
CREATE INDEX index_import_placeholder_user_details_on_placeholder_user_id ON import_placeholder_user_details (placeholder_user_id);
CREATE INDEX index_import_placeholder_user_details_on_namespace_id ON import_placeholder_user_details (namespace_id);
CREATE INDEX index_import_placeholder_user_details_on_organization_id ON import_placeholder_user_details (organization_id);
CREATE INDEX index_import_placeholder_user_details_on_eligible_for_deletion
    ON import_placeholder_user_details (deletion_attempts, last_deletion_attempt_at, id) WHERE namespace_id IS NULL;
-- AddPlaceholderUserForeignKeyToImportPlaceholderUserDetails (18.0)
ALTER TABLE import_placeholder_user_details ADD CONSTRAINT fk_0f2747626d FOREIGN KEY (placeholder_user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE import_placeholder_user_details ADD CONSTRAINT fk_10a16b0435 FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE;
ALTER TABLE import_placeholder_user_details ADD CONSTRAINT fk_5f76b35426 FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE SET NULL;

CREATE TABLE import_source_users (
    id bigserial PRIMARY KEY,
    placeholder_user_id bigint,
    reassign_to_user_id bigint,
    namespace_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    status smallint DEFAULT 0 NOT NULL,
    source_username text,
    source_name text,
    source_user_identifier text NOT NULL,
    source_hostname text NOT NULL,
    import_type text NOT NULL,
    reassigned_by_user_id bigint,
    reassignment_error text,
    reassignment_token text,
    CONSTRAINT check_05708218cd CHECK ((char_length(reassignment_error) <= 255)),
    CONSTRAINT check_0d7295a307 CHECK ((char_length(import_type) <= 255)),
    CONSTRAINT check_199c28ec54 CHECK ((char_length(source_username) <= 255)),
    CONSTRAINT check_562655155f CHECK ((char_length(source_name) <= 255)),
    CONSTRAINT check_cc9d4093b5 CHECK ((char_length(source_user_identifier) <= 255)),
    CONSTRAINT check_cd2edb9334 CHECK ((char_length(reassignment_token) <= 32)),
    CONSTRAINT check_e2039840c5 CHECK ((char_length(source_hostname) <= 255))
);
CREATE UNIQUE INDEX unique_import_source_users_source_identifier_and_import_type
    ON import_source_users (source_user_identifier, namespace_id, source_hostname, import_type);
CREATE INDEX index_import_source_users_on_placeholder_user_id ON import_source_users (placeholder_user_id);
CREATE INDEX index_import_source_users_on_reassign_to_user_id ON import_source_users (reassign_to_user_id);
CREATE INDEX index_import_source_users_on_reassigned_by_user_id ON import_source_users (reassigned_by_user_id);
CREATE INDEX index_import_source_users_on_namespace_id_and_status ON import_source_users (namespace_id, status);
ALTER TABLE import_source_users ADD CONSTRAINT fk_719b74231d FOREIGN KEY (reassigned_by_user_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE import_source_users ADD CONSTRAINT fk_rails_167f82fd95 FOREIGN KEY (reassign_to_user_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE import_source_users ADD CONSTRAINT fk_rails_6aee6cd676 FOREIGN KEY (placeholder_user_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE import_source_users ADD CONSTRAINT fk_rails_ee30e569be FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE personal_access_tokens (
    id bigserial PRIMARY KEY,
    user_id bigint NOT NULL,
    name character varying NOT NULL,
    revoked boolean DEFAULT false,
    expires_at date,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    scopes character varying DEFAULT E'--- []\n' NOT NULL,
    impersonation boolean DEFAULT false NOT NULL,
    token_digest character varying,
    expire_notification_delivered boolean DEFAULT false NOT NULL,
    last_used_at timestamp with time zone,
    after_expiry_notification_delivered boolean DEFAULT false NOT NULL,
    previous_personal_access_token_id bigint,
    organization_id bigint NOT NULL,
    seven_days_notification_sent_at timestamp with time zone,
    thirty_days_notification_sent_at timestamp with time zone,
    sixty_days_notification_sent_at timestamp with time zone,
    description text,
    CONSTRAINT check_6d2ddc9355 CHECK ((char_length(description) <= 255))
);
CREATE INDEX index_personal_access_tokens_on_user_id ON personal_access_tokens (user_id);
CREATE UNIQUE INDEX index_personal_access_tokens_on_token_digest ON personal_access_tokens (token_digest);
CREATE INDEX index_personal_access_tokens_on_organization_id ON personal_access_tokens (organization_id);
CREATE INDEX index_pats_on_previous_personal_access_token_id ON personal_access_tokens (previous_personal_access_token_id);
CREATE INDEX index_pats_on_expiring_at_seven_days_notification_sent_at ON personal_access_tokens (expires_at, id)
    WHERE impersonation = false AND revoked = false AND seven_days_notification_sent_at IS NULL;
CREATE INDEX index_pats_on_expiring_at_thirty_days_notification_sent_at ON personal_access_tokens (expires_at, id)
    WHERE impersonation = false AND revoked = false AND thirty_days_notification_sent_at IS NULL;
CREATE INDEX index_pats_on_expiring_at_sixty_days_notification_sent_at ON personal_access_tokens (expires_at, id)
    WHERE impersonation = false AND revoked = false AND sixty_days_notification_sent_at IS NULL;
ALTER TABLE personal_access_tokens ADD CONSTRAINT fk_personal_access_tokens_user_id FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE personal_access_tokens ADD CONSTRAINT fk_da676c7ca5 FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE;
ALTER TABLE personal_access_tokens ADD CONSTRAINT fk_c951fbf57e FOREIGN KEY (previous_personal_access_token_id) REFERENCES personal_access_tokens(id) ON DELETE SET NULL;

CREATE TABLE web_hooks (
    id bigserial PRIMARY KEY,
    project_id bigint,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    type character varying DEFAULT 'ProjectHook',
    push_events boolean DEFAULT true NOT NULL,
    group_id bigint,
    enable_ssl_verification boolean DEFAULT true,
    encrypted_token character varying,
    encrypted_token_iv character varying,
    encrypted_url character varying,
    encrypted_url_iv character varying,
    recent_failures smallint DEFAULT 0 NOT NULL,
    disabled_until timestamp with time zone,
    name text,
    description text,
    resource_access_token_events boolean DEFAULT false NOT NULL,
    organization_id bigint,
    -- The EE group-hook triggers a removal fires (docs/gitlab-differences.md, "System
    -- hooks"): member_hooks, subgroup_hooks (13.x) and project_hooks
    -- (AddProjectEventsToWebHooks, 17.6).
    member_events boolean DEFAULT false NOT NULL,
    subgroup_events boolean DEFAULT false NOT NULL,
    project_events boolean DEFAULT false NOT NULL,
    CONSTRAINT check_1e4d5cbdc5 CHECK ((char_length(name) <= 255)),
    CONSTRAINT check_23a96ad211 CHECK ((char_length(description) <= 2048))
);
CREATE INDEX index_web_hooks_on_project_id ON web_hooks (project_id);
CREATE INDEX index_web_hooks_on_group_id ON web_hooks (group_id);
CREATE INDEX index_web_hooks_on_organization_id ON web_hooks (organization_id);
CREATE INDEX index_web_hooks_on_type ON web_hooks (type);
ALTER TABLE web_hooks ADD CONSTRAINT fk_0c8ca6d9d1 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE web_hooks ADD CONSTRAINT fk_rails_d35697648e FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE web_hooks ADD CONSTRAINT fk_e295b26646 FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE NOT VALID;

CREATE TABLE application_settings (
    id bigserial PRIMARY KEY,
    default_projects_limit integer,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    -- 7 until ChangeDeletionAdjournedPeriodSettingDefault (18.3, V2).
    deletion_adjourned_period integer DEFAULT 7 NOT NULL,
    allow_local_requests_from_web_hooks_and_services boolean DEFAULT false NOT NULL,
    -- AddDenyAllOutgoingRequestsToApplicationSettings (15.10).
    deny_all_requests_except_allowed boolean DEFAULT false NOT NULL,
    -- AddSilentModeEnabledToApplicationSettings (15.11): no system hook runs while on.
    silent_mode_enabled boolean DEFAULT false NOT NULL,
    -- The instance's identity (`Gitlab::CurrentSettings.uuid`, set once at install):
    -- storage-cleanup refuses to remove storage for another instance (issue 46).
    uuid character varying
);

CREATE TABLE ghost_user_migrations (
    id bigserial PRIMARY KEY,
    user_id bigint NOT NULL,
    initiator_user_id bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    hard_delete boolean DEFAULT false NOT NULL,
    consume_after timestamp with time zone DEFAULT now() NOT NULL
);
CREATE UNIQUE INDEX index_ghost_user_migrations_on_user_id ON ghost_user_migrations (user_id);
CREATE INDEX index_ghost_user_migrations_on_consume_after_id ON ghost_user_migrations (consume_after, id);
ALTER TABLE ghost_user_migrations ADD CONSTRAINT fk_202e642a2f FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;

CREATE TABLE issues (
    id bigserial PRIMARY KEY,
    title character varying,
    author_id bigint,
    project_id bigint,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    description text,
    iid integer,
    updated_by_id bigint,
    confidential boolean DEFAULT false NOT NULL,
    moved_to_id bigint,
    lock_version integer DEFAULT 0,
    time_estimate integer DEFAULT 0,
    last_edited_at timestamp without time zone,
    last_edited_by_id bigint,
    closed_at timestamp with time zone,
    closed_by_id bigint,
    state_id smallint DEFAULT 1 NOT NULL,
    duplicated_to_id bigint,
    blocking_issues_count integer DEFAULT 0 NOT NULL,
    upvotes_count integer DEFAULT 0 NOT NULL,
    work_item_type_id bigint,
    namespace_id bigint,
    imported_from smallint DEFAULT 0 NOT NULL,
    id_convert_to_bigint bigint DEFAULT 0 NOT NULL,
    namespace_traversal_ids bigint[] DEFAULT '{}',
    CONSTRAINT check_2addf801cd CHECK ((work_item_type_id IS NOT NULL)),
    CONSTRAINT check_c33362cd43 CHECK ((namespace_id IS NOT NULL)),
    CONSTRAINT check_fba63f706d CHECK ((lock_version IS NOT NULL))
);
CREATE INDEX index_issues_on_author_id_and_id_and_created_at ON issues (author_id, id, created_at);
CREATE INDEX index_issues_on_project_id_and_iid ON issues (project_id, iid);
CREATE INDEX index_issues_on_namespace_id ON issues (namespace_id);
CREATE INDEX index_issues_on_updated_by_id ON issues (updated_by_id);
CREATE INDEX index_issues_on_closed_by_id ON issues (closed_by_id);
CREATE INDEX index_issues_on_moved_to_id ON issues (moved_to_id);
CREATE INDEX index_issues_on_duplicated_to_id ON issues (duplicated_to_id);
ALTER TABLE issues ADD CONSTRAINT fk_05f1e72feb FOREIGN KEY (author_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE issues ADD CONSTRAINT fk_899c8f3231 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE issues ADD CONSTRAINT fk_9c4516d665 FOREIGN KEY (duplicated_to_id) REFERENCES issues(id) ON DELETE SET NULL;
ALTER TABLE issues ADD CONSTRAINT fk_a194299be1 FOREIGN KEY (moved_to_id) REFERENCES issues(id) ON DELETE SET NULL;
ALTER TABLE issues ADD CONSTRAINT fk_c63cbf6c25 FOREIGN KEY (closed_by_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE issues ADD CONSTRAINT fk_c78fbacd64 FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE issues ADD CONSTRAINT fk_ffed080f01 FOREIGN KEY (updated_by_id) REFERENCES users(id) ON DELETE SET NULL;

-- The rows GitLab writes beside a membership removal (docs/gitlab-differences.md D3):
-- the project's `events` row (EventCreateService), the user's `user_highest_roles`
-- row (UpdateHighestRoleWorker), the issue assignees TodosDestroyer::EntityLeaveWorker
-- reads, the todos it removes, and EE's audit events (`audit_events` dual-written
-- with the same id into the scoped tables, all partitioned by month on
-- `created_at`). GitLab creates the monthly partitions ahead of time; the model has a
-- default partition per table instead, so any test date lands somewhere.
CREATE TABLE issue_assignees (
    user_id bigint NOT NULL,
    issue_id bigint NOT NULL,
    namespace_id bigint,
    CONSTRAINT issue_assignees_pkey PRIMARY KEY (issue_id, user_id)
);
CREATE INDEX index_issue_assignees_on_user_id_and_issue_id ON issue_assignees (user_id, issue_id);
ALTER TABLE issue_assignees ADD CONSTRAINT fk_rails_0c6b5d4ff0 FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE issue_assignees ADD CONSTRAINT fk_rails_0d4b0d2aa3 FOREIGN KEY (issue_id) REFERENCES issues(id) ON DELETE CASCADE;

CREATE TABLE events (
    id bigserial PRIMARY KEY,
    project_id integer,
    author_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    action smallint NOT NULL,
    target_type character varying,
    group_id bigint,
    fingerprint bytea,
    target_id bigint,
    imported_from smallint DEFAULT 0 NOT NULL,
    personal_namespace_id bigint,
    CONSTRAINT check_97e06e05ad CHECK ((octet_length(fingerprint) <= 128)),
    CONSTRAINT check_events_sharding_key_is_not_null CHECK (((group_id IS NOT NULL) OR (project_id IS NOT NULL) OR (personal_namespace_id IS NOT NULL)))
);
CREATE INDEX index_events_on_project_id_and_id ON events (project_id, id);
CREATE INDEX index_events_on_author_id_and_id ON events (author_id, id);
ALTER TABLE events ADD CONSTRAINT fk_0434b48643 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE events ADD CONSTRAINT fk_edfd187b6f FOREIGN KEY (author_id) REFERENCES users(id) ON DELETE CASCADE;

CREATE TABLE user_highest_roles (
    updated_at timestamp with time zone NOT NULL,
    user_id bigint NOT NULL,
    highest_access_level integer,
    CONSTRAINT user_highest_roles_pkey PRIMARY KEY (user_id)
);
ALTER TABLE user_highest_roles ADD CONSTRAINT fk_rails_2f6d0c9b9d FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;

CREATE TABLE todos (
    id bigserial PRIMARY KEY,
    user_id bigint NOT NULL,
    project_id bigint,
    target_id bigint,
    target_type character varying NOT NULL,
    author_id bigint NOT NULL,
    action integer NOT NULL,
    state character varying NOT NULL,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    commit_id character varying,
    group_id bigint,
    resolved_by_action smallint,
    note_id bigint,
    snoozed_until timestamp with time zone,
    organization_id bigint,
    CONSTRAINT check_3c13ed1c7a CHECK ((num_nonnulls(group_id, organization_id, project_id) = 1)) NOT VALID
);
CREATE INDEX index_todos_on_user_id_and_id_pending ON todos (user_id, id) WHERE ((state)::text = 'pending'::text);
CREATE INDEX index_todos_on_user_id_and_id_done ON todos (user_id, id) WHERE ((state)::text = 'done'::text);
CREATE INDEX index_todos_on_project_id_and_id ON todos (project_id, id);
CREATE INDEX index_todos_on_group_id ON todos (group_id);
CREATE INDEX index_todos_on_author_id_and_created_at ON todos (author_id, created_at);
CREATE INDEX index_todos_on_target_type_and_target_id ON todos (target_type, target_id);
ALTER TABLE todos ADD CONSTRAINT fk_45054f9c45 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE todos ADD CONSTRAINT fk_d94154aa95 FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE todos ADD CONSTRAINT fk_ccf0373936 FOREIGN KEY (author_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE todos ADD CONSTRAINT fk_rails_a27c483435 FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;

-- EE's rows of a user that a membership removal deletes (docs/gitlab-differences.md
-- D3): the group's SAML identities (EE::Members::DestroyService#cleanup_group_identity),
-- the user's protected-branch merge and push access levels (EE ProjectMember
-- #delete_member_branch_protection, MembersDestroyer::CleanUpGroupProtectedBranchRulesWorker)
-- and protected-environment deploy access levels and approval rules
-- (ProtectedEnvironment.revoke_user). One structure.sql serves CE and EE, so every
-- release has them (empty on CE). Written from GitLab's models and migrations as read:
-- the columns the bundle reads and the ones an insert must name; the others are
-- nullable or have defaults. Their foreign keys carry GitLab's ON DELETE actions; the
-- constraint names are PostgreSQL's, not GitLab's.
CREATE TABLE saml_providers (
    id serial PRIMARY KEY,
    group_id bigint NOT NULL,
    enabled boolean NOT NULL,
    certificate_fingerprint character varying NOT NULL,
    sso_url character varying NOT NULL,
    enforced_sso boolean DEFAULT false NOT NULL,
    default_membership_role smallint DEFAULT 10 NOT NULL
);
CREATE INDEX index_saml_providers_on_group_id ON saml_providers (group_id);
ALTER TABLE saml_providers ADD FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE identities (
    id serial PRIMARY KEY,
    extern_uid character varying,
    provider character varying,
    user_id bigint,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    secondary_extern_uid character varying,
    saml_provider_id integer,
    trusted_extern_uid boolean DEFAULT true
);
CREATE INDEX index_identities_on_user_id ON identities (user_id);
CREATE INDEX index_identities_on_saml_provider_id ON identities (saml_provider_id) WHERE (saml_provider_id IS NOT NULL);
ALTER TABLE identities ADD FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE identities ADD FOREIGN KEY (saml_provider_id) REFERENCES saml_providers(id) ON DELETE CASCADE;

CREATE TABLE protected_branches (
    id serial PRIMARY KEY,
    project_id bigint,
    name character varying NOT NULL,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    code_owner_approval_required boolean DEFAULT false NOT NULL,
    allow_force_push boolean DEFAULT false NOT NULL,
    namespace_id bigint,
    CONSTRAINT protected_branches_project_or_namespace CHECK ((((project_id IS NULL) AND (namespace_id IS NOT NULL)) OR ((project_id IS NOT NULL) AND (namespace_id IS NULL))))
);
CREATE INDEX index_protected_branches_on_project_id ON protected_branches (project_id);
CREATE INDEX index_protected_branches_on_namespace_id ON protected_branches (namespace_id) WHERE (namespace_id IS NOT NULL);
ALTER TABLE protected_branches ADD FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE protected_branches ADD FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE protected_branch_merge_access_levels (
    id serial PRIMARY KEY,
    protected_branch_id bigint NOT NULL,
    access_level integer DEFAULT 40,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    user_id bigint,
    group_id bigint
);
CREATE INDEX index_protected_branch_merge_access ON protected_branch_merge_access_levels (protected_branch_id);
CREATE INDEX index_protected_branch_merge_access_levels_on_user_id ON protected_branch_merge_access_levels (user_id);
CREATE INDEX index_protected_branch_merge_access_levels_on_group_id ON protected_branch_merge_access_levels (group_id);
ALTER TABLE protected_branch_merge_access_levels ADD FOREIGN KEY (protected_branch_id) REFERENCES protected_branches(id) ON DELETE CASCADE;
ALTER TABLE protected_branch_merge_access_levels ADD FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE protected_branch_merge_access_levels ADD FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE protected_branch_push_access_levels (
    id serial PRIMARY KEY,
    protected_branch_id bigint NOT NULL,
    access_level integer DEFAULT 40,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    user_id bigint,
    group_id bigint,
    deploy_key_id bigint
);
CREATE INDEX index_protected_branch_push_access ON protected_branch_push_access_levels (protected_branch_id);
CREATE INDEX index_protected_branch_push_access_levels_on_user_id ON protected_branch_push_access_levels (user_id);
CREATE INDEX index_protected_branch_push_access_levels_on_group_id ON protected_branch_push_access_levels (group_id);
ALTER TABLE protected_branch_push_access_levels ADD FOREIGN KEY (protected_branch_id) REFERENCES protected_branches(id) ON DELETE CASCADE;
ALTER TABLE protected_branch_push_access_levels ADD FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE protected_branch_push_access_levels ADD FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE protected_environments (
    id bigserial PRIMARY KEY,
    project_id bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    name character varying NOT NULL,
    group_id bigint,
    required_approval_count integer DEFAULT 0 NOT NULL,
    CONSTRAINT protected_environments_project_or_group_existence CHECK ((num_nonnulls(group_id, project_id) = 1)),
    CONSTRAINT protected_environments_required_approval_count_positive CHECK ((required_approval_count >= 0))
);
CREATE INDEX index_protected_environments_on_project_id ON protected_environments (project_id);
CREATE INDEX index_protected_environments_on_group_id ON protected_environments (group_id) WHERE (group_id IS NOT NULL);
ALTER TABLE protected_environments ADD FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE protected_environments ADD FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE protected_environment_deploy_access_levels (
    id bigserial PRIMARY KEY,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    access_level integer,
    protected_environment_id bigint NOT NULL,
    user_id bigint,
    group_id bigint,
    group_inheritance_type smallint DEFAULT 0 NOT NULL
);
CREATE INDEX index_protected_env_deploy_access_levels_on_protected_env_id ON protected_environment_deploy_access_levels (protected_environment_id);
CREATE INDEX index_protected_environment_deploy_access_levels_on_user_id ON protected_environment_deploy_access_levels (user_id);
CREATE INDEX index_protected_environment_deploy_access_levels_on_group_id ON protected_environment_deploy_access_levels (group_id);
ALTER TABLE protected_environment_deploy_access_levels ADD FOREIGN KEY (protected_environment_id) REFERENCES protected_environments(id) ON DELETE CASCADE;
ALTER TABLE protected_environment_deploy_access_levels ADD FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE protected_environment_deploy_access_levels ADD FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;

CREATE TABLE protected_environment_approval_rules (
    id bigserial PRIMARY KEY,
    protected_environment_id bigint NOT NULL,
    user_id bigint,
    group_id bigint,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    access_level smallint,
    required_approvals smallint DEFAULT 1 NOT NULL,
    group_inheritance_type smallint DEFAULT 0 NOT NULL
);
CREATE INDEX index_protected_environment_approval_rules_on_protected_env_id ON protected_environment_approval_rules (protected_environment_id);
CREATE INDEX index_protected_environment_approval_rules_on_user_id ON protected_environment_approval_rules (user_id);
CREATE INDEX index_protected_environment_approval_rules_on_group_id ON protected_environment_approval_rules (group_id);
ALTER TABLE protected_environment_approval_rules ADD FOREIGN KEY (protected_environment_id) REFERENCES protected_environments(id) ON DELETE CASCADE;
ALTER TABLE protected_environment_approval_rules ADD FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE;
ALTER TABLE protected_environment_approval_rules ADD FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE CASCADE;

-- A project's feature access levels (ProjectFeature: DISABLED 0, PRIVATE 10, ENABLED
-- 20, PUBLIC 30), which Todos::Destroy::PrivateFeaturesService reads; only the
-- columns of the features whose todos it removes, and the timestamps.
CREATE TABLE project_features (
    id bigserial PRIMARY KEY,
    project_id bigint NOT NULL,
    merge_requests_access_level integer,
    issues_access_level integer,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    repository_access_level integer DEFAULT 20 NOT NULL
);
CREATE UNIQUE INDEX index_project_features_on_project_id ON project_features (project_id);
ALTER TABLE project_features ADD CONSTRAINT fk_rails_18513d9b92 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;

CREATE SEQUENCE audit_events_id_seq;
CREATE TABLE audit_events (
    id bigint DEFAULT nextval('audit_events_id_seq'::regclass) NOT NULL,
    author_id bigint NOT NULL,
    entity_id bigint NOT NULL,
    entity_type character varying NOT NULL,
    details text,
    ip_address inet,
    author_name text,
    entity_path text,
    target_details text,
    created_at timestamp without time zone NOT NULL,
    target_type text,
    target_id bigint,
    CONSTRAINT check_492aaa021d CHECK ((char_length(entity_path) <= 5500)),
    CONSTRAINT check_83ff8406e2 CHECK ((char_length(author_name) <= 255)),
    CONSTRAINT check_97a8c868e7 CHECK ((char_length(target_type) <= 255)),
    CONSTRAINT check_d493ec90b5 CHECK ((char_length(target_details) <= 5500)),
    CONSTRAINT audit_events_pkey PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
ALTER SEQUENCE audit_events_id_seq OWNED BY audit_events.id;
CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;
CREATE SEQUENCE shared_audit_event_id_seq;
CREATE TABLE group_audit_events (
    id bigint DEFAULT nextval('shared_audit_event_id_seq'::regclass) NOT NULL,
    created_at timestamp with time zone NOT NULL,
    group_id bigint NOT NULL,
    author_id bigint NOT NULL,
    target_id bigint,
    event_name text,
    details text,
    ip_address inet,
    author_name text,
    entity_path text,
    target_details text,
    target_type text,
    CONSTRAINT group_audit_events_author_name_check CHECK ((char_length(author_name) <= 255)),
    CONSTRAINT group_audit_events_entity_path_check CHECK ((char_length(entity_path) <= 5500)),
    CONSTRAINT group_audit_events_event_name_check CHECK ((char_length(event_name) <= 255)),
    CONSTRAINT group_audit_events_target_details_check CHECK ((char_length(target_details) <= 5500)),
    CONSTRAINT group_audit_events_target_type_check CHECK ((char_length(target_type) <= 255)),
    CONSTRAINT group_audit_events_pkey PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);
CREATE TABLE group_audit_events_default PARTITION OF group_audit_events DEFAULT;
CREATE TABLE project_audit_events (LIKE group_audit_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (created_at);
ALTER TABLE project_audit_events RENAME COLUMN group_id TO project_id;
ALTER TABLE project_audit_events ADD CONSTRAINT project_audit_events_pkey PRIMARY KEY (id, created_at);
CREATE TABLE project_audit_events_default PARTITION OF project_audit_events DEFAULT;
CREATE TABLE user_audit_events (LIKE group_audit_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (created_at);
ALTER TABLE user_audit_events RENAME COLUMN group_id TO user_id;
ALTER TABLE user_audit_events ADD CONSTRAINT user_audit_events_pkey PRIMARY KEY (id, created_at);
CREATE TABLE user_audit_events_default PARTITION OF user_audit_events DEFAULT;
CREATE TABLE instance_audit_events (LIKE group_audit_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (created_at);
ALTER TABLE instance_audit_events DROP COLUMN group_id;
ALTER TABLE instance_audit_events ADD CONSTRAINT instance_audit_events_pkey PRIMARY KEY (id, created_at);
CREATE TABLE instance_audit_events_default PARTITION OF instance_audit_events DEFAULT;

CREATE TABLE merge_requests (
    id bigserial PRIMARY KEY,
    target_branch character varying NOT NULL,
    source_branch character varying NOT NULL,
    source_project_id bigint,
    author_id bigint,
    assignee_id bigint,
    title character varying,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    merge_status character varying DEFAULT 'unchecked' NOT NULL,
    target_project_id bigint NOT NULL,
    iid integer,
    description text,
    updated_by_id bigint,
    merge_when_pipeline_succeeds boolean DEFAULT false NOT NULL,
    merge_user_id bigint,
    lock_version integer DEFAULT 0,
    squash boolean DEFAULT false NOT NULL,
    state_id smallint DEFAULT 1 NOT NULL,
    draft boolean DEFAULT false NOT NULL,
    override_requested_changes boolean DEFAULT false NOT NULL,
    imported_from smallint DEFAULT 0 NOT NULL,
    retargeted boolean DEFAULT false NOT NULL,
    CONSTRAINT check_970d272570 CHECK ((lock_version IS NOT NULL))
);
CREATE INDEX index_merge_requests_on_author_id_and_id ON merge_requests (author_id, id);
CREATE INDEX index_merge_requests_on_target_project_id_and_iid ON merge_requests (target_project_id, iid);
CREATE INDEX index_merge_requests_on_source_project_id_and_source_branch ON merge_requests (source_project_id, source_branch);
CREATE INDEX index_merge_requests_on_assignee_id ON merge_requests (assignee_id);
CREATE INDEX index_merge_requests_on_updated_by_id ON merge_requests (updated_by_id);
CREATE INDEX index_merge_requests_on_merge_user_id ON merge_requests (merge_user_id);
ALTER TABLE merge_requests ADD CONSTRAINT fk_6149611a04 FOREIGN KEY (assignee_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE merge_requests ADD CONSTRAINT fk_641731faff FOREIGN KEY (updated_by_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE merge_requests ADD CONSTRAINT fk_a6963e8447 FOREIGN KEY (target_project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE merge_requests ADD CONSTRAINT fk_ad525e1f87 FOREIGN KEY (merge_user_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE merge_requests ADD CONSTRAINT fk_e719a85f8a FOREIGN KEY (author_id) REFERENCES users(id) ON DELETE SET NULL;
ALTER TABLE merge_requests ADD CONSTRAINT fk_source_project FOREIGN KEY (source_project_id) REFERENCES projects(id) ON DELETE SET NULL;

-- notes.author_id: no FK in GitLab.
CREATE TABLE notes (
    id bigserial PRIMARY KEY,
    note text,
    noteable_type character varying,
    author_id bigint,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    project_id bigint,
    noteable_id bigint,
    system boolean DEFAULT false NOT NULL,
    updated_by_id bigint,
    type character varying,
    discussion_id character varying,
    confidential boolean,
    internal boolean DEFAULT false NOT NULL,
    namespace_id bigint,
    imported_from smallint DEFAULT 0 NOT NULL,
    organization_id bigint,
    CONSTRAINT check_1244cbd7d0 CHECK ((noteable_type IS NOT NULL)),
    CONSTRAINT check_82f260979e CHECK ((num_nonnulls(namespace_id, organization_id, project_id) >= 1))
);
CREATE INDEX index_notes_on_author_id_created_at_id ON notes (author_id, created_at, id);
CREATE INDEX index_notes_on_project_id_and_id_and_system_false ON notes (project_id, id);
CREATE INDEX index_notes_on_namespace_id ON notes (namespace_id);
CREATE INDEX index_notes_on_organization_id ON notes (organization_id);
ALTER TABLE notes ADD CONSTRAINT fk_76db6d50c6 FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE CASCADE;
ALTER TABLE notes ADD CONSTRAINT fk_99e097b079 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;
ALTER TABLE notes ADD CONSTRAINT fk_eef74d5cc8 FOREIGN KEY (organization_id) REFERENCES organizations(id) ON DELETE CASCADE;

-- Blocking tables ---------------------------------------------------------------------
-- The tables whose RESTRICT / NO ACTION foreign keys block a plain DELETE of a project or a
-- namespace in GitLab 18 (docs/gitlab-differences.md, "Rows that block a group's deletion").
-- Columns: GitLab's NOT NULL ones and those the tests use; keys and the blocking foreign keys
-- with GitLab's names and actions. group-destroy finds these keys in the catalog at run time,
-- so nothing in the bundle requires any of these tables to exist.

-- Container registry repositories (container_repositories.project_id: NO ACTION). The
-- registry holds the images; GitLab deletes a row through the registry API.
CREATE TABLE container_repositories (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    project_id bigint NOT NULL,
    name character varying NOT NULL,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    status smallint,
    expiration_policy_started_at timestamp with time zone,
    expiration_policy_cleanup_status smallint DEFAULT 0 NOT NULL,
    expiration_policy_completed_at timestamp with time zone,
    last_cleanup_deleted_tags_count integer,
    delete_started_at timestamp with time zone,
    status_updated_at timestamp with time zone,
    failed_deletion_count integer DEFAULT 0 NOT NULL,
    next_delete_attempt_at timestamp with time zone,
    CONSTRAINT check_container_repositories_non_negative_failed_deletion_count CHECK ((failed_deletion_count >= 0))
);
CREATE UNIQUE INDEX index_container_repositories_on_project_id_and_name ON container_repositories (project_id, name);
ALTER TABLE ONLY container_repositories
    ADD CONSTRAINT fk_rails_32f7bf5aad FOREIGN KEY (project_id) REFERENCES projects(id);

-- Project saved replies: two foreign keys on project_id. The NO ACTION one from the table's
-- creation (16.11) comes first, the CASCADE NOT VALID one (17.3) after: on an instance
-- upgraded through the migrations the NO ACTION key fires first and a plain DELETE of the
-- project fails while a reply exists. This order is reproduced here.
CREATE TABLE project_saved_replies (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    project_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    name text NOT NULL,
    content text NOT NULL,
    CONSTRAINT check_5569cfc14e CHECK ((char_length(content) <= 10000)),
    CONSTRAINT check_a3993908da CHECK ((char_length(name) <= 255))
);
CREATE UNIQUE INDEX index_project_saved_replies_on_project_id_and_name ON project_saved_replies (project_id, name);
ALTER TABLE ONLY project_saved_replies
    ADD CONSTRAINT fk_rails_0ace76afbb FOREIGN KEY (project_id) REFERENCES projects(id);
ALTER TABLE ONLY project_saved_replies
    ADD CONSTRAINT fk_0ace76afbb FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE NOT VALID;

-- Debian distributions of a project and of a group (RESTRICT): their Release files and
-- signatures are uploads in object storage, which GitLab deletes in Ruby.
CREATE TABLE packages_debian_project_distributions (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    project_id bigint NOT NULL,
    creator_id integer,
    valid_time_duration_seconds integer,
    file_store smallint DEFAULT 1 NOT NULL,
    automatic boolean DEFAULT true NOT NULL,
    automatic_upgrades boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    codename text NOT NULL,
    suite text,
    origin text,
    label text,
    version text,
    description text,
    encrypted_signing_keys text,
    encrypted_signing_keys_iv text,
    file text,
    file_signature text,
    signed_file text,
    signed_file_store smallint DEFAULT 1 NOT NULL,
    CONSTRAINT check_a56ae58a17 CHECK ((char_length(codename) <= 255))
);
CREATE UNIQUE INDEX uniq_pkgs_debian_project_distributions_project_id_and_codename
    ON packages_debian_project_distributions (project_id, codename);
CREATE UNIQUE INDEX uniq_pkgs_debian_project_distributions_project_id_and_suite
    ON packages_debian_project_distributions (project_id, suite);
ALTER TABLE ONLY packages_debian_project_distributions
    ADD CONSTRAINT fk_rails_df44271a30 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE RESTRICT;

CREATE TABLE packages_debian_group_distributions (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    group_id bigint NOT NULL,
    creator_id integer,
    valid_time_duration_seconds integer,
    file_store smallint DEFAULT 1 NOT NULL,
    automatic boolean DEFAULT true NOT NULL,
    automatic_upgrades boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    codename text NOT NULL,
    suite text,
    origin text,
    label text,
    version text,
    description text,
    encrypted_signing_keys text,
    encrypted_signing_keys_iv text,
    file text,
    file_signature text,
    signed_file text,
    signed_file_store smallint DEFAULT 1 NOT NULL,
    CONSTRAINT check_3d6f87fc31 CHECK ((char_length(codename) <= 255))
);
CREATE UNIQUE INDEX uniq_pkgs_debian_group_distributions_group_id_and_codename
    ON packages_debian_group_distributions (group_id, codename);
CREATE UNIQUE INDEX uniq_pkgs_debian_group_distributions_group_id_and_suite
    ON packages_debian_group_distributions (group_id, suite);
ALTER TABLE ONLY packages_debian_group_distributions
    ADD CONSTRAINT fk_rails_0adf75c347 FOREIGN KEY (group_id) REFERENCES namespaces(id) ON DELETE RESTRICT;

-- Compliance requirement statuses of a project (17.10): RESTRICT on project_id and on
-- namespace_id (the project's group). Counters only, no file.
CREATE TABLE project_requirement_compliance_statuses (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    project_id bigint NOT NULL,
    namespace_id bigint NOT NULL,
    compliance_requirement_id bigint NOT NULL,
    compliance_framework_id bigint NOT NULL,
    pass_count integer DEFAULT 0 NOT NULL,
    fail_count integer DEFAULT 0 NOT NULL,
    pending_count integer DEFAULT 0 NOT NULL
);
CREATE INDEX idx_project_requirement_statuses_on_project_id ON project_requirement_compliance_statuses (project_id);
CREATE INDEX idx_project_requirement_statuses_on_namespace_id ON project_requirement_compliance_statuses (namespace_id);
CREATE UNIQUE INDEX uniq_compliance_statuses_requirement_project_id
    ON project_requirement_compliance_statuses (compliance_requirement_id, project_id);
ALTER TABLE ONLY project_requirement_compliance_statuses
    ADD CONSTRAINT fk_rails_0beca284a6 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE RESTRICT;
ALTER TABLE ONLY project_requirement_compliance_statuses
    ADD CONSTRAINT fk_04ffb1e9ab FOREIGN KEY (namespace_id) REFERENCES namespaces(id) ON DELETE RESTRICT;

-- Storage a project owns outside the database (issue 37, docs/storage-cleanup.md): the
-- rows group-destroy reads its storage manifest from. Columns are those the manifest
-- reads plus the NOT NULL ones GitLab's models write.

-- Gitaly storages (GitLab's `repository_storage` names).
CREATE TABLE shards (
    id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    name character varying NOT NULL
);
CREATE UNIQUE INDEX index_shards_on_name ON shards (name);

-- A project's repository on hashed storage: `disk_path` is `@hashed/<h[0..1]>/<h[2..3]>/<h>`
-- with h the SHA-256 of the project id; the wiki and design repositories sit beside it
-- (`.wiki.git`, `.design.git`).
CREATE TABLE project_repositories (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    shard_id integer NOT NULL,
    disk_path character varying NOT NULL,
    project_id bigint NOT NULL,
    object_format smallint DEFAULT 0 NOT NULL
);
CREATE UNIQUE INDEX index_project_repositories_on_disk_path ON project_repositories (disk_path);
CREATE UNIQUE INDEX index_project_repositories_on_project_id ON project_repositories (project_id);
CREATE INDEX index_project_repositories_on_shard_id_and_project_id ON project_repositories (shard_id, project_id);
ALTER TABLE ONLY project_repositories
    ADD CONSTRAINT fk_rails_c3258dc63b FOREIGN KEY (shard_id) REFERENCES shards(id) ON DELETE RESTRICT;
ALTER TABLE ONLY project_repositories
    ADD CONSTRAINT fk_rails_c1770f3a4e FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;

-- Repository storage moves of projects: GitLab's Projects::DestroyService refuses a
-- project with one scheduled (2) or started (3) (issue 46).
CREATE TABLE project_repository_storage_moves (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    project_id bigint NOT NULL,
    state smallint DEFAULT 1 NOT NULL,
    source_storage_name text NOT NULL,
    destination_storage_name text NOT NULL,
    error_message text,
    CONSTRAINT check_85854380db CHECK ((char_length(error_message) <= 256)),
    CONSTRAINT project_repository_storage_moves_destination_storage_name CHECK ((char_length(destination_storage_name) <= 255)),
    CONSTRAINT project_repository_storage_moves_source_storage_name CHECK ((char_length(source_storage_name) <= 255))
);
CREATE INDEX index_project_repository_storage_moves_on_project_id ON project_repository_storage_moves (project_id);
ALTER TABLE ONLY project_repository_storage_moves
    ADD CONSTRAINT fk_rails_5106dbd44a FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;

CREATE TABLE snippets (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    title character varying,
    content text,
    author_id bigint NOT NULL,
    project_id bigint,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    file_name character varying,
    type character varying,
    visibility_level integer DEFAULT 0 NOT NULL
);
CREATE INDEX index_snippets_on_project_id_and_visibility_level ON snippets (project_id, visibility_level);
ALTER TABLE ONLY snippets
    ADD CONSTRAINT fk_be41fd4bb7 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;

-- A snippet's repository: `disk_path` is `@snippets/<h[0..1]>/<h[2..3]>/<h>`, h the
-- SHA-256 of the snippet id.
CREATE TABLE snippet_repositories (
    snippet_id bigint NOT NULL PRIMARY KEY,
    shard_id bigint NOT NULL,
    disk_path character varying(80) NOT NULL
);
CREATE UNIQUE INDEX index_snippet_repositories_on_disk_path ON snippet_repositories (disk_path);
CREATE INDEX index_snippet_repositories_on_shard_id ON snippet_repositories (shard_id);
ALTER TABLE ONLY snippet_repositories
    ADD CONSTRAINT fk_rails_f21f899728 FOREIGN KEY (shard_id) REFERENCES shards(id) ON DELETE RESTRICT;
ALTER TABLE ONLY snippet_repositories
    ADD CONSTRAINT fk_rails_d2ae8b0c5b FOREIGN KEY (snippet_id) REFERENCES snippets(id) ON DELETE CASCADE;

-- Uploads of every model (polymorphic: no foreign key). store 1 = local disk of the
-- GitLab nodes, 2 = object storage.
CREATE TABLE uploads (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    size bigint NOT NULL,
    path character varying(511) NOT NULL,
    checksum character varying(64),
    model_id bigint,
    model_type character varying,
    uploader character varying NOT NULL,
    created_at timestamp without time zone NOT NULL,
    store integer DEFAULT 1 NOT NULL,
    mount_point character varying,
    secret character varying,
    version integer DEFAULT 1 NOT NULL,
    uploaded_by_user_id bigint,
    organization_id bigint,
    namespace_id bigint,
    project_id bigint
);
CREATE INDEX index_uploads_on_model_id_and_model_type ON uploads (model_id, model_type);

-- LFS objects are shared between projects (by content id); file_store 2 = object storage.
CREATE TABLE lfs_objects (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    oid character varying NOT NULL,
    size bigint NOT NULL,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    file character varying,
    file_store integer DEFAULT 1
);
CREATE UNIQUE INDEX index_lfs_objects_on_oid ON lfs_objects (oid);

CREATE TABLE lfs_objects_projects (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    lfs_object_id bigint NOT NULL,
    project_id bigint NOT NULL,
    created_at timestamp without time zone,
    updated_at timestamp without time zone,
    repository_type smallint
);
CREATE INDEX index_lfs_objects_projects_on_lfs_object_id ON lfs_objects_projects (lfs_object_id);
CREATE INDEX index_lfs_objects_projects_on_project_id_and_lfs_object_id ON lfs_objects_projects (project_id, lfs_object_id);
-- A new link takes the object's row FOR KEY SHARE: it waits for a deletion of the object.
ALTER TABLE ONLY lfs_objects_projects
    ADD CONSTRAINT fk_2eb33f7a78 FOREIGN KEY (lfs_object_id) REFERENCES lfs_objects(id) ON DELETE CASCADE;

CREATE TABLE packages_packages (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    project_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    name character varying NOT NULL,
    version character varying,
    package_type smallint NOT NULL,
    creator_id integer,
    status smallint DEFAULT 0 NOT NULL
);
CREATE INDEX index_packages_packages_on_project_id_and_package_type ON packages_packages (project_id, package_type);
ALTER TABLE ONLY packages_packages
    ADD CONSTRAINT fk_rails_e1ac527425 FOREIGN KEY (project_id) REFERENCES projects(id) ON DELETE CASCADE;

-- A package file's object key: `<h[0..1]>/<h[2..3]>/<h>/packages/<package id>/files/<id>/<file>`,
-- h the SHA-256 of the project id.
CREATE TABLE packages_package_files (
    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    package_id bigint NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    size bigint,
    file_store integer DEFAULT 1,
    file_name character varying NOT NULL,
    file text NOT NULL,
    status smallint DEFAULT 0 NOT NULL,
    project_id bigint,
    -- Direct upload to the final location (16.11): when set, the object key
    -- (`ObjectStorage#store_path`), `<h[0..1]>/<h[2..3]>/<h>/@final/<x[0..1]>/<x[2..3]>/<x[4..]>`.
    file_final_path text,
    CONSTRAINT check_0f29938b18 CHECK ((char_length(file_final_path) <= 1024))
);
CREATE INDEX index_packages_package_files_on_package_id_and_file_name ON packages_package_files (package_id, file_name);
ALTER TABLE ONLY packages_package_files
    ADD CONSTRAINT fk_86f0f182f8 FOREIGN KEY (package_id) REFERENCES packages_packages(id) ON DELETE CASCADE;
