//! Every codec's decoder (gzip, snappy, lz4, zstd, as the client decompresses fetched batches):
//! never panics on garbage, and compress-then-decompress returns the input. First byte picks the
//! codec (low 3 bits) and the mode (bit 3: round trip of the rest instead of decoding it);
//! bit 4 wraps the bytes as a compressed batch and runs the whole batch check.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use streamforge_client::compression::{self, Compression};
use streamforge_fuzz::batches::{DECOMPRESS_INPUT_BYTES_MAX, batch_around, check_batches};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if rest.len() > DECOMPRESS_INPUT_BYTES_MAX {
        return;
    }
    let codec_bits = i16::from(mode % 5);
    let codec = Compression::from_attribute_bits(codec_bits).expect("0..=4 are codecs");
    if mode & 0x10 != 0 {
        let batch = batch_around(rest, 1, codec_bits);
        check_batches(&batch);
    } else if mode & 0x08 != 0 {
        let packed = compression::compress(codec, rest).expect("compression cannot fail");
        let back = compression::decompress(codec, &packed).expect("our compression decodes");
        assert_eq!(&back[..], rest, "{codec} round trip");
    } else {
        let _ = compression::decompress(codec, &Bytes::copy_from_slice(rest));
    }
});
