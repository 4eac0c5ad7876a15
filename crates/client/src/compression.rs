//! Batch compression codecs, using the `kafka-protocol` crate's Kafka-compatible framings
//! (xerial snappy framing, LZ4 frame format, gzip, zstd).
use std::fmt;
use std::str::FromStr;

use bytes::{Bytes, BytesMut};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

use crate::error::{ClientError, Result};

/// A batch compression codec (the low three bits of the batch attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn attribute_bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    pub fn from_attribute_bits(bits: i16) -> Result<Self> {
        Ok(match bits {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => {
                return Err(ClientError::corrupt(format!(
                    "unknown compression codec {other}"
                )));
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" | "" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "snappy" => Ok(Compression::Snappy),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(format!(
                "unknown compression '{other}' (none, gzip, snappy, lz4, zstd)"
            )),
        }
    }
}

// The codec traits take closures returning the codec crate's own error type; inference names it.
macro_rules! compress_with {
    ($codec:ty, $out:ident, $data:ident) => {
        <$codec as Compressor<BytesMut>>::compress(&mut $out, |tmp: &mut BytesMut| {
            tmp.extend_from_slice($data);
            Ok(())
        })
    };
}

macro_rules! decompress_with {
    ($codec:ty, $input:ident) => {
        <$codec as Decompressor<Bytes>>::decompress(&mut $input, |b: &mut Bytes| {
            Ok(std::mem::take(b))
        })
    };
}

/// Compresses `data` (the records section of a batch).
pub fn compress(c: Compression, data: &[u8]) -> Result<Bytes> {
    let mut out = BytesMut::with_capacity(data.len() / 2 + 64);
    let r = match c {
        Compression::None => {
            out.extend_from_slice(data);
            Ok(())
        }
        Compression::Gzip => compress_with!(Gzip, out, data),
        Compression::Snappy => compress_with!(Snappy, out, data),
        Compression::Lz4 => compress_with!(Lz4, out, data),
        Compression::Zstd => compress_with!(Zstd, out, data),
    };
    r.map_err(|e| ClientError::Compression(format!("{c}: {e}")))?;
    Ok(out.freeze())
}

/// Upper bound on one decompressed batch, so a compression bomb cannot exhaust memory.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 256 * 1024 * 1024;

/// Decompresses the records section of a batch.
pub fn decompress(c: Compression, data: &Bytes) -> Result<Bytes> {
    if c == Compression::Snappy
        && snappy_declared_bytes(data).is_some_and(|n| n > MAX_DECOMPRESSED_BATCH_BYTES as u64)
    {
        // kafka-protocol allocates (zeroed) what the header declares before decoding anything:
        // a 10-byte batch could ask for 4 GiB (found by fuzz/compression).
        return Err(ClientError::Compression(format!(
            "{c}: batch declares over {MAX_DECOMPRESSED_BATCH_BYTES} bytes"
        )));
    }
    let mut input = data.clone();
    let out = match c {
        Compression::None => Ok(input),
        Compression::Gzip => decompress_with!(Gzip, input),
        Compression::Snappy => decompress_with!(Snappy, input),
        Compression::Lz4 => decompress_with!(Lz4, input),
        Compression::Zstd => decompress_with!(Zstd, input),
    }
    .map_err(|e| ClientError::Compression(format!("{c}: {e}")))?;
    if out.len() > MAX_DECOMPRESSED_BATCH_BYTES {
        return Err(ClientError::Compression(format!(
            "{c}: batch decompresses to over {MAX_DECOMPRESSED_BATCH_BYTES} bytes"
        )));
    }
    Ok(out)
}

/// What a snappy input says it decompresses to, from its length headers (raw snappy: one
/// varint; Kafka's xerial framing: one per block). `None` if the headers are malformed (the
/// decoder then rejects the input before allocating).
fn snappy_declared_bytes(data: &[u8]) -> Option<u64> {
    const XERIAL_MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    let Some(mut rest) = data.strip_prefix(XERIAL_MAGIC.as_slice()) else {
        return snappy_raw_declared_bytes(data);
    };
    let mut total = 0u64;
    // Each block takes at least its 4-byte length, so this loop is bounded by the input.
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = tail.get(..len)?;
        total = total.saturating_add(snappy_raw_declared_bytes(block)?);
        rest = &tail[len..];
    }
    Some(total)
}

/// The uncompressed length at the start of a raw snappy block (a varint of at most 5 bytes).
fn snappy_raw_declared_bytes(block: &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, b) in block.iter().take(5).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codecs_round_trip() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let z = compress(c, &data).unwrap();
            if c != Compression::None {
                assert!(z.len() < data.len() / 2, "{c} did not compress");
            }
            assert_eq!(&decompress(c, &z).unwrap()[..], &data[..]);
            assert_eq!(c.name().parse::<Compression>().unwrap(), c);
        }
    }

    #[test]
    fn snappy_header_declaring_a_huge_batch_is_refused_before_allocating() {
        // Found by fuzz/compression: raw snappy whose length varint says ~4 GiB.
        let raw = Bytes::from_static(&[0xfb, 0xff, 0xff, 0xff, 0x0f, 0x00]);
        let err = decompress(Compression::Snappy, &raw).unwrap_err();
        assert!(err.to_string().contains("declares over"), "{err}");
        let mut xerial = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        for _ in 0..2 {
            xerial.extend_from_slice(&6u32.to_be_bytes());
            xerial.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08, 0x00]); // 2 GiB each
        }
        let err = decompress(Compression::Snappy, &Bytes::from(xerial)).unwrap_err();
        assert!(err.to_string().contains("declares over"), "{err}");
        let ok = compress(Compression::Snappy, b"small").unwrap();
        assert_eq!(snappy_declared_bytes(&ok), Some(5));
    }

    #[test]
    fn garbage_is_an_error() {
        for c in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            assert!(decompress(c, &Bytes::from_static(b"definitely not compressed")).is_err());
        }
    }
}
