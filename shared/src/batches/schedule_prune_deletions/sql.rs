//! The statements of [`crate::batches::schedule_prune_deletions`].

crate::statements::statements! {
    /// The backlog: how many schedules exist, and the oldest `created_at`.
    BACKLOG = "SELECT count(*)::bigint, min(created_at) FILTER (WHERE isfinite(created_at)),
                    count(*) FILTER (WHERE NOT isfinite(created_at))::bigint
             FROM members_deletion_schedules";
}
