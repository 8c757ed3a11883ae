//! Entry point for the fuzzer (`fuzz/`, issue 28) and its corpus replay:
//! the parts of a browser POST form this crate reads itself, from hostile
//! bytes — never a panic, hang or unbounded allocation. Not an API.

use super::form::{self, Form};
use super::policy;

/// The boundary the fuzzed form bodies are read under.
const BOUNDARY: &str = "fuzzboundary";

/// The first byte picks the parser: even, a form body (its fields before
/// the file), read at once and in pieces (their size from the same byte)
/// to the same result — what parses is rebuilt, as the server rebuilds it for
/// `s3s`, and must parse again to the same fields and file; odd, a policy
/// document (the rest, base64-encoded as a form carries it), checked
/// against a small form.
pub fn post_form(bytes: &[u8]) {
    let Some((&pick, rest)) = bytes.split_first() else {
        return;
    };
    if pick % 2 == 0 {
        let whole = form::parse(rest, BOUNDARY);
        // Read as it arrives, in pieces of a size the input picks, the
        // body reads as it does at once.
        let step = usize::from(pick / 2) + 1;
        let mut reader = form::FormReader::new(BOUNDARY);
        let mut pieces = Ok(None);
        for end in (step..rest.len()).step_by(step).chain([rest.len()]) {
            pieces = reader.read(&rest[..end]);
            if !matches!(pieces, Ok(None)) {
                break;
            }
        }
        match (&whole, &pieces) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "read in pieces of {step}"),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("read at once {a:?}, in pieces of {step} {b:?}"),
        }
        let Ok(Some(f)) = whole else {
            return;
        };
        let mut again = form::rebuild(&f.fields, BOUNDARY, &f.file_headers);
        again.extend_from_slice(rest.get(f.consumed..).unwrap_or_default());
        let g = form::parse(&again, BOUNDARY);
        let same = matches!(&g, Ok(Some(g)) if g.fields == f.fields && g.filename == f.filename);
        assert!(
            same,
            "a rebuilt form reads differently: {:?} then {:?}",
            f.fields,
            g.map(|g| g.map(|g| g.fields))
        );
    } else {
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(rest);
        if let Ok(p) = policy::parse(&encoded) {
            let f = Form {
                fields: vec![
                    ("key".into(), "uploads/a.txt".into()),
                    ("acl".into(), "private".into()),
                ],
                filename: Some("a.txt".into()),
                file_headers: Vec::new(),
                consumed: 0,
            };
            let _ = policy::names(&p, "key");
            let _ = policy::check(&p, &f, "bucket");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds reach the deep paths: the form parses (and so goes
    /// through the rebuild check), the policy decodes.
    #[test]
    fn the_seeds_parse() {
        let corpus =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/post_form");
        let form = std::fs::read(corpus.join("seed-form")).unwrap();
        let f = form::parse(&form[1..], BOUNDARY).unwrap().unwrap();
        assert_eq!(f.get("key"), Some("uploads/${filename}"));
        assert_eq!(f.filename.as_deref(), Some("a.txt"));
        use base64::Engine as _;
        let doc = std::fs::read(corpus.join("seed-policy")).unwrap();
        let p =
            policy::parse(&base64::engine::general_purpose::STANDARD.encode(&doc[1..])).unwrap();
        assert!(policy::names(&p, "key"));
        post_form(&form);
        post_form(&doc);
    }
}
