//! What a server is configured with.

use stow_store::ObjectBackend;

/// Everything a server needs besides its listening socket.
#[derive(Clone)]
pub struct ServerConfig {
    /// The objects served.
    pub store: std::sync::Arc<dyn ObjectBackend>,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    pub read_only: bool,
    /// Largest request body accepted (`400 EntityTooLarge` beyond).
    pub max_request_bytes: u64,
    /// Requests served at once (`503 SlowDown` beyond).
    pub max_concurrent_requests: usize,
    /// Allowed CORS origins; empty means loopback origins only; `*` any.
    pub cors_origins: Vec<String>,
    /// Token for admin routes from non-loopback peers.
    pub admin_token: Option<String>,
    /// Suffix for virtual-host addressing (`<bucket>.<base-host>`), besides
    /// `<bucket>.localhost`, which always works.
    pub base_host: Option<String>,
    /// Answer `POST /_stow/reset` (SigV4-signed), which empties the store;
    /// off, the route is refused with `405 MethodNotAllowed`. For test
    /// sessions only (`serve --allow-reset`).
    pub allow_reset: bool,
}
