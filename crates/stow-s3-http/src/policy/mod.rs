//! Bucket policies: the document model and its evaluator, pure (no store,
//! no runtime), so the access check (`crate::access`) and the
//! PutBucketPolicy family (`crate::s3::policy`) share one reading of a
//! policy.
//!
//! They live here, in the protocol crate, because a policy is S3's wire
//! language about S3 requests (actions named after operations, ARNs,
//! request headers as condition keys): the store keeps the document as
//! the bytes the client sent and never reads it (ARCHITECTURE.md,
//! "Invariants": the storage crates hold no protocol logic).
//!
//! - `document`: a policy read and checked as PutBucketPolicy checks it
//!   (MalformedPolicy), and whether it is public.
//! - `eval`: what a policy says about one request (Deny beats Allow).
//! - `action`: the one place a request becomes an action name and an ARN.
//! - `keys`: a request's condition keys.
//! - `glob`: the `*`/`?` wildcards.

pub(crate) mod action;
pub(crate) mod document;
pub(crate) mod eval;
mod glob;
pub(crate) mod keys;

pub(crate) use document::{Policy, PolicyError};
pub(crate) use eval::{Ask, Decision};
pub(crate) use keys::{Peer, RequestKeys};
