//! Object storage: the files of a destroyed project in GitLab's buckets (uploads, LFS
//! objects, package files), deleted through S3.
//!
//! Owns: [`ObjectsConfig`] (the bucket of each kind, GitLab's `object_store`
//! configuration) and [`Objects`], whose [`Objects::delete`] is idempotent: a `HEAD`
//! first tells a removal from an object already gone (S3's `DELETE` answers 204 for
//! both), then the `DELETE`. Failures are [`Error::Storage`] with kind `s3`, naming the
//! bucket and key.

use std::collections::BTreeMap;

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use super::Removal;
use crate::error::{Error, Result};
use crate::messages::Bucket;

/// The bucket GitLab stores each kind of file in (`OBJECT_STORAGE_BUCKET_<KIND>`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObjectsConfig {
    /// Bucket name by kind; a kind without a bucket cannot be removed (its items fail,
    /// naming the variable).
    pub buckets: BTreeMap<Bucket, String>,
}

impl ObjectsConfig {
    /// The variable naming `b`'s bucket.
    pub fn variable(b: Bucket) -> &'static str {
        match b {
            Bucket::Uploads => "OBJECT_STORAGE_BUCKET_UPLOADS",
            Bucket::Lfs => "OBJECT_STORAGE_BUCKET_LFS",
            Bucket::Packages => "OBJECT_STORAGE_BUCKET_PACKAGES",
        }
    }
}

/// The S3 client and GitLab's buckets.
#[derive(Debug, Clone)]
pub struct Objects {
    client: aws_sdk_s3::Client,
    buckets: BTreeMap<Bucket, String>,
}

impl Objects {
    /// The client over `aws` (with `AWS_ENDPOINT_URL_S3` applied by the caller through
    /// `endpoint`, and path-style addressing there: MinIO and other S3-compatible stores).
    pub fn new(
        aws: &aws_config::SdkConfig,
        endpoint: Option<String>,
        cfg: &ObjectsConfig,
    ) -> Objects {
        let mut conf = aws_sdk_s3::config::Builder::from(aws);
        if let Some(url) = endpoint {
            conf = conf.endpoint_url(url).force_path_style(true);
        }
        Objects {
            client: aws_sdk_s3::Client::from_conf(conf.build()),
            buckets: cfg.buckets.clone(),
        }
    }

    /// The bucket configured for `b`.
    pub fn bucket(&self, b: Bucket) -> Result<&str> {
        self.buckets
            .get(&b)
            .map(String::as_str)
            .ok_or_else(|| Error::Storage {
                kind: "s3",
                message: format!(
                    "no bucket configured for {} objects: set {}",
                    b.as_str(),
                    ObjectsConfig::variable(b)
                ),
            })
    }

    /// Delete `key` from `b`'s bucket: `Removed`, or `AlreadyGone` when no such object.
    pub async fn delete(&self, b: Bucket, key: &str) -> Result<Removal> {
        let bucket = self.bucket(b)?;
        let fail = |op: &str, e: String| Error::Storage {
            kind: "s3",
            message: format!("{op} s3://{bucket}/{key}: {e}"),
        };
        match self
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => {}
            Err(SdkError::ServiceError(se)) if se.raw().status().as_u16() == 404 => {
                return Ok(Removal::AlreadyGone)
            }
            Err(e) => return Err(fail("HEAD", describe(&e))),
        }
        self.client
            .delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| fail("DELETE", describe(&e)))?;
        Ok(Removal::Removed)
    }

    /// Whether `key` exists in `b`'s bucket (dry runs and tests).
    pub async fn exists(&self, b: Bucket, key: &str) -> Result<bool> {
        let bucket = self.bucket(b)?;
        match self
            .client
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(se)) if se.raw().status().as_u16() == 404 => Ok(false),
            Err(e) => Err(Error::Storage {
                kind: "s3",
                message: format!("HEAD s3://{bucket}/{key}: {}", describe(&e)),
            }),
        }
    }
}

/// The error code and message of an SDK error, or its kind.
fn describe<E: ProvideErrorMetadata + std::fmt::Debug, R: std::fmt::Debug>(
    e: &SdkError<E, R>,
) -> String {
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            format!(
                "{} ({})",
                err.code().unwrap_or("error"),
                err.message().unwrap_or("no message")
            )
        }
        SdkError::TimeoutError(_) => "timed out".into(),
        SdkError::DispatchFailure(_) => "connection failed".into(),
        other => format!("{other:?}").chars().take(200).collect(),
    }
}
