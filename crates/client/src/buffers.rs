//! Buffer reuse for a connection's large frames. A fresh allocation of a few hundred KiB (a
//! Produce request) or tens of MiB (a Fetch response) costs a page fault per 4 KiB page when it
//! is first written and an munmap when it is freed; reusing finished frames' buffers avoids both.
//!
//! Request frames come back once the writer has sent them. Response frames are shared with the
//! caller (records are slices of them), so the pool keeps a handle to recent ones and reuses a
//! buffer only once every other handle is gone.
use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;

/// Frames smaller than this are allocated normally (the allocator reuses small blocks well).
pub const POOLED_FRAME_BYTES_MIN: usize = 64 * 1024;
/// Largest buffer kept for reuse.
const POOLED_BUFFER_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Free buffers kept, in bytes of capacity.
const FREE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Response frames watched for release, by count and by bytes (the oldest is let go first; a
/// watched frame the caller has dropped stays allocated until it is reused or let go).
const WATCHED_FRAMES_MAX: usize = 4;
const WATCHED_BYTES_MAX: usize = 64 * 1024 * 1024;

#[derive(Debug, Default)]
pub struct BufferPool {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    free: Vec<BytesMut>,
    free_bytes: usize,
    /// Response frames handed out; reusable once we hold the last handle.
    watched: VecDeque<Bytes>,
    watched_bytes: usize,
}

impl Inner {
    fn put(&mut self, mut buf: BytesMut) {
        buf.clear();
        let cap = buf.capacity();
        if (POOLED_FRAME_BYTES_MIN..=POOLED_BUFFER_BYTES_MAX).contains(&cap)
            && self.free_bytes + cap <= FREE_BYTES_MAX
        {
            self.free_bytes += cap;
            self.free.push(buf);
        }
    }

    /// Moves released watched frames to the free list.
    fn collect_released(&mut self) {
        for _ in 0..self.watched.len() {
            let Some(b) = self.watched.pop_front() else {
                break;
            };
            let len = b.len();
            match b.try_into_mut() {
                Ok(buf) => {
                    self.watched_bytes -= len;
                    self.put(buf);
                }
                Err(b) => self.watched.push_back(b),
            }
        }
    }
}

impl BufferPool {
    /// An empty buffer with room for `len` bytes: a reused one if one is big enough.
    pub fn take(&self, len: usize) -> BytesMut {
        if len >= POOLED_FRAME_BYTES_MIN {
            let mut p = self.inner.lock();
            p.collect_released();
            if let Some(i) = p.free.iter().position(|b| b.capacity() >= len) {
                let buf = p.free.swap_remove(i);
                p.free_bytes -= buf.capacity();
                return buf;
            }
        }
        BytesMut::with_capacity(len)
    }

    /// Returns a frame nobody else holds (a request that has been written).
    pub fn give(&self, frame: Bytes) {
        if frame.len() < POOLED_FRAME_BYTES_MIN {
            return;
        }
        if let Ok(buf) = frame.try_into_mut() {
            self.inner.lock().put(buf);
        }
    }

    /// Watches a frame handed to a caller; its buffer is reused once the caller drops it.
    pub fn watch(&self, frame: &Bytes) {
        if !(POOLED_FRAME_BYTES_MIN..=POOLED_BUFFER_BYTES_MAX).contains(&frame.len()) {
            return;
        }
        let mut p = self.inner.lock();
        while !p.watched.is_empty()
            && (p.watched.len() >= WATCHED_FRAMES_MAX
                || p.watched_bytes + frame.len() > WATCHED_BYTES_MAX)
        {
            if let Some(old) = p.watched.pop_front() {
                p.watched_bytes -= old.len();
            }
        }
        p.watched_bytes += frame.len();
        p.watched.push_back(frame.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_and_released_frames_are_reused() {
        let pool = BufferPool::default();
        let mut a = pool.take(POOLED_FRAME_BYTES_MIN);
        a.extend_from_slice(&vec![1u8; POOLED_FRAME_BYTES_MIN]);
        let ptr = a.as_ptr();
        pool.give(a.freeze());
        let b = pool.take(POOLED_FRAME_BYTES_MIN);
        assert_eq!(b.as_ptr(), ptr);
        assert!(b.is_empty());

        let mut r = pool.take(POOLED_FRAME_BYTES_MIN);
        r.extend_from_slice(&vec![2u8; POOLED_FRAME_BYTES_MIN]);
        let rptr = r.as_ptr();
        let frame = r.freeze();
        pool.watch(&frame);
        let slice = frame.slice(10..20);
        drop(frame);
        // Still held through `slice`: not reused.
        assert_ne!(pool.take(POOLED_FRAME_BYTES_MIN).as_ptr(), rptr);
        drop(slice);
        assert_eq!(pool.take(POOLED_FRAME_BYTES_MIN).as_ptr(), rptr);
    }

    #[test]
    fn watched_frames_are_bounded() {
        let pool = BufferPool::default();
        let frames: Vec<Bytes> = (0..WATCHED_FRAMES_MAX + 2)
            .map(|_| Bytes::from(vec![0u8; POOLED_FRAME_BYTES_MIN]))
            .collect();
        for f in &frames {
            pool.watch(f);
        }
        let p = pool.inner.lock();
        assert_eq!(p.watched.len(), WATCHED_FRAMES_MAX);
        assert_eq!(p.watched_bytes, WATCHED_FRAMES_MAX * POOLED_FRAME_BYTES_MIN);
    }

    #[test]
    fn small_frames_are_not_pooled() {
        let pool = BufferPool::default();
        pool.give(Bytes::from(vec![0u8; 100]));
        assert!(pool.inner.lock().free.is_empty());
    }
}
