//! The S3 wire protocol over a [`stow_store::ObjectBackend`]: a store, or a
//! workspace's bucket view.
//!
//! [`Server`] accepts HTTP/1.1 connections and runs each request through a
//! short pipeline before the S3 operation itself: admin routes
//! (`/_stow/*`; `POST /_stow/reset` only with [`ServerConfig::allow_reset`],
//! and SigV4-verified like S3), CORS preflights (a bucket's own rules, else
//! the server-wide origins), refusal of SigV2, the concurrency cap (`503
//! SlowDown`), the request-size cap (`400 EntityTooLarge`), and a browser
//! POST form's fields and policy (`post`). Then `s3s` verifies SigV4
//! (headers, presigned URLs, `aws-chunked` streaming with trailers, POST
//! form signatures), parses the operation, runs the access check
//! (`access`: the bucket's policy, then canned ACLs for unsigned requests),
//! and calls [`StowS3`], which maps it onto the store. Storage logic lives only in `stow-store`.

mod access;
mod admin;
mod auth;
mod body;
mod bucket_cors;
mod config;
mod connections;
mod cors;
mod early;
mod errors;
mod hosts;
mod patches;
mod policy;
mod post;
mod reset;
mod respond;
mod s3;

/// Entry points for the fuzzer (`fuzz/`) and its corpus replay. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::post::fuzzing::post_form;
    pub use crate::s3::fuzzing::request_headers;
}

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use s3s::auth::SecretKey;
use s3s::s3_error;
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use config::ServerConfig;
pub use connections::serve_connections;
pub use reset::RESET_PATH;
pub use s3::StowS3;

use respond::{plain, xml_error, Body};

/// Runs each request through the pipeline the crate's header describes.
struct Handler {
    s3: S3Service,
    config: ServerConfig,
    cors: cors::Cors,
    bucket_cors: bucket_cors::BucketCors,
    slots: Arc<Semaphore>,
    stats: admin::Stats,
    /// The access check `s3s` also runs, for unsigned POST forms before
    /// their file is read (see `access::Access::judge_form`).
    access: access::Access,
}

/// A bound S3 server.
pub struct Server {
    listener: TcpListener,
    handler: Arc<Handler>,
}

impl Server {
    /// Binds the listening socket. Port 0 picks a free port; see
    /// [`Server::local_addr`].
    pub async fn bind(addr: SocketAddr, config: ServerConfig) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let listen = listener.local_addr()?;
        let mut builder = S3ServiceBuilder::new(StowS3::new(
            config.store.clone(),
            config.read_only,
            config.region.clone(),
        ));
        let mut bases = vec!["localhost".to_string()];
        bases.extend(config.base_host.clone().filter(|b| !b.is_empty()));
        builder.set_host(hosts::LocalHosts {
            bases: bases.clone(),
        });
        builder.set_auth(auth::OneKey {
            access_key: config.access_key.clone(),
            secret_key: SecretKey::from(config.secret_key.as_str()),
        });
        builder.set_access(access::Access {
            store: config.store.clone(),
        });
        // `s3s` holds a POST form's file in memory: no larger than any
        // other request body may be.
        let mut s3s_config = s3s::config::S3Config::default();
        s3s_config.post_object_max_file_size = config.max_request_bytes;
        builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
            s3s_config,
        ))));
        if config.allow_reset {
            builder.set_route(reset::ResetRoute {
                store: config.store.clone(),
            });
            builder.set_validation(reset::WithAdminPath);
        }
        let handler = Arc::new(Handler {
            s3: builder.build(),
            slots: Arc::new(Semaphore::new(config.max_concurrent_requests.max(1))),
            cors: cors::Cors {
                origins: config.cors_origins.clone(),
            },
            bucket_cors: bucket_cors::BucketCors {
                store: config.store.clone(),
                hosts: hosts::LocalHosts { bases },
            },
            access: access::Access {
                store: config.store.clone(),
            },
            config,
            stats: admin::Stats::new(listen),
        });
        Ok(Server { listener, handler })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.handler.stats.listen
    }

    /// Serves until `shutdown` resolves, then stops accepting and gives
    /// in-flight requests up to `grace` to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>, grace: Duration) {
        let handler = self.handler;
        let handle = move |req, peer| {
            let handler = Arc::clone(&handler);
            async move { handler.handle(req, peer).await }
        };
        serve_connections(self.listener, "s3", handle, shutdown, grace).await;
    }
}

