//! Server-side encryption on the wire. Customer-provided keys (SSE-C): the
//! `x-amz-server-side-encryption-customer-*` headers (and their
//! `x-amz-copy-source-` forms) read into a `stow_store::CustomerKey`, and
//! echoed on answers; the keys' checks and the encryption are the store's.
//! Server-managed keys (SSE-S3, `x-amz-server-side-encryption: AES256`):
//! kept with the object and answered, the bytes not encrypted (SECURITY.md).
//! SSE-KMS needs a key service this server does not have: refused.

use s3s::dto::{CopyObjectInput, ServerSideEncryption};
use s3s::{s3_error, S3Result};
use stow_store::{CustomerKey, ObjectBackend, CUSTOMER_KEY_ALGORITHM};

use crate::errors::to_s3;

/// The key a request's SSE-C headers give (`None` without them): malformed
/// headers are InvalidArgument; SSE-C beside `x-amz-server-side-encryption`
/// (`AES256`, `aws:kms`) or a KMS key is InvalidArgument, as on S3; a
/// backend that keeps plain files refuses with NotImplemented.
pub(super) fn customer_key(
    store: &dyn ObjectBackend,
    sse: Option<&ServerSideEncryption>,
    kms_key: Option<&str>,
    algorithm: Option<&str>,
    key: Option<&str>,
    key_md5: Option<&str>,
) -> S3Result<Option<CustomerKey>> {
    let given = CustomerKey::from_headers(algorithm, key, key_md5).map_err(to_s3)?;
    if given.is_some() && (sse.is_some() || kms_key.is_some()) {
        return Err(s3_error!(
            InvalidArgument,
            "Server Side Encryption with Customer provided key is incompatible with the encryption method specified"
        ));
    }
    usable(store, given)
}

/// Whether a write asks for server-managed encryption (SSE-S3, `AES256`).
/// SSE-KMS (`aws:kms`, `aws:kms:dsse`, or a KMS key ID) would need a key
/// service: NotImplemented, never silently ignored. Called after
/// [`customer_key`], which refuses either beside SSE-C.
pub(super) fn server_managed(
    sse: Option<&ServerSideEncryption>,
    kms_key: Option<&str>,
) -> S3Result<bool> {
    let kms = || {
        s3_error!(
            NotImplemented,
            "SSE-KMS is not offered: there is no KMS here; use AES256 (SSE-S3) or a customer-provided key (SSE-C)"
        )
    };
    if kms_key.is_some() {
        return Err(kms());
    }
    match sse.map(ServerSideEncryption::as_str) {
        None => Ok(false),
        Some(ServerSideEncryption::AES256) => Ok(true),
        Some(ServerSideEncryption::AWS_KMS | ServerSideEncryption::AWS_KMS_DSSE) => Err(kms()),
        Some(_) => Err(s3_error!(
            InvalidArgument,
            "The encryption method specified is not supported"
        )),
    }
}

/// A read (GET, HEAD) naming `x-amz-server-side-encryption`: 400
/// InvalidArgument, as S3 answers (the object's own setting decides how it
/// is read; only SSE-C keys go with a read).
pub(super) fn refuse_on_read(headers: &http::HeaderMap) -> S3Result<()> {
    if headers.contains_key("x-amz-server-side-encryption") {
        return Err(s3_error!(
            InvalidArgument,
            "x-amz-server-side-encryption header is not supported for this operation"
        ));
    }
    Ok(())
}

/// The `x-amz-server-side-encryption` an answer about an object carries.
pub(super) fn server_managed_echo(sse_s3: bool) -> Option<ServerSideEncryption> {
    sse_s3.then(|| ServerSideEncryption::from_static(ServerSideEncryption::AES256))
}

/// The key of a request that can only name SSE-C (reads, parts, the
/// `x-amz-copy-source-` headers of a copy).
pub(super) fn plain_key(
    store: &dyn ObjectBackend,
    algorithm: Option<&str>,
    key: Option<&str>,
    key_md5: Option<&str>,
) -> S3Result<Option<CustomerKey>> {
    usable(
        store,
        CustomerKey::from_headers(algorithm, key, key_md5).map_err(to_s3)?,
    )
}

/// The key of a request that can only name SSE-C, from its input's three
/// `sse_customer_*` fields: [`plain_key`] without naming them at every
/// operation. `request_key!(store, input)`.
macro_rules! request_key {
    ($store:expr, $input:expr) => {
        super::sse::plain_key(
            $store,
            $input.sse_customer_algorithm.as_deref(),
            $input.sse_customer_key.as_deref(),
            $input.sse_customer_key_md5.as_deref(),
        )
    };
}
pub(super) use request_key;

/// A copy's customer keys (SSE-C): its own (the copy is sealed with it),
/// and the source's (`x-amz-copy-source-server-side-encryption-customer-*`).
pub(super) fn copy_keys(
    store: &dyn ObjectBackend,
    input: &CopyObjectInput,
) -> S3Result<(Option<CustomerKey>, Option<CustomerKey>)> {
    let own = customer_key(
        store,
        input.server_side_encryption.as_ref(),
        input.ssekms_key_id.as_deref(),
        input.sse_customer_algorithm.as_deref(),
        input.sse_customer_key.as_deref(),
        input.sse_customer_key_md5.as_deref(),
    )?;
    let source = plain_key(
        store,
        input.copy_source_sse_customer_algorithm.as_deref(),
        input.copy_source_sse_customer_key.as_deref(),
        input.copy_source_sse_customer_key_md5.as_deref(),
    )?;
    Ok((own, source))
}

fn usable(store: &dyn ObjectBackend, key: Option<CustomerKey>) -> S3Result<Option<CustomerKey>> {
    if key.is_some() && !store.supports_customer_keys() {
        return Err(to_s3(stow_store::no_customer_keys(store.backend_name())));
    }
    Ok(key)
}

/// The SSE-C headers an answer echoes: the algorithm and the key's MD5 of
/// the key the request used (S3 never returns the key).
pub(super) struct Echo {
    pub algorithm: Option<String>,
    pub key_md5: Option<String>,
}

impl Echo {
    /// What to echo for a request that used `key` (nothing without one).
    pub fn of(key: Option<&CustomerKey>) -> Self {
        Echo {
            algorithm: key.map(|_| CUSTOMER_KEY_ALGORITHM.to_string()),
            key_md5: key.map(|k| k.key_md5().to_string()),
        }
    }
}
