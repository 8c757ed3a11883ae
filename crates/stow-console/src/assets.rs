//! The console's page, style and script: hand-written files under
//! `assets/`, embedded at compile time (no build step, no Node).

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

/// One embedded file.
pub struct Asset {
    /// The name under the console's path (`""` is the page itself).
    pub name: &'static str,
    /// Its Content-Type.
    pub content_type: &'static str,
    /// Its bytes.
    pub bytes: &'static [u8],
}

/// Every file the console serves.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "",
        content_type: "text/html; charset=utf-8",
        bytes: include_bytes!("../assets/index.html"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/app.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/api.js"),
    },
    Asset {
        name: "objects.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/objects.js"),
    },
    Asset {
        name: "uploads.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/uploads.js"),
    },
    Asset {
        name: "workspace.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/workspace.js"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        bytes: include_bytes!("../assets/favicon.svg"),
    },
];

/// The asset served at `name` (the path after `/_stow/console/`).
pub fn find(name: &str) -> Option<&'static Asset> {
    let name = if name == "index.html" { "" } else { name };
    ASSETS.iter().find(|a| a.name == name)
}

impl Asset {
    /// A strong ETag: the first 16 bytes of the content's SHA-256, computed
    /// once per process.
    pub fn etag(&self) -> &'static str {
        static TAGS: OnceLock<Vec<String>> = OnceLock::new();
        let tags = TAGS.get_or_init(|| {
            ASSETS
                .iter()
                .map(|a| {
                    let digest = Sha256::digest(a.bytes);
                    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
                    format!("\"{hex}\"")
                })
                .collect()
        });
        ASSETS
            .iter()
            .position(|a| a.name == self.name)
            .and_then(|i| tags.get(i))
            .map_or("\"\"", String::as_str)
    }
}

/// All assets together, in bytes (the issue bounds this at 300 KiB).
pub fn total_size() -> usize {
    ASSETS.iter().map(|a| a.bytes.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_small_and_tagged() {
        assert!(total_size() <= 300 * 1024, "{} bytes", total_size());
        let page = find("").unwrap();
        assert_eq!(find("index.html").unwrap().name, page.name);
        assert!(page.etag().len() == 34 && page.etag().starts_with('"'));
        assert_ne!(page.etag(), find("app.js").unwrap().etag());
        assert!(find("../Cargo.toml").is_none());
    }

    #[test]
    fn the_page_has_no_inline_script_or_style() {
        let page = std::str::from_utf8(find("").unwrap().bytes).unwrap();
        assert!(!page.contains("<script>"), "only <script src=…>");
        assert!(!page.contains("<style"));
        assert!(!page.contains(" style="));
        assert!(!page.contains("onclick") && !page.contains("onload"));
        for a in ASSETS {
            let text = String::from_utf8_lossy(a.bytes);
            assert!(!text.contains("innerHTML"), "{} uses innerHTML", a.name);
            assert!(!text.contains("eval("), "{} uses eval", a.name);
        }
    }
}
