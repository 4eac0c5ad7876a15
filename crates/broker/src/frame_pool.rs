//! Reusable buffers for large request frames (Produce). A fresh allocation of a few hundred KiB
//! per request costs a page fault per 4 KiB page while the socket data is copied in, and an
//! munmap when it is freed; reusing the buffer of a finished Produce request avoids both.
use bytes::BytesMut;
use parking_lot::Mutex;

/// Frames smaller than this are allocated normally (the allocator reuses small blocks well).
pub const POOLED_FRAME_BYTES_MIN: usize = 64 * 1024;
/// Largest buffer kept for reuse.
const POOLED_BUFFER_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Total capacity kept in the pool.
const POOL_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, Default)]
pub struct FramePool {
    inner: Mutex<PoolInner>,
}

#[derive(Debug, Default)]
struct PoolInner {
    buffers: Vec<BytesMut>,
    bytes: usize,
}

impl FramePool {
    /// An empty pooled buffer with room for `len` bytes, if the pool has one (only for frames
    /// of at least `POOLED_FRAME_BYTES_MIN`). Callers allocate otherwise, growing the buffer
    /// as bytes arrive rather than by the length a peer announces.
    pub fn take_pooled(&self, len: usize) -> Option<BytesMut> {
        if len < POOLED_FRAME_BYTES_MIN {
            return None;
        }
        let mut p = self.inner.lock();
        let i = p.buffers.iter().position(|b| b.capacity() >= len)?;
        let buf = p.buffers.swap_remove(i);
        p.bytes -= buf.capacity();
        Some(buf)
    }

    /// Returns a buffer (typically a finished request's body) for reuse.
    pub fn give(&self, mut buf: BytesMut) {
        buf.clear();
        // A request body starts after the frame header; reserving one byte more than the
        // capacity moves the (empty) view back to the start of the allocation, which is
        // ours alone, so the whole buffer is reused.
        let cap = buf.capacity();
        buf.reserve(cap + 1);
        let cap = buf.capacity();
        if !(POOLED_FRAME_BYTES_MIN..=POOLED_BUFFER_BYTES_MAX).contains(&cap) {
            return;
        }
        let mut p = self.inner.lock();
        if p.bytes + cap <= POOL_BYTES_MAX {
            p.bytes += cap;
            p.buffers.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_large_buffers_only() {
        let pool = FramePool::default();
        assert!(pool.take_pooled(100).is_none());
        pool.give(BytesMut::with_capacity(100));
        assert_eq!(pool.inner.lock().buffers.len(), 0);
        assert!(pool.take_pooled(POOLED_FRAME_BYTES_MIN).is_none());
        let mut big = BytesMut::with_capacity(POOLED_FRAME_BYTES_MIN * 2);
        big.extend_from_slice(&[1u8; 100]);
        let ptr = big.as_ptr();
        let cap = big.capacity();
        // As a Produce request: the body is a slice after the header.
        let frame = big.freeze();
        let body = frame.slice(30..);
        drop(frame);
        pool.give(body.try_into_mut().unwrap());
        let again = pool.take_pooled(POOLED_FRAME_BYTES_MIN).unwrap();
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again.capacity(), cap);
        assert!(again.is_empty());
        assert_eq!(pool.inner.lock().bytes, 0);
    }
}
