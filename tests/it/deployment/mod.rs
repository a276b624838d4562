//! The deployment: the SAM template against the code (`template`), the stack deployed
//! into moto before a user does (`deploy`), and the SQS + Scheduler adapter with
//! Secrets Manager on moto (`queue_sqs`).

mod deploy;
mod queue_sqs;
mod template;
