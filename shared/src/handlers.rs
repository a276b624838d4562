//! Which handler serves which function, as types (issue 8, footprint).
//!
//! Owns: every function's [`crate::job::Job`], re-exported under its [`Function`]
//! variant's name (what a binary hands to [`crate::lambda::run`]); [`Message`], the sum
//! of every job's payload type, with `Envelope::parse` and `Envelope::decode`; and
//! [`Dispatch`] for `hk`, the local runner, the benches and the tests, with every job's
//! dependencies it was given. Because the choice is a type, a binary links its own job
//! and its job's dependencies only (not a Cargo feature: one `cargo lambda build`
//! unifies the features of `shared`).

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use serde_json::Value;
use tokio_postgres::GenericClient;

use crate::error::{Error, Result};
use crate::function::Function;
use crate::job::{drive, FromConfig, Job};
use crate::messages::{unknown_type, Envelope, FromMessage, Malformed, PayloadError};
use crate::runtime::{Handler, Invocation, RecordOutcome};

/// Re-exports each function's [`Job`] under the name of its [`Function`] variant and
/// builds [`Message`] and [`Dispatch`], from the function table.
macro_rules! handlers {
    ($(
        $(#[$doc:meta])*
        $function:ident = $name:literal {
            job: $($job:ident)::+,
            $($rest:tt)*
        }
    )*) => {
        $(pub use crate::$($job)::+ as $function;)*

        /// A validated payload of any function, by its receiver.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Message {
            $($(#[$doc])* $function(<$function as Job>::Payload),)*
        }

        impl FromMessage for Message {
            fn decode(kind: &str, payload: &Value) -> std::result::Result<Self, PayloadError> {
                match Function::receiver_of(kind) {
                    $(Some(Function::$function) => {
                        FromMessage::decode(kind, payload).map(Message::$function)
                    })*
                    None => Err(unknown_type()),
                }
            }

            fn payload_value(&self) -> Value {
                match self {
                    $(Message::$function(p) => p.payload_value(),)*
                }
            }

            fn cursor(&self) -> Option<Value> {
                match self {
                    $(Message::$function(p) => p.cursor(),)*
                }
            }
        }

        /// The function of each job of the list, in list order.
        #[cfg(test)]
        const JOBS: &[Function] = &[$(<$function as Job>::FUNCTION),*];

        /// Every function's handler, chosen by the message's receiver, which the
        /// envelope checked is `inv.function` (`hk`, the local runner, benches, tests),
        /// with the dependencies of every job it was given. Function binaries never
        /// name it.
        #[derive(Clone)]
        pub struct Dispatch {
            /// Each function's [`Job::Deps`], by function.
            deps: HashMap<Function, Arc<dyn Any + Send + Sync>>,
        }

        impl Dispatch {
            /// Every job that needs nothing ([`FromConfig::unconfigured`]); the others
            /// are given with [`Dispatch::with`].
            pub fn new() -> Dispatch {
                let mut deps: HashMap<Function, Arc<dyn Any + Send + Sync>> = HashMap::new();
                $(if let Some(d) = <<$function as Job>::Deps as FromConfig>::unconfigured() {
                    deps.insert(Function::$function, Arc::new(d));
                })*
                Dispatch { deps }
            }
        }

        impl Handler for Dispatch {
            type Message = Message;

            fn handle<C>(
                &self,
                inv: &Invocation<'_>,
                client: &mut C,
                env: &Envelope,
                message: Message,
            ) -> impl Future<Output = Result<RecordOutcome>> + Send
            where
                C: GenericClient + Send + Sync,
            {
                async move {
                    match message {
                        $(Message::$function(p) => {
                            let deps = self.deps_of::<$function>()?;
                            drive::<$function, C>(inv, deps, client, env, p).await
                        })*
                    }
                }
            }
        }
    };
}

crate::function::with_functions!(handlers);

impl Default for Dispatch {
    fn default() -> Dispatch {
        Dispatch::new()
    }
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ready: Vec<_> = self.deps.keys().map(|f| f.name()).collect();
        ready.sort_unstable();
        f.debug_struct("Dispatch").field("ready", &ready).finish()
    }
}

impl Dispatch {
    /// The same dispatch with job `J`'s dependencies (`hk` builds them from its own
    /// configuration: B28's notifier, `storage-cleanup`'s clients).
    pub fn with<J: Job>(mut self, deps: impl Into<Arc<J::Deps>>) -> Dispatch {
        let deps: Arc<J::Deps> = deps.into();
        self.deps.insert(J::FUNCTION, deps);
        self
    }

    /// Job `J`'s dependencies; a function `hk` was given none for is a configuration
    /// error of that record (retried, so it waits for a configured run).
    fn deps_of<J: Job>(&self) -> Result<&J::Deps> {
        self.deps
            .get(&J::FUNCTION)
            .and_then(|d| d.downcast_ref::<J::Deps>())
            .ok_or_else(|| {
                Error::Config(format!(
                    "{} has no configuration here: `hk` was given none for it",
                    J::FUNCTION
                ))
            })
    }
}

impl Envelope {
    /// Parse and validate a body for `receiver`: every rule of behaviour §9.1 and §9.4,
    /// its payload's too. The error names the first violation and never quotes the body.
    pub fn parse(body: &str, receiver: Function) -> std::result::Result<Envelope, Malformed> {
        Envelope::decode(body, receiver).map(|(env, _)| env)
    }

    /// [`Envelope::parse`], keeping the payload as the [`Message`] it was decoded to.
    pub fn decode(
        body: &str,
        receiver: Function,
    ) -> std::result::Result<(Envelope, Message), Malformed> {
        Envelope::decode_as(body, receiver)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_has_one_job_per_function_in_catalogue_order() {
        assert_eq!(JOBS, Function::ALL);
    }
}
