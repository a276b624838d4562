//! Which handler serves which function, as types (issue 8, footprint).
//!
//! Owns: the list of every function's [`Job`] type, re-exported under the name of its
//! [`Function`] variant (what a function binary hands to [`crate::lambda::run`]), and
//! [`Dispatch`], the match over [`Function`] that `hk`, the local runner, the benches
//! and the tests use. Because the choice is a type, a function binary instantiates
//! (and links) its own job and nothing else, and builds B28's delivery means only when
//! it is `deliver-notification`; the choice cannot be a Cargo feature, since one
//! `cargo lambda build` of every function unifies the features of `shared`.

use std::future::Future;

use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::job::{drive, Job};
use crate::messages::{Envelope, Message};
use crate::notify::{Notifier, NotifyConfig};
use crate::runtime::{Ended, Handler, Invocation};

/// The handler of exactly one function: what a function binary runs. Every [`Job`]
/// is one.
pub trait FunctionHandler: Handler + Default + Send + 'static {
    /// The function it serves.
    const FUNCTION: Function;

    /// Its B28 means, built once at cold start ([`Job::notifier`]).
    fn notifier(
        cfg: &NotifyConfig,
        aws: &aws_config::SdkConfig,
    ) -> impl Future<Output = Result<Option<Notifier>>> + Send;
}

impl<J: Job + Default> Handler for J {
    fn handle<C>(
        &self,
        inv: &Invocation<'_>,
        client: &mut C,
        env: &Envelope,
        message: Message,
    ) -> impl Future<Output = Result<Ended>> + Send
    where
        C: GenericClient + Send + Sync,
    {
        drive::<J, C>(inv, client, env, message)
    }
}

impl<J: Job + Default> FunctionHandler for J {
    const FUNCTION: Function = J::FUNCTION;

    fn notifier(
        cfg: &NotifyConfig,
        aws: &aws_config::SdkConfig,
    ) -> impl Future<Output = Result<Option<Notifier>>> + Send {
        J::notifier(cfg, aws)
    }
}

/// Re-exports each function's [`Job`] under the name of its [`Function`] variant and
/// declares [`Dispatch`] from one list: `Variant => job type`.
macro_rules! handlers {
    ($($function:ident => $job:path;)*) => {
        $(pub use $job;)*

        /// Every function's handler, chosen by `inv.function` at run time (`hk`, the
        /// local runner, benches, tests). Function binaries never name it.
        #[derive(Debug, Clone, Copy, Default)]
        pub struct Dispatch;

        impl Handler for Dispatch {
            fn handle<C>(
                &self,
                inv: &Invocation<'_>,
                client: &mut C,
                env: &Envelope,
                message: Message,
            ) -> impl Future<Output = Result<Ended>> + Send
            where
                C: GenericClient + Send + Sync,
            {
                async move {
                    match inv.function {
                        $(Function::$function => drive::<$function, C>(inv, client, env, message).await,)*
                    }
                }
            }
        }
    };
}

handlers! {
    RemoveExpiredMembers => crate::batches::remove_expired_members::RemoveExpiredMembers;
    DeleteUser => crate::workers::delete_user::DeleteUser;
    SchedulePruneDeletions => crate::batches::schedule_prune_deletions::SchedulePruneDeletions;
    PruneDeletions => crate::workers::prune_deletions::PruneDeletions;
    AdjournedGroupDeletion => crate::batches::adjourned_group_deletion::AdjournedGroupDeletion;
    GroupDestroy => crate::workers::group_destroy::GroupDestroy;
    PlaceholderUserCleanup => crate::batches::placeholder_user_cleanup::PlaceholderUserCleanup;
    DeletePlaceholderUser => crate::workers::delete_placeholder_user::DeletePlaceholderUser;
    PatExpiring => crate::batches::pat_expiring::PatExpiring;
    DeliverNotification => crate::workers::deliver_notification::DeliverNotification;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_handler_type_serves_the_function_of_its_name() {
        let all = [
            <RemoveExpiredMembers as FunctionHandler>::FUNCTION,
            <DeleteUser as FunctionHandler>::FUNCTION,
            <SchedulePruneDeletions as FunctionHandler>::FUNCTION,
            <PruneDeletions as FunctionHandler>::FUNCTION,
            <AdjournedGroupDeletion as FunctionHandler>::FUNCTION,
            <GroupDestroy as FunctionHandler>::FUNCTION,
            <PlaceholderUserCleanup as FunctionHandler>::FUNCTION,
            <DeletePlaceholderUser as FunctionHandler>::FUNCTION,
            <PatExpiring as FunctionHandler>::FUNCTION,
            <DeliverNotification as FunctionHandler>::FUNCTION,
        ];
        assert_eq!(all.len(), Function::ALL.len());
        for (f, g) in all.iter().zip(Function::ALL) {
            assert_eq!(f, g);
        }
    }
}
