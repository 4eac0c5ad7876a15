//! Zero-copy RecordBatch v2 view: header fields, CRC-32C check, in-place base-offset patch.
