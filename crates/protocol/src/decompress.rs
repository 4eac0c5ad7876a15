//! Bounded decompression of a RecordBatch v2's records (gzip, snappy, lz4, zstd).
//!
//! A producer may send a few bytes that expand to gigabytes (a "decompression bomb": 1 GiB of
//! zeros is 1 MB of gzip). Every codec here therefore writes into a buffer that never grows past
//! a limit fixed before decompression starts, and reports [`DecompressError::TooLarge`] as soon
//! as the stream would pass it. Decoders return errors on any input; none panics.

use std::io::{self, Read};

/// Largest decompressed records section of one batch we accept, whatever its compressed size
/// (64 × the default `max.message.bytes`). Kafka has no such bound; a batch needing more is
/// refused with INVALID_RECORD.
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 << 20;
/// Largest expansion (decompressed / compressed bytes) allowed above
/// [`DECOMPRESSED_BYTES_ALWAYS_ALLOWED`]. Gzip cannot pass ~1032:1, lz4 ~255:1, snappy ~21:1,
/// so this bounds zstd (which reaches 30,000:1 on zeros).
pub const MAX_COMPRESSION_RATIO: usize = 1024;
/// Every batch may decompress to this many bytes whatever its ratio: more than one
/// librdkafka batch (`batch.size` 1,000,000 bytes before compression) of any content.
pub const DECOMPRESSED_BYTES_ALWAYS_ALLOWED: usize = 8 << 20;
/// The largest zstd window (log2 bytes) a frame may ask for: zstd's own default, 128 MiB, stated
/// here so the decoder's memory has a named bound (level 22 frames need it).
pub const ZSTD_WINDOW_LOG_MAX: u32 = 27;
/// Step by which the output buffer grows (it starts small and never passes the limit).
const OUTPUT_CHUNK_BYTES: usize = 64 << 10;

/// Xerial snappy-java framing (what the Java client writes): magic, version, compatible version,
/// then blocks of `[u32 big-endian length][raw snappy block]`.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_BYTES: usize = 16;

/// Compression codec ids in the batch attributes.
pub const CODEC_NONE: u8 = 0;
pub const CODEC_GZIP: u8 = 1;
pub const CODEC_SNAPPY: u8 = 2;
pub const CODEC_LZ4: u8 = 3;
pub const CODEC_ZSTD: u8 = 4;

/// Name of a codec id, for messages.
pub fn codec_name(codec: u8) -> &'static str {
    match codec {
        CODEC_NONE => "none",
        CODEC_GZIP => "gzip",
        CODEC_SNAPPY => "snappy",
        CODEC_LZ4 => "lz4",
        CODEC_ZSTD => "zstd",
        _ => "unknown",
    }
}

/// Why a compressed records section could not be expanded.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    /// The codec rejected the bytes (not a valid stream of that codec).
    #[error("{codec} records cannot be decompressed: {reason}")]
    Corrupt { codec: &'static str, reason: String },
    /// The output would pass the limit.
    #[error(
        "{codec} records decompress to more than {limit_bytes} bytes \
         (limit for {compressed_bytes} compressed bytes)"
    )]
    TooLarge {
        codec: &'static str,
        limit_bytes: usize,
        compressed_bytes: usize,
    },
    #[error("unknown compression codec {0}")]
    UnknownCodec(u8),
}

/// The output limit for a records section of `compressed_bytes`:
/// `min(MAX_DECOMPRESSED_BATCH_BYTES, max(DECOMPRESSED_BYTES_ALWAYS_ALLOWED, compressed × ratio))`.
pub fn output_limit_bytes(compressed_bytes: usize) -> usize {
    const { assert!(DECOMPRESSED_BYTES_ALWAYS_ALLOWED <= MAX_DECOMPRESSED_BATCH_BYTES) };
    compressed_bytes
        .saturating_mul(MAX_COMPRESSION_RATIO)
        .clamp(
            DECOMPRESSED_BYTES_ALWAYS_ALLOWED,
            MAX_DECOMPRESSED_BATCH_BYTES,
        )
}

/// Decompress `input` (the records section of a batch compressed with `codec`) into `out`
/// (cleared first), writing at most `limit_bytes`. On error `out` holds what was decoded
/// before it (so a caller can tell which record the stream broke in).
pub fn decompress_into(
    codec: u8,
    input: &[u8],
    limit_bytes: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecompressError> {
    out.clear();
    let name = codec_name(codec);
    let corrupt = |e: &dyn std::fmt::Display| DecompressError::Corrupt {
        codec: name,
        reason: e.to_string(),
    };
    let too_large = || DecompressError::TooLarge {
        codec: name,
        limit_bytes,
        compressed_bytes: input.len(),
    };
    let result = match codec {
        CODEC_GZIP => read_bounded(flate2::read::MultiGzDecoder::new(input), limit_bytes, out),
        CODEC_LZ4 => match lz4::Decoder::new(input) {
            Ok(decoder) => read_bounded(decoder, limit_bytes, out),
            Err(e) => return Err(corrupt(&e)),
        },
        CODEC_ZSTD => match zstd_decoder(input) {
            Ok(decoder) => read_bounded(decoder, limit_bytes, out),
            Err(e) => return Err(corrupt(&e)),
        },
        CODEC_SNAPPY => return snappy(input, limit_bytes, out, name),
        other => return Err(DecompressError::UnknownCodec(other)),
    };
    match result {
        Ok(Bounded::Done) => Ok(()),
        Ok(Bounded::TooLarge) => Err(too_large()),
        Err(e) => Err(corrupt(&e)),
    }
}

fn zstd_decoder(input: &[u8]) -> io::Result<zstd::stream::read::Decoder<'_, &[u8]>> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(input)?;
    decoder.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
    Ok(decoder)
}

