//! An in-memory [`RemoteStore`] for the engine's tests, with the faults a
//! real service shows: an interrupted push, a concurrent writer, tampering.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{Body, Created, RemoteError, RemoteFailure, RemoteObject, RemoteStore};

#[derive(Default)]
pub struct MemoryRemote {
    pub objects: Mutex<BTreeMap<String, (Vec<u8>, String)>>,
    /// Successful creates so far.
    pub creates: AtomicUsize,
    /// Fail every create after this many succeeded (an interrupted push).
    pub fail_after: Mutex<Option<usize>>,
    /// HEAD requests so far.
    pub heads: AtomicUsize,
    /// Listings so far.
    pub lists: AtomicUsize,
}

impl MemoryRemote {
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.objects
            .lock()
            .unwrap()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    pub fn overwrite(&self, key: &str, bytes: Vec<u8>) {
        let mut objects = self.objects.lock().unwrap();
        let meta = objects.get(key).map(|(_, m)| m.clone()).unwrap_or_default();
        objects.insert(key.to_string(), (bytes, meta));
    }
}

impl RemoteStore for MemoryRemote {
    fn url(&self) -> String {
        "s3://memory/test".into()
    }

    fn head(&self, key: &str) -> Result<Option<RemoteObject>, RemoteError> {
        self.heads.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .objects
            .lock()
            .unwrap()
            .get(key)
            .map(|(b, m)| RemoteObject {
                size: b.len() as u64,
                sha256: (!m.is_empty()).then(|| m.clone()),
            }))
    }

    fn get(&self, key: &str) -> Result<Option<Box<dyn Read + Send>>, RemoteError> {
        Ok(self
            .objects
            .lock()
            .unwrap()
            .get(key)
            .map(|(b, _)| Box::new(std::io::Cursor::new(b.clone())) as Box<dyn Read + Send>))
    }

    fn create(&self, key: &str, body: Body, sha256: &str) -> Result<Created, RemoteError> {
        if let Some(n) = *self.fail_after.lock().unwrap() {
            if self.creates.load(Ordering::SeqCst) >= n {
                return Err(RemoteError::new(
                    RemoteFailure::Unreachable,
                    "connection reset",
                ));
            }
        }
        let bytes = match body {
            Body::Bytes(b) => b,
            Body::Reader { mut reader, size } => {
                let mut b = Vec::new();
                reader
                    .read_to_end(&mut b)
                    .map_err(|e| RemoteError::new(RemoteFailure::Failed, e.to_string()))?;
                assert_eq!(b.len() as u64, size);
                b
            }
        };
        let mut objects = self.objects.lock().unwrap();
        if objects.contains_key(key) {
            return Ok(Created::AlreadyExists);
        }
        objects.insert(key.to_string(), (bytes, sha256.to_string()));
        self.creates.fetch_add(1, Ordering::SeqCst);
        Ok(Created::Created)
    }

    fn list_at_most(
        &self,
        prefix: &str,
        most: usize,
    ) -> Result<Option<Vec<(String, u64)>>, RemoteError> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        let listed: Vec<(String, u64)> = self
            .objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, (b, _))| (k.clone(), b.len() as u64))
            .take(most.saturating_add(1))
            .collect();
        Ok((listed.len() <= most).then_some(listed))
    }
}