impl Handler {
    async fn handle(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let origin = req.headers().get(header::ORIGIN).cloned();
        let method = req.method().clone();
        let admin = req.uri().path().starts_with("/_stow/");
        let path = if admin {
            req.uri().path().to_string()
        } else {
            "/s3".to_string()
        };
        let continuation = patches::Continuation::of(&req);
        // A bucket's own CORS rules, read only for a browser's request.
        let target = (!admin).then(|| self.bucket_cors.target(&req)).flatten();
        let rules = match (&origin, &target) {
            (Some(_), Some(t)) => self.bucket_cors.rules(&t.bucket).await,
            _ => None,
        };
        let cors_method = bucket_cors::request_method(&req);
        let mut resp = if method == Method::OPTIONS && !admin {
            match (&rules, &target) {
                (Some(rules), Some(target)) => bucket_cors::preflight(rules, target, &req),
                _ if origin.is_none() => bucket_cors::bad_preflight(
                    "Insufficient information. Origin request header needed.",
                ),
                _ => self.cors.preflight(&req),
            }
        } else {
            self.route(req, peer).await
        };
        if continuation.close_after(resp.status()) {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let request_id = respond::request_id();
        if resp.status().as_u16() >= 400 {
            resp = patches::error_with_request_id(resp, &request_id);
        }
        if let Ok(v) = HeaderValue::from_str(&request_id) {
            resp.headers_mut().insert("x-amz-request-id", v);
        }
        tracing::info!(
            "{method} {path} {} {:.3}ms id={request_id}",
            resp.status().as_u16(),
            started.elapsed().as_secs_f64() * 1e3
        );
        match (&rules, &origin) {
            // A preflight answered by the bucket's rules has its headers.
            (Some(_), Some(_)) if method == Method::OPTIONS => resp,
            (Some(rules), Some(origin)) => bucket_cors::decorate(rules, origin, &cors_method, resp),
            _ => self.cors.decorate(origin.as_ref(), resp),
        }
    }

    /// Refuses an unsigned POST form that no policy or ACL lets in, before
    /// `s3s` reads its file (see `access::Access::judge_form`).
    async fn judge_unsigned_form(
        &self,
        req: &Request<Body>,
        bucket: &str,
        peer: SocketAddr,
    ) -> s3s::S3Result<()> {
        let Some(form) = req.extensions().get::<post::FormUpload>() else {
            return Ok(());
        };
        let Some(key) = form.unsigned_key() else {
            return Ok(());
        };
        self.access
            .judge_form(&access::FormRequest {
                anonymous: true,
                bucket,
                key,
                sets_acl: form.sets_acl(),
                headers: req.headers(),
                query: req.uri().query(),
                peer: Some(peer.ip()),
            })
            .await
    }

    async fn route(&self, mut req: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        if req.uri().path() == RESET_PATH {
            // Signed like an S3 request, so it takes the S3 path below
            // (slot, early refusals, SigV4) when the server allows it.
            if !self.config.allow_reset || req.method() != Method::POST {
                return xml_error(reset::refusal(self.config.allow_reset));
            }
        } else if req.uri().path().starts_with("/_stow/") {
            return admin::answer(&self.config, &self.stats, &req, peer);
        }
        if let Some(refusal) = early::refuse_early(&req, self.config.max_request_bytes) {
            return refusal;
        }
        let Ok(_slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            self.stats.refused_busy.fetch_add(1, Ordering::Relaxed);
            let mut resp = xml_error(s3_error!(
                SlowDown,
                "Too many concurrent requests; retry shortly"
            ));
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        };
        patches::date_as_amz_date(req.headers_mut());
        let attributes = req.method() == Method::GET
            && req.uri().query().is_some_and(|q| {
                q.split('&')
                    .any(|p| p.split('=').next() == Some("attributes"))
            });
        // A browser POST form to a bucket: its fields checked and the key
        // completed here, the rest by `s3s` (post.rs).
        let form = post::boundary(&req).and_then(|boundary| {
            let target = self.bucket_cors.target(&req)?;
            (!target.object).then_some((boundary, target.bucket))
        });
        let is_form = form.is_some();
        let mut req = match form {
            Some((boundary, bucket)) => match post::prepare(req, &bucket, &boundary).await {
                Ok(req) => {
                    if let Err(e) = self.judge_unsigned_form(&req, &bucket, peer).await {
                        return xml_error(e);
                    }
                    req
                }
                Err(e) => return xml_error(errors::post_refusal(e)),
            },
            None => req.map(Body::from),
        };
        // The caller's address, for a bucket policy's `aws:SourceIp`.
        req.extensions_mut().insert(policy::Peer(peer.ip()));
        match self.s3.call(req).await {
            Ok(resp) if attributes => patches::unquote_attributes_etag(resp),
            Ok(resp) if is_form => post::mend(resp),
            Ok(resp) => patches::interleave_versions(resp),
            Err(e) => {
                tracing::error!("request failed: {e:?}");
                plain(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
            }
        }
    }
}
