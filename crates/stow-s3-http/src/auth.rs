//! Who may call: the server's one key pair for SigV4, and the constant-time
//! comparison of secrets the admin routes use.

use s3s::auth::{S3Auth, SecretKey};
use s3s::{s3_error, S3Result};

/// One key pair; unknown access keys are refused as AccessDenied.
pub(crate) struct OneKey {
    pub(crate) access_key: String,
    pub(crate) secret_key: SecretKey,
}

#[async_trait::async_trait]
impl S3Auth for OneKey {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if access_key == self.access_key {
            Ok(self.secret_key.clone())
        } else {
            Err(s3_error!(
                AccessDenied,
                "The access key is not known to this server"
            ))
        }
    }
}

/// Constant-time comparison, so a token cannot be guessed byte by byte.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_exactly() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}
