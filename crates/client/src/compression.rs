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
