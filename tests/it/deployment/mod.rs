//! The deployment: the SAM template against the code (`template`), the stack deployed
//! into moto before a user does (`deploy`), the heartbeats through a cutover from
//! schedules off to on (`cutover`), who is paged for an outage, a missed cron or
//! anything else (`paging_moto`), and the SQS + Scheduler adapter with
//! Secrets Manager on moto (`queue_sqs`); the environment read as configuration
//! (`config`).

mod config;
mod cutover;
mod deploy;
mod generated;
mod paging_moto;
mod queue_sqs;
mod template;
