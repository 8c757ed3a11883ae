//! `stow-s3 receipts list|retire`: durable save receipts are managed, not
//! eternal. A full journal refuses keyed saves (`retention_full`) until
//! receipts are retired on purpose; nothing retires them automatically.

use std::path::PathBuf;

use clap::Subcommand;
use serde::Serialize;
use stow_store::{Receipt, Store, StoreOptions};

use crate::{rfc3339_ns, CliError};

#[derive(Subcommand)]
pub enum ReceiptsCommand {
    /// List retained receipts in request-key order.
    List {
        /// The store's data directory.
        #[arg(long, visible_alias = "object-dir", default_value = ".stow")]
        data_dir: PathBuf,
        /// Start after this request key.
        #[arg(long)]
        after: Option<String>,
        /// At most this many receipts (1..=10000).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
    },
    /// Retire receipts, freeing journal capacity. A retired request can no
    /// longer be resolved or replayed.
    Retire {
        /// The store's data directory.
        #[arg(long, visible_alias = "object-dir", default_value = ".stow")]
        data_dir: PathBuf,
        /// A request key to retire (repeatable).
        #[arg(
            long = "request-key",
            required_unless_present = "all",
            conflicts_with = "all"
        )]
        request_keys: Vec<String>,
        /// Retire every receipt.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Serialize)]
struct ReceiptView {
    request_key: String,
    bucket: String,
    key: String,
    created: String,
    etag: String,
    size: u64,
    version: String,
    last_modified: String,
}

impl From<Receipt> for ReceiptView {
    fn from(r: Receipt) -> Self {
        ReceiptView {
            request_key: r.request_key,
            bucket: r.bucket,
            key: r.key,
            created: rfc3339_ns(r.created_ns),
            etag: r.object.etag,
            size: r.object.size,
            version: r.object.version,
            last_modified: rfc3339_ns(r.object.last_modified_ns),
        }
    }
}

pub fn run(cmd: ReceiptsCommand) -> Result<serde_json::Value, CliError> {
    match cmd {
        ReceiptsCommand::List {
            data_dir,
            after,
            limit,
        } => {
            let store = Store::open_existing(&data_dir, StoreOptions::default())?;
            let limit = limit as usize;
            let mut receipts = store.list_receipts(after.as_deref(), limit + 1)?;
            let truncated = receipts.len() > limit;
            receipts.truncate(limit);
            let (count, bytes) = store.receipt_usage()?;
            let next_after = truncated
                .then(|| receipts.last().map(|r| r.request_key.clone()))
                .flatten();
            let receipts: Vec<ReceiptView> = receipts.into_iter().map(Into::into).collect();
            Ok(serde_json::json!({
                "receipts": receipts,
                "truncated": truncated,
                "next_after": next_after,
                "retained": count,
                "retained_bytes": bytes,
                "limits": {
                    "receipts": store.options().max_receipts,
                    "bytes": store.options().max_receipt_bytes,
                },
            }))
        }
        ReceiptsCommand::Retire {
            data_dir,
            mut request_keys,
            all,
        } => {
            let store = Store::open_existing(&data_dir, StoreOptions::default())?;
            if all {
                let mut after: Option<String> = None;
                loop {
                    let page = store.list_receipts(after.as_deref(), 1000)?;
                    let Some(last) = page.last() else { break };
                    after = Some(last.request_key.clone());
                    request_keys.extend(page.into_iter().map(|r| r.request_key));
                }
            }
            let retired = store.retire_receipts(&request_keys)?;
            let (count, bytes) = store.receipt_usage()?;
            Ok(serde_json::json!({
                "retired": retired,
                "retained": count,
                "retained_bytes": bytes,
            }))
        }
    }
}
