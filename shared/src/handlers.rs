//! Which handler serves which function, as types (issue 8, footprint).
//!
//! Owns: every function's [`crate::job::Job`] type (from the function table),
//! re-exported under the name of its [`Function`] variant (what a function binary hands to [`crate::lambda::run`]), and
//! [`Dispatch`], the match over [`Function`] that `hk`, the local runner, the benches
//! and the tests use. Because the choice is a type, a function binary instantiates
//! (and links) its own job and nothing else, and builds B28's delivery means only when
//! it is `deliver-notification`; the choice cannot be a Cargo feature, since one
//! `cargo lambda build` of every function unifies the features of `shared`.

use std::future::Future;

use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::job::drive;
use crate::messages::{Envelope, Message};
use crate::runtime::{Ended, Handler, Invocation};
use crate::{batches, workers};

/// Re-exports each function's [`crate::job::Job`] under the name of its [`Function`]
/// variant and builds [`Dispatch`], from the function table.
macro_rules! handlers {
    ($(
        $(#[$doc:meta])*
        $function:ident = $name:literal {
            class: $class:literal,
            messages: [$($messages:tt)*],
            cron: $cron:expr,
            timeout_s: $timeout:literal,
            max_hops: $hops:literal,
            sends_to: [$($to:ident),*],
            job: $($job:ident)::+,
        }
    )*) => {
        $(pub use $($job)::+ as $function;)*

        /// The function of each job of the list, in list order.
        #[cfg(test)]
        const JOBS: &[Function] = &[$(<$function as crate::job::Job>::FUNCTION),*];

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

crate::function::with_functions!(handlers);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_has_one_job_per_function_in_catalogue_order() {
        assert_eq!(JOBS, Function::ALL);
    }
}
