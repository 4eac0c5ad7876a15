//! How message keys, values and headers are shown: as text when they are readable UTF-8,
//! otherwise (or on request) as hex, bounded in size.

use serde::Serialize;

/// Bytes of one key/value/header shown; the rest is cut and `truncated` is set.
pub const PAYLOAD_PREVIEW_BYTES_MAX: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadFormat {
    /// Text when the bytes are printable UTF-8, hex otherwise.
    Auto,
    /// Always text (invalid UTF-8 replaced by U+FFFD).
    Text,
    /// Always hex.
    Hex,
}

impl PayloadFormat {
    pub fn parse(s: &str) -> Result<PayloadFormat, String> {
        match s {
            "auto" => Ok(PayloadFormat::Auto),
            "text" => Ok(PayloadFormat::Text),
            "hex" => Ok(PayloadFormat::Hex),
            other => Err(format!("format must be auto, text or hex, got '{other}'")),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Payload {
    /// "text" or "hex".
    pub encoding: &'static str,
    pub data: String,
    pub size_bytes: usize,
    pub truncated: bool,
}

pub fn render(bytes: &[u8], format: PayloadFormat) -> Payload {
    let size_bytes = bytes.len();
    let shown = &bytes[..size_bytes.min(PAYLOAD_PREVIEW_BYTES_MAX)];
    let truncated = shown.len() < size_bytes;
    let as_text = match format {
        PayloadFormat::Hex => false,
        PayloadFormat::Text => true,
        PayloadFormat::Auto => is_printable_utf8(shown),
    };
    let data = if as_text {
        String::from_utf8_lossy(shown).into_owned()
    } else {
        hex(shown)
    };
    Payload {
        encoding: if as_text { "text" } else { "hex" },
        data,
        size_bytes,
        truncated,
    }
}

fn is_printable_utf8(bytes: &[u8]) -> bool {
    // A cut in the middle of a multi-byte character at the preview limit is still text.
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => match std::str::from_utf8(&bytes[..e.valid_up_to()]) {
            Ok(t) => t,
            Err(_) => return false,
        },
        Err(_) => return false,
    };
    text.chars()
        .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t'))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0xf) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_text_or_hex() {
        assert_eq!(render(b"hello\n", PayloadFormat::Auto).encoding, "text");
        let bin = render(&[0, 1, 0xff], PayloadFormat::Auto);
        assert_eq!((bin.encoding, bin.data.as_str()), ("hex", "0001ff"));
        assert_eq!(render(b"hi", PayloadFormat::Hex).data, "6869");
        assert_eq!(render(&[0xff], PayloadFormat::Text).data, "\u{fffd}");
    }

    #[test]
    fn large_payloads_are_cut() {
        let big = vec![b'a'; PAYLOAD_PREVIEW_BYTES_MAX + 10];
        let p = render(&big, PayloadFormat::Auto);
        assert!(p.truncated);
        assert_eq!(p.data.len(), PAYLOAD_PREVIEW_BYTES_MAX);
        assert_eq!(p.size_bytes, PAYLOAD_PREVIEW_BYTES_MAX + 10);
    }
}
