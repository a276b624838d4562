//! Which handler serves which function, as types (issue 8, footprint).
//!
//! Owns: one zero-sized [`FunctionHandler`] per [`Function`] (same name as the
//! variant), which is what a function binary hands to [`crate::lambda::run`], and
//! [`Dispatch`], the match over [`Function`] that `hk`, the local runner, the benches
//! and the tests use. Because the choice is a type, a function binary instantiates
//! (and links) its own handler and nothing else, and builds B28's delivery means only
//! when it is `deliver-notification`; the choice cannot be a Cargo feature, since one
//! `cargo lambda build` of every function unifies the features of `shared`.
//!
//! Adding a function means adding a line to the [`handlers!`] list below.

use std::future::Future;

use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::messages::Envelope;
use crate::notify::{Notifier, NotifyConfig};
use crate::runtime::{Handler, Invocation, Report};

/// The handler of exactly one function: what a function binary runs.
pub trait FunctionHandler: Handler + Default + Send + 'static {
    /// The function it serves.
    const FUNCTION: Function;

    /// B28's means, built once at cold start into `Deps::notifier`: the instance for
    /// `pat-expiring`, the instance and delivery means for `deliver-notification`,
    /// nothing for the others. Secrets behind ARNs are read through `aws`.
    fn notifier(
        cfg: &NotifyConfig,
        aws: &aws_config::SdkConfig,
    ) -> impl Future<Output = Result<Option<Notifier>>> + Send {
        let _ = (cfg, aws);
        async { Ok(None) }
    }
}

/// Declares the per-function handler types and [`Dispatch`] from one list:
/// `Variant => handler module [, notifier: builder]`, where the module has
/// `async fn handle(inv, client, env)` and the builder is an
/// `async fn(&NotifyConfig, &SdkConfig) -> Result<Notifier>`.
macro_rules! handlers {
    ($($function:ident => $module:path $(, notifier: $build:path)?;)*) => {
        $(
            #[doc = concat!("The handler of [`Function::", stringify!($function), "`].")]
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $function;

            impl Handler for $function {
                fn handle<C>(
                    &self,
                    inv: &Invocation<'_>,
                    client: &mut C,
                    env: &Envelope,
                ) -> impl Future<Output = Result<Report>> + Send
                where
                    C: GenericClient + Send + Sync,
                {
                    use $module as m;
                    m::handle(inv, client, env)
                }
            }

            impl FunctionHandler for $function {
                const FUNCTION: Function = Function::$function;
                $(
                    async fn notifier(
                        cfg: &NotifyConfig,
                        aws: &aws_config::SdkConfig,
                    ) -> Result<Option<Notifier>> {
                        $build(cfg, aws).await.map(Some)
                    }
                )?
            }
        )*

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
            ) -> impl Future<Output = Result<Report>> + Send
            where
                C: GenericClient + Send + Sync,
            {
                async move {
                    match inv.function {
                        $(Function::$function => $function.handle(inv, client, env).await,)*
                    }
                }
            }
        }
    };
}

handlers! {
    RemoveExpiredMembers => crate::batches::remove_expired_members;
    DeleteUser => crate::workers::delete_user;
    SchedulePruneDeletions => crate::batches::schedule_prune_deletions;
    PruneDeletions => crate::workers::prune_deletions;
    AdjournedGroupDeletion => crate::batches::adjourned_group_deletion;
    GroupDestroy => crate::workers::group_destroy;
    PlaceholderUserCleanup => crate::batches::placeholder_user_cleanup;
    DeletePlaceholderUser => crate::workers::delete_placeholder_user;
    PatExpiring => crate::batches::pat_expiring, notifier: instance_only;
    DeliverNotification => crate::workers::deliver_notification, notifier: full;
}

/// `pat-expiring`'s notifier: the instance only.
async fn instance_only(cfg: &NotifyConfig, _aws: &aws_config::SdkConfig) -> Result<Notifier> {
    Notifier::instance_only(cfg)
}

/// `deliver-notification`'s notifier: the instance and the delivery means.
async fn full(cfg: &NotifyConfig, aws: &aws_config::SdkConfig) -> Result<Notifier> {
    Notifier::full(cfg, Some(aws)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_handler_type_serves_the_function_of_its_name() {
        let all = [
            RemoveExpiredMembers::FUNCTION,
            DeleteUser::FUNCTION,
            SchedulePruneDeletions::FUNCTION,
            PruneDeletions::FUNCTION,
            AdjournedGroupDeletion::FUNCTION,
            GroupDestroy::FUNCTION,
            PlaceholderUserCleanup::FUNCTION,
            DeletePlaceholderUser::FUNCTION,
            PatExpiring::FUNCTION,
            DeliverNotification::FUNCTION,
        ];
        assert_eq!(all.len(), Function::ALL.len());
        for (f, g) in all.iter().zip(Function::ALL) {
            assert_eq!(f, g);
        }
    }
}
