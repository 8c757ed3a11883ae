//! Completing a multipart upload into a file outside the store (the
//! workspace view's file keys): the listed parts are joined into a staged
//! file ([`Store::join_upload`]) without the store recording an object
//! under the key; the caller puts the file in place, then
//! [`Store::finish_joined`] drops the upload and remembers the completion
//! in one transaction. A crash before the finish leaves the upload in
//! flight with its parts (listed, counted, abortable), never an object; a
//! retried completion joins it again.

use crate::checksum::ChecksumAlgorithm;
use crate::completed;
use crate::error::{Result, StoreError};
use crate::model::{CompletedPart, ObjectMeta, PutOptions};
use crate::record::{self, Record};
use crate::store::multipart::{
    check_completion, choose_parts, completed_record, drop_upload, load_parts, load_upload,
};
use crate::store::{ObjectBody, ReceivedBody, Store};

/// What [`Store::join_upload`] found.
// One per completion, moved once: boxing a variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Joined {
    /// The upload was completed already from the same part list: the first
    /// completion's answer (a retry after a lost reply).
    Replayed(ObjectMeta),
    /// The parts, joined into a staged file; the store is unchanged.
    Staged(JoinedUpload),
}

/// An upload's parts joined into a staged file, not yet finished.
#[derive(Debug)]
pub struct JoinedUpload {
    /// The object the upload completes into (multipart ETag, properties,
    /// checksum, parts), as the store's own completion would describe it.
    pub meta: ObjectMeta,
    /// The joined bytes; dropping them discards them.
    pub body: ReceivedBody,
    /// What [`Store::finish_joined`] needs once the bytes are in place.
    pub ticket: JoinTicket,
}

/// The upload a [`JoinedUpload`] came from, to finish it.
#[derive(Debug)]
pub struct JoinTicket {
    bucket: String,
    key: String,
    upload_id: String,
    listed: Vec<CompletedPart>,
    rec: Record,
}

impl Store {
    /// Joins the listed parts of an upload into a staged file, checked as
    /// [`Store::complete_upload_checked`] checks them (ascending parts with
    /// matching ETags, sizes, the `expected` checksum), without changing
    /// the store: no object is recorded and the upload stays in flight
    /// until [`Store::finish_joined`]. An upload completed already from the
    /// same parts answers [`Joined::Replayed`].
    pub fn join_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
        expected: Option<(ChecksumAlgorithm, String)>,
    ) -> Result<Joined> {
        check_completion(bucket, key, upload_id, listed)?;
        let full = match self.full_object_checksum(bucket, key, upload_id, listed) {
            Err(StoreError::NoSuchUpload { .. }) => {
                return self.replay(bucket, key, upload_id, listed)
            }
            r => r?,
        };
        let pin = self.inner.db.pin();
        let planned = self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            let up = match load_upload(conn, b, key, upload_id) {
                Err(StoreError::NoSuchUpload { .. }) => return Ok(None),
                r => r?,
            };
            let parts = load_parts(conn, upload_id)?;
            let chosen = choose_parts(&parts, listed)?;
            let rec = completed_record(up, &chosen, full.as_ref(), expected.as_ref())?;
            // A file tree keeps plaintext: an upload sealed with a
            // customer key (SSE-C) is never joined into one.
            crate::encryption::check_key(rec.props.sse_c.as_ref(), None)?;
            let extents = &rec.extents;
            let body =
                ObjectBody::plan(conn, &self.inner.blobs, extents, (0, rec.size), None, pin)?;
            Ok(Some((rec, body)))
        })?;
        let Some((rec, mut body)) = planned else {
            return self.replay(bucket, key, upload_id, listed);
        };
        let received = self.receive(&mut body, PutOptions::default())?;
        if received.size != rec.size {
            return Err(StoreError::Corrupt(format!(
                "upload {upload_id} joined into {} bytes, not {}",
                received.size, rec.size
            )));
        }
        Ok(Joined::Staged(JoinedUpload {
            meta: rec.meta(bucket, key),
            body: received,
            ticket: JoinTicket {
                bucket: bucket.to_string(),
                key: key.to_string(),
                upload_id: upload_id.to_string(),
                listed: listed.to_vec(),
                rec,
            },
        }))
    }

    /// Finishes a joined upload whose bytes are in place: in one
    /// transaction, drops the upload (its parts' bytes leave the store's
    /// usage) and remembers the completion, so a retry answers as this one
    /// did. An upload gone meanwhile (finished or aborted) is left alone.
    pub fn finish_joined(&self, ticket: JoinTicket) -> Result<()> {
        let quota = self.inner.quota();
        self.inner.db.write(move |conn, fx| {
            let t = ticket;
            let b = record::bucket_id(conn, &t.bucket)?;
            match load_upload(conn, b, &t.key, &t.upload_id) {
                Err(StoreError::NoSuchUpload { .. }) => return Ok(()),
                r => r?,
            };
            let parts = load_parts(conn, &t.upload_id)?;
            drop_upload(conn, fx, &quota, &t.upload_id, &parts)?;
            // A file key keeps no versions: no version ID to answer.
            completed::remember(conn, b, &t.key, &t.upload_id, &t.listed, &t.rec, None)
        })
    }

    /// The first completion's answer for a retry, else `NoSuchUpload`.
    fn replay(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        listed: &[CompletedPart],
    ) -> Result<Joined> {
        let replayed = self.inner.db.read(|conn| {
            let b = record::bucket_id(conn, bucket)?;
            completed::replay(conn, b, bucket, key, upload_id, listed)
        })?;
        replayed
            .map(Joined::Replayed)
            .ok_or_else(|| StoreError::NoSuchUpload {
                upload_id: upload_id.to_string(),
            })
    }
}
