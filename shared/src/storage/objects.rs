//! Object storage: the files of a destroyed project in GitLab's buckets (uploads, LFS
//! objects, package files), deleted through S3.
//!
//! Owns: [`Objects`] (the S3 client and the bucket of each kind, GitLab's
//! `object_store` configuration: a bucket given as `name/prefix` stores every key under
//! the prefix, as GitLab's `ObjectStorage#store_path` prefixes it with the
//! `bucket_prefix`), whose [`Objects::delete`] is idempotent: a ranged
//! `GET` first tells a removal from an object already gone (S3's `DELETE` answers 204
//! for both), then the `DELETE`. Failures are [`Error::Storage`] with kind `s3`, naming the
//! bucket and key.

use std::collections::BTreeMap;

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use super::Removal;
use crate::config::storage::Bucket;
use crate::error::{Error, Result};

/// The S3 client and GitLab's buckets.
#[derive(Debug, Clone)]
pub struct Objects {
    client: aws_sdk_s3::Client,
    /// The bucket of each kind and its key prefix.
    buckets: BTreeMap<Bucket, (String, Option<String>)>,
}

impl Objects {
    /// The client over `aws` (with `AWS_ENDPOINT_URL_S3` applied by the caller through
    /// `endpoint`, and path-style addressing there: MinIO and other S3-compatible stores).
    pub fn new(
        aws: &aws_config::SdkConfig,
        endpoint: Option<String>,
        buckets: &BTreeMap<Bucket, String>,
    ) -> Objects {
        let mut conf = aws_sdk_s3::config::Builder::from(aws);
        if let Some(url) = endpoint {
            conf = conf.endpoint_url(url).force_path_style(true);
        }
        let buckets = buckets
            .iter()
            .map(|(b, v)| {
                let (name, prefix) = v.split_once('/').map_or((v.clone(), None), |(n, p)| {
                    (n.to_string(), Some(p.to_string()))
                });
                (*b, (name, prefix))
            })
            .collect();
        Objects {
            client: aws_sdk_s3::Client::from_conf(conf.build()),
            buckets,
        }
    }

    /// The bucket configured for `b`.
    pub fn bucket(&self, b: Bucket) -> Result<&str> {
        Ok(self.place(b)?.0.as_str())
    }

    /// The S3 key of GitLab key `key` in `b`'s bucket: under the bucket's prefix.
    pub fn stored_key(&self, b: Bucket, key: &str) -> Result<String> {
        Ok(match &self.place(b)?.1 {
            Some(prefix) => format!("{prefix}/{key}"),
            None => key.to_string(),
        })
    }

    fn place(&self, b: Bucket) -> Result<&(String, Option<String>)> {
        self.buckets.get(&b).ok_or_else(|| Error::Storage {
            kind: "s3",
            message: format!(
                "no bucket configured for {} objects: set {}",
                b.as_str(),
                crate::config::storage::bucket_variable(b)
            ),
        })
    }

    /// Delete `key` from `b`'s bucket: `Removed`, or `AlreadyGone` when no such object.
    pub async fn delete(&self, b: Bucket, key: &str) -> Result<Removal> {
        if !self.exists(b, key).await? {
            return Ok(Removal::AlreadyGone);
        }
        let bucket = self.bucket(b)?;
        let key = &self.stored_key(b, key)?;
        self.client
            .delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| Error::Storage {
                kind: "s3",
                message: format!("DELETE s3://{bucket}/{key}: {}", describe(&e)),
            })?;
        Ok(Removal::Removed)
    }

    /// Whether `key` exists in `b`'s bucket. A one-byte ranged `GET`, not a `HEAD`: a
    /// `HEAD` answers a missing bucket and a missing key with the same bare 404, and a
    /// misnamed bucket must fail, never pass for "already gone".
    pub async fn exists(&self, b: Bucket, key: &str) -> Result<bool> {
        let bucket = self.bucket(b)?;
        let key = &self.stored_key(b, key)?;
        let got = self
            .client
            .get_object()
            .bucket(bucket)
            .key(key)
            .range("bytes=0-0")
            .send()
            .await;
        match got {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(se)) if se.err().is_no_such_key() => Ok(false),
            // An empty object has no byte 0.
            Err(SdkError::ServiceError(se)) if se.raw().status().as_u16() == 416 => Ok(true),
            Err(e) => Err(Error::Storage {
                kind: "s3",
                message: format!("GET s3://{bucket}/{key}: {}", describe(&e)),
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
