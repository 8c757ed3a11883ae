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
    FormReader::new(boundary).read(body)
}

/// Reads a form's fields as its body arrives, each byte scanned a bounded
/// number of times however the body is cut: rescanning the whole buffer
/// for every chunk made a field dripped in small writes cost quadratic
/// time.
pub(crate) struct FormReader {
    /// `--boundary`: the first line of the body.
    delimiter: Vec<u8>,
    /// `\r\n--boundary`: what ends a field's value.
    closing: Vec<u8>,
    /// Where the part being read starts (its headers); 0 before the body's
    /// first delimiter has been read.
    at: usize,
    /// The field whose value is being read: its name and where its value
    /// starts.
    field: Option<(String, usize)>,
    /// What is being sought (the end of the part's headers, or the end of
    /// the field's value) does not start before this offset.
    scanned: usize,
    /// The fields read so far.
    form: Form,
}

impl FormReader {
    /// A reader of a form under `boundary`.
    pub(crate) fn new(boundary: &str) -> FormReader {
        let delimiter = format!("--{boundary}").into_bytes();
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(&delimiter);
        FormReader {
            delimiter,
            closing,
            at: 0,
            field: None,
            scanned: 0,
            form: Form::default(),
        }
    }

    /// Reads on in `body`: the body so far, the bytes of earlier calls
    /// followed by more. `Ok(Some)` once the file part's headers are in
    /// (then the reader is spent), `Ok(None)` when more bytes are needed.
    pub(crate) fn read(&mut self, body: &[u8]) -> Result<Option<Form>, PostError> {
        if self.at == 0 {
            // The body opens with the first delimiter (an empty line may
            // precede it).
            let start = if body.starts_with(b"\r\n") { 2 } else { 0 };
            let d = self.delimiter.len();
            if body.len() < start + d + 2 {
                return Ok(None);
            }
            if !body[start..].starts_with(&self.delimiter) || &body[start + d..][..2] != b"\r\n" {
                return Err(PostError::Malformed(
                    "the body does not open with the boundary",
                ));
            }
            self.at = start + d + 2;
            self.scanned = self.at;
        }
        loop {
            match self.field.take() {
                None => {
                    if let Some(form) = self.read_headers(body)? {
                        return Ok(Some(form));
                    }
                    if self.field.is_none() {
                        return Ok(None);
                    }
                }
                Some((name, value_start)) => {
                    // The value runs to the next delimiter, on a line of its own.
                    let Some(value_end) = find(body, &self.closing, self.scanned) else {
                        self.scanned =
                            value_start.max(body.len().saturating_sub(self.closing.len() - 1));
                        self.field = Some((name, value_start));
                        return Ok(None);
                    };
                    let value = std::str::from_utf8(&body[value_start..value_end])
                        .map_err(|_| PostError::Malformed("a form field is not UTF-8"))?;
                    let next = value_end + self.closing.len();
                    match body.get(next..next + 2) {
                        None | Some([_]) => {
                            self.scanned = value_end;
                            self.field = Some((name, value_start));
                            return Ok(None);
                        }
                        Some(b"\r\n") => {}
                        // `--`: the form ended without a file.
                        Some(_) => return Err(PostError::NoFile),
                    }
                    self.form.fields.push((name, value.to_string()));
                    self.at = next + 2;
                    self.scanned = self.at;
                }
            }
        }
    }

    /// Reads the headers of the part at `self.at` once they are all in: the
    /// file's give the form; a field's start reading its value.
    fn read_headers(&mut self, body: &[u8]) -> Result<Option<Form>, PostError> {
        // A part's headers end with an empty line.
        let Some(end) = find(body, b"\r\n\r\n", self.scanned) else {
            self.scanned = self.at.max(body.len().saturating_sub(3));
            return Ok(None);
        };
        let headers = &body[self.at..end + 4];
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
            let mut form = std::mem::take(&mut self.form);
            form.filename = filename;
            form.file_headers = headers.to_vec();
            form.consumed = end + 4;
            return Ok(Some(form));
        }
        self.field = Some((name, end + 4));
        self.scanned = end + 4;
        Ok(None)
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
    fn read_in_pieces_as_at_once() {
        let whole = parse(BODY, "XyZ").unwrap().unwrap();
        for step in 1..BODY.len() {
            let mut reader = FormReader::new("XyZ");
            let mut got = None;
            for end in (step..BODY.len()).step_by(step).chain([BODY.len()]) {
                if let Some(form) = reader.read(&BODY[..end]).unwrap() {
                    got = Some(form);
                    break;
                }
            }
            assert_eq!(got.as_ref(), Some(&whole), "step {step}");
        }
    }

    /// A long field dripped in small pieces costs linear time: each read
    /// looks only at what it has not looked at before.
    #[test]
    fn a_dripped_field_is_scanned_once() {
        let mut body = b"--XyZ\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n".to_vec();
        body.extend(std::iter::repeat_n(b'k', 1 << 20));
        let mut reader = FormReader::new("XyZ");
        for end in (64..body.len()).step_by(16) {
            assert_eq!(reader.read(&body[..end]).unwrap(), None);
            // The next read starts where a closing delimiter could still
            // begin, not at the value's start.
            assert!(reader.scanned + reader.closing.len() > end, "at {end}");
        }
        body.extend_from_slice(
            b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx",
        );
        let form = reader.read(&body).unwrap().unwrap();
        assert_eq!(form.get("key").map(str::len), Some(1 << 20));
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
