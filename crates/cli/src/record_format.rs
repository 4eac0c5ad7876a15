//! Byte-level record I/O for `produce` and `consume`: kcat-style output format strings
//! (`-f '%t %p %o %k %v\n'`) and delimiter-split input, both binary-safe (no UTF-8 needed).
use std::io::{BufRead, Write};

use streamforge_client::ConsumerRecord;

/// Longest record `produce` reads before a delimiter: past it the input is refused, so a
/// delimiter-less input cannot grow memory without bound (Kafka's default
/// `message.max.bytes` is 1 MiB; this leaves room for raised limits).
pub const RECORD_BYTES_MAX: usize = 64 * 1024 * 1024;

/// One piece of a format string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    Headers,
    KeyLength,
    ValueLength,
}

/// `\n`, `\t`, `\r`, `\0`, `\\` as the bytes they name; any other character as itself.
pub fn unescape(s: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next() {
            Some('n') => out.push(b'\n'),
            Some('t') => out.push(b'\t'),
            Some('r') => out.push(b'\r'),
            Some('0') => out.push(0),
            Some('\\') => out.push(b'\\'),
            Some(other) => {
                out.push(b'\\');
                let mut buf = [0u8; 4];
                out.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
            }
            None => out.push(b'\\'),
        }
    }
    out
}

/// Parse a kcat format string: `%t` topic, `%p` partition, `%o` offset, `%k` key, `%v` value,
/// `%T` timestamp (ms), `%h` headers (`k=v,k2=v2`), `%K` / `%S` key / value length (-1 for
/// null), `%%` a percent sign; backslash escapes as `unescape`.
pub fn parse(fmt: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            literal.push(c);
            continue;
        }
        let piece = match chars.next() {
            Some('%') => {
                literal.push('%');
                continue;
            }
            Some('t') => Piece::Topic,
            Some('p') => Piece::Partition,
            Some('o') => Piece::Offset,
            Some('k') => Piece::Key,
            Some('v') => Piece::Value,
            Some('T') => Piece::Timestamp,
            Some('h') => Piece::Headers,
            Some('K') => Piece::KeyLength,
            Some('S') => Piece::ValueLength,
            Some(other) => return Err(format!("unknown format token %{other} in '{fmt}'")),
            None => return Err(format!("'{fmt}' ends with a lone %")),
        };
        if !literal.is_empty() {
            pieces.push(Piece::Literal(unescape(&std::mem::take(&mut literal))));
        }
        pieces.push(piece);
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(unescape(&literal)));
    }
    Ok(pieces)
}

fn len_of(b: &Option<bytes::Bytes>) -> i64 {
    b.as_ref().map_or(-1, |b| b.len() as i64)
}

/// Write one record as `pieces` say, keys and values as raw bytes.
pub fn write(out: &mut impl Write, r: &ConsumerRecord, pieces: &[Piece]) -> std::io::Result<()> {
    for p in pieces {
        match p {
            Piece::Literal(b) => out.write_all(b)?,
            Piece::Topic => out.write_all(r.topic.as_bytes())?,
            Piece::Partition => write!(out, "{}", r.partition)?,
            Piece::Offset => write!(out, "{}", r.offset)?,
            Piece::Key => out.write_all(r.key.as_deref().unwrap_or_default())?,
            Piece::Value => out.write_all(r.value.as_deref().unwrap_or_default())?,
            Piece::Timestamp => write!(out, "{}", r.timestamp_ms)?,
            Piece::Headers => {
                for (i, h) in r.headers.iter().enumerate() {
                    if i > 0 {
                        out.write_all(b",")?;
                    }
                    out.write_all(h.key.as_bytes())?;
                    out.write_all(b"=")?;
                    out.write_all(h.value.as_deref().unwrap_or_default())?;
                }
            }
            Piece::KeyLength => write!(out, "{}", len_of(&r.key))?,
            Piece::ValueLength => write!(out, "{}", len_of(&r.value))?,
        }
    }
    Ok(())
}

/// Read the next record: the bytes up to `delimiter` (not included), or up to the end of the
/// input for the last one. `None` at the end.
pub fn next_record<R: BufRead + ?Sized>(
    input: &mut R,
    delimiter: &[u8],
) -> std::io::Result<Option<Vec<u8>>> {
    let last = *delimiter.last().expect("a delimiter is never empty");
    let limit = RECORD_BYTES_MAX + delimiter.len();
    let mut buf = Vec::new();
    loop {
        let room = limit.saturating_sub(buf.len()) as u64;
        let n = std::io::Read::take(&mut *input, room).read_until(last, &mut buf)?;
        if buf.ends_with(delimiter) {
            buf.truncate(buf.len() - delimiter.len());
            return Ok(Some(buf));
        }
        if n == 0 {
            return Ok((!buf.is_empty()).then_some(buf));
        }
        if buf.len() >= limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a record is longer than {RECORD_BYTES_MAX} bytes (no delimiter found)"),
            ));
        }
        // Stopped at the delimiter's last byte without the rest before it: read on.
    }
}

/// Split `record` at the first `delimiter` into key and value.
pub fn split_key<'a>(record: &'a [u8], delimiter: &[u8]) -> (Option<&'a [u8]>, &'a [u8]) {
    match record.windows(delimiter.len()).position(|w| w == delimiter) {
        Some(i) => (Some(&record[..i]), &record[i + delimiter.len()..]),
        None => (None, record),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_strings_parse_as_kcat_reads_them() {
        let p = parse("%t %p %o %k=%v %% %K/%S\\n").unwrap();
        assert_eq!(p[0], Piece::Topic);
        assert_eq!(p[1], Piece::Literal(b" ".to_vec()));
        assert_eq!(p.last(), Some(&Piece::Literal(b"\n".to_vec())));
        assert!(p.contains(&Piece::Literal(b" % ".to_vec())));
        assert!(parse("%x").is_err());
        assert!(parse("50%").is_err());
    }

    #[test]
    fn records_split_on_any_delimiter_and_keep_binary_bytes() {
        let data: &[u8] = b"a\x00\xff|b||c";
        let mut r = std::io::Cursor::new(data);
        let mut got = Vec::new();
        while let Some(rec) = next_record(&mut r, b"|").unwrap() {
            got.push(rec);
        }
        assert_eq!(
            got,
            vec![b"a\x00\xff".to_vec(), b"b".to_vec(), vec![], b"c".to_vec()]
        );
        let mut r = std::io::Cursor::new(&b"k1::v1;;k2::v2;;"[..]);
        let first = next_record(&mut r, b";;").unwrap().unwrap();
        assert_eq!(split_key(&first, b"::"), (Some(&b"k1"[..]), &b"v1"[..]));
        assert!(next_record(&mut r, b";;").unwrap().is_some());
        assert!(next_record(&mut r, b";;").unwrap().is_none());
    }
}
