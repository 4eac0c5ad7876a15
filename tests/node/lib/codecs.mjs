// Compression codecs for kafkajs (it ships only gzip): snappy (xerial framing, as the Java client
// writes it), LZ4 (standard frame format, magic v2) and zstd, built on pure-JS/wasm packages so
// nothing native has to compile.
import kafkajs from 'kafkajs';
import lz4 from 'lz4js';
import snappy from 'snappyjs';
import { init as zstdInit, compress as zstdCompress, decompress as zstdDecompress } from '@bokuweb/zstd-wasm';

const { CompressionCodecs, CompressionTypes } = kafkajs;

const XERIAL_MAGIC = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);
const XERIAL_HEADER_BYTES = 16;
const XERIAL_BLOCK_BYTES = 32 * 1024;

function snappyCompress(buf) {
  const parts = [XERIAL_MAGIC, Buffer.from([0, 0, 0, 1, 0, 0, 0, 1])];
  for (let off = 0; off < buf.length; off += XERIAL_BLOCK_BYTES) {
    const block = Buffer.from(snappy.compress(buf.subarray(off, off + XERIAL_BLOCK_BYTES)));
    const len = Buffer.alloc(4);
    len.writeInt32BE(block.length, 0);
    parts.push(len, block);
  }
  return Buffer.concat(parts);
}

function snappyDecompress(buf) {
  if (buf.length < XERIAL_HEADER_BYTES || !buf.subarray(0, 8).equals(XERIAL_MAGIC)) {
    return Buffer.from(snappy.uncompress(buf));
  }
  const out = [];
  let off = XERIAL_HEADER_BYTES;
  while (off + 4 <= buf.length) {
    const len = buf.readInt32BE(off);
    off += 4;
    if (len < 0 || off + len > buf.length) throw new Error('truncated xerial snappy block');
    out.push(Buffer.from(snappy.uncompress(buf.subarray(off, off + len))));
    off += len;
  }
  return Buffer.concat(out);
}

let registered = false;

export async function registerCodecs() {
  if (registered) return;
  await zstdInit();
  CompressionCodecs[CompressionTypes.Snappy] = () => ({
    compress: async (encoder) => snappyCompress(encoder.buffer),
    decompress: async (buffer) => snappyDecompress(buffer),
  });
  CompressionCodecs[CompressionTypes.LZ4] = () => ({
    compress: async (encoder) => Buffer.from(lz4.compress(encoder.buffer)),
    decompress: async (buffer) => Buffer.from(lz4.decompress(buffer)),
  });
  CompressionCodecs[CompressionTypes.ZSTD] = () => ({
    compress: async (encoder) => Buffer.from(zstdCompress(encoder.buffer, 3)),
    decompress: async (buffer) => Buffer.from(zstdDecompress(buffer)),
  });
  registered = true;
}

export const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD,
};