enum Bounded {
    Done,
    TooLarge,
}

/// Read `reader` to its end into `out`, growing `out` by at most [`OUTPUT_CHUNK_BYTES`] (or by
/// its own size) at a time and never past `limit_bytes + 1` bytes.
fn read_bounded(
    mut reader: impl Read,
    limit_bytes: usize,
    out: &mut Vec<u8>,
) -> io::Result<Bounded> {
    loop {
        let start = out.len();
        if start > limit_bytes {
            out.truncate(limit_bytes);
            return Ok(Bounded::TooLarge);
        }
        let grow = start.max(OUTPUT_CHUNK_BYTES).min(limit_bytes + 1 - start);
        // Exact, so the buffer doubles as it fills but never passes the limit.
        out.reserve_exact(grow);
        out.resize(start + grow, 0);
        let mut filled = start;
        while filled < out.len() {
            match reader.read(&mut out[filled..]) {
                Ok(0) => {
                    out.truncate(filled);
                    return Ok(Bounded::Done);
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    out.truncate(filled);
                    return Err(e);
                }
            }
        }
    }
}

/// Snappy as Kafka clients write it: xerial framing (Java) or one raw block (librdkafka and
/// others; snappy-java reads both). Each raw block states its decompressed length up front, so
/// the limit is checked before any output is allocated.
fn snappy(
    input: &[u8],
    limit_bytes: usize,
    out: &mut Vec<u8>,
    name: &'static str,
) -> Result<(), DecompressError> {
    if input.len() >= XERIAL_HEADER_BYTES && input[..XERIAL_MAGIC.len()] == XERIAL_MAGIC[..] {
        let mut rest = &input[XERIAL_HEADER_BYTES..];
        while !rest.is_empty() {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                return Err(DecompressError::Corrupt {
                    codec: name,
                    reason: "truncated xerial block length".into(),
                });
            };
            let len = u32::from_be_bytes(*len) as usize;
            if len > tail.len() {
                return Err(DecompressError::Corrupt {
                    codec: name,
                    reason: format!("xerial block of {len} bytes, {} left", tail.len()),
                });
            }
            snappy_block(&tail[..len], limit_bytes, out, name, input.len())?;
            rest = &tail[len..];
        }
        return Ok(());
    }
    snappy_block(input, limit_bytes, out, name, input.len())
}

fn snappy_block(
    block: &[u8],
    limit_bytes: usize,
    out: &mut Vec<u8>,
    name: &'static str,
    compressed_bytes: usize,
) -> Result<(), DecompressError> {
    let corrupt = |e: snap::Error| DecompressError::Corrupt {
        codec: name,
        reason: e.to_string(),
    };
    let len = snap::raw::decompress_len(block).map_err(corrupt)?;
    let start = out.len();
    if len > limit_bytes - start {
        return Err(DecompressError::TooLarge {
            codec: name,
            limit_bytes,
            compressed_bytes,
        });
    }
    out.reserve_exact(len);
    out.resize(start + len, 0);
    match snap::raw::Decoder::new().decompress(block, &mut out[start..]) {
        Ok(n) => {
            out.truncate(start + n);
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(corrupt(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut out = Vec::new();
        decompress_into(CODEC_GZIP, &gzip(&data), 1 << 20, &mut out).unwrap();
        assert_eq!(out, data);
        let z = zstd::encode_all(&data[..], 3).unwrap();
        decompress_into(CODEC_ZSTD, &z, 1 << 20, &mut out).unwrap();
        assert_eq!(out, data);
        let mut l = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
        l.write_all(&data).unwrap();
        let (l, r) = l.finish();
        r.unwrap();
        decompress_into(CODEC_LZ4, &l, 1 << 20, &mut out).unwrap();
        assert_eq!(out, data);
        let s = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        decompress_into(CODEC_SNAPPY, &s, 1 << 20, &mut out).unwrap();
        assert_eq!(out, data);
        // Xerial framing, two blocks.
        let mut x = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        for half in data.chunks(100_000) {
            let b = snap::raw::Encoder::new().compress_vec(half).unwrap();
            x.extend_from_slice(&(b.len() as u32).to_be_bytes());
            x.extend_from_slice(&b);
        }
        decompress_into(CODEC_SNAPPY, &x, 1 << 20, &mut out).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn output_stops_at_the_limit() {
        let data = vec![0u8; 300_000];
        let mut out = Vec::new();
        for (codec, bytes) in [
            (CODEC_GZIP, gzip(&data)),
            (CODEC_ZSTD, zstd::encode_all(&data[..], 3).unwrap()),
            (
                CODEC_SNAPPY,
                snap::raw::Encoder::new().compress_vec(&data).unwrap(),
            ),
        ] {
            let err = decompress_into(codec, &bytes, 100_000, &mut out).unwrap_err();
            assert!(matches!(err, DecompressError::TooLarge { .. }), "{err}");
            assert!(out.len() <= 100_001);
            assert!(out.capacity() <= 200_000, "capacity {}", out.capacity());
        }
    }

    #[test]
    fn limit_follows_ratio_between_floor_and_cap() {
        assert_eq!(output_limit_bytes(10), DECOMPRESSED_BYTES_ALWAYS_ALLOWED);
        assert_eq!(output_limit_bytes(16 << 10), 16 << 20);
        assert_eq!(output_limit_bytes(1 << 20), MAX_DECOMPRESSED_BATCH_BYTES);
        assert_eq!(output_limit_bytes(usize::MAX), MAX_DECOMPRESSED_BATCH_BYTES);
    }
}
