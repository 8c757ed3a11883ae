//! The fields of a browser POST form (`multipart/form-data`): every part
//! before the one named `file`, and that part's own headers. The file's
//! bytes are never read here; `s3s` streams them (as S3 requires, the file
//! is the form's last field: anything after it is ignored).

use super::PostError;

/// A form's fields, as sent (names as written; compare them ignoring case).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Form {
    /// `(name, value)` of each field before the file, in order.
    pub(crate) fields: Vec<(String, String)>,
    /// The file part's `filename` parameter, when it has one.
    pub(crate) filename: Option<String>,
    /// The file part's headers as sent (from its first header line to the
    /// blank line that ends them, inclusive).
    pub(crate) file_headers: Vec<u8>,
    /// How many bytes of the body the fields and the file's headers took:
    /// the file's bytes start here.
    pub(crate) consumed: usize,
}

impl Form {
    /// The value of the first field named `name` (ignoring case).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Finds `needle` in `hay` at or after `from`.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// `name` and `filename` of a part's `Content-Disposition: form-data; …`.
fn disposition(value: &str) -> Result<(String, Option<String>), PostError> {
    let mut parts = value.split(';').map(str::trim);
    if !parts
        .next()
        .is_some_and(|kind| kind.eq_ignore_ascii_case("form-data"))
    {
        return Err(PostError::Malformed("a part is not form-data"));
    }
    let (mut name, mut filename) = (None, None);
    for param in parts {
        let Some((key, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value)
            .to_string();
        match key.trim().to_ascii_lowercase().as_str() {
            "name" => name = Some(value),
            "filename" => filename = Some(value),
            _ => {}
        }
    }
    let name = name.ok_or(PostError::Malformed("a part has no name"))?;
    if name.contains(['"', '\r', '\n']) {
        return Err(PostError::Malformed(
            "a field name holds a quote or a line break",
        ));
    }
    Ok((name, filename))
}

/// Parses the form's fields from the start of the body. `Ok(None)`: more
/// bytes are needed (the file part's headers have not all arrived).
pub(crate) fn parse(body: &[u8], boundary: &str) -> Result<Option<Form>, PostError> {
    let delimiter = format!("--{boundary}");
    let delimiter = delimiter.as_bytes();
    // The body opens with the first delimiter (an empty line may precede it).
    let start = if body.starts_with(b"\r\n") { 2 } else { 0 };
    if body.len() < start + delimiter.len() + 2 {
        return Ok(None);
    }
    if !body[start..].starts_with(delimiter) || &body[start + delimiter.len()..][..2] != b"\r\n" {
        return Err(PostError::Malformed(
            "the body does not open with the boundary",
        ));
    }
    let mut at = start + delimiter.len() + 2;
    let mut form = Form::default();
    loop {
        // A part's headers end with an empty line.
        let Some(end) = find(body, b"\r\n\r\n", at) else {
            return Ok(None);
        };
        let headers = &body[at..end + 4];
        let mut name_file = None;
        for line in headers.split(|&b| b == b'\n') {
            let line = std::str::from_utf8(line)
                .map_err(|_| PostError::Malformed("a part's headers are not UTF-8"))?
                .trim_end_matches('\r');
            if let Some((h, v)) = line.split_once(':') {
                if h.trim().eq_ignore_ascii_case("content-disposition") {
                    name_file = Some(disposition(v.trim())?);
                }
            }
        }
        let (name, filename) =
            name_file.ok_or(PostError::Malformed("a part has no Content-Disposition"))?;
        if name.eq_ignore_ascii_case("file") {
            form.filename = filename;
            form.file_headers = headers.to_vec();
            form.consumed = end + 4;
            return Ok(Some(form));
        }
        // The value runs to the next delimiter, on a line of its own.
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(delimiter);
        let Some(value_end) = find(body, &closing, end + 4) else {
            return Ok(None);
        };
        let value = std::str::from_utf8(&body[end + 4..value_end])
            .map_err(|_| PostError::Malformed("a form field is not UTF-8"))?;
        form.fields.push((name, value.to_string()));
        at = value_end + closing.len();
        match body.get(at..at + 2) {
            None | Some([_]) => return Ok(None),
            Some(b"\r\n") => at += 2,
            // `--`: the form ended without a file.
            Some(_) => return Err(PostError::NoFile),
        }
    }
}

/// The form's fields again, as a body prefix: each field (its value
/// possibly changed), then the file part's original headers, so the
/// file's bytes can follow unchanged.
pub(crate) fn rebuild(fields: &[(String, String)], boundary: &str, file_headers: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        out.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
        );
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
    out.extend_from_slice(file_headers);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"--XyZ\r\n\
Content-Disposition: form-data; name=\"key\"\r\n\r\n\
uploads/${filename}\r\n\
--XyZ\r\n\
Content-Disposition: form-data; name=\"Content-Type\"\r\n\r\n\
text/plain\r\n\
--XyZ\r\n\
Content-Disposition: form-data; name=\"file\"; filename=\"a b.txt\"\r\n\
Content-Type: text/plain\r\n\r\n\
hello\r\n--XyZ--\r\n";

    #[test]
    fn fields_and_the_file_headers() {
        let form = parse(BODY, "XyZ").unwrap().unwrap();
        assert_eq!(form.get("KEY"), Some("uploads/${filename}"));
        assert_eq!(form.get("content-type"), Some("text/plain"));
        assert_eq!(form.filename.as_deref(), Some("a b.txt"));
        assert_eq!(&BODY[form.consumed..form.consumed + 5], b"hello");
        // Every shorter prefix asks for more, never fails.
        for n in 0..form.consumed {
            assert_eq!(parse(&BODY[..n], "XyZ").unwrap(), None, "prefix {n}");
        }
        // Rebuilt, it parses to the same fields.
        let mut again = rebuild(&form.fields, "XyZ", &form.file_headers);
        let n = again.len();
        again.extend_from_slice(&BODY[form.consumed..]);
        let reparsed = parse(&again, "XyZ").unwrap().unwrap();
        assert_eq!(reparsed.fields, form.fields);
        assert_eq!(reparsed.consumed, n);
    }

    #[test]
    fn refusals() {
        assert!(matches!(
            parse(b"--other\r\nxx", "XyZ"),
            Err(PostError::Malformed(_))
        ));
        let no_file =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\nk\r\n--XyZ--\r\n";
        assert!(matches!(parse(no_file, "XyZ"), Err(PostError::NoFile)));
        let no_name = b"--XyZ\r\nContent-Disposition: form-data\r\n\r\nk\r\n--XyZ--\r\n";
        assert!(matches!(
            parse(no_name, "XyZ"),
            Err(PostError::Malformed(_))
        ));
    }
}
