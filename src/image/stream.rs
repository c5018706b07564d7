//! A layer's bytes on their way into the archive file: written in 1 MiB chunks while a second
//! thread hashes them (sha256 runs beside the copy instead of after it), with the kernel asked
//! to start writing back every 64 MiB so the closing `fsync` finds little left to do.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

const CHUNK: usize = 1 << 20;
const WRITEBACK_EVERY: u64 = 64 << 20;

pub(super) struct HashingStream<'a> {
    out: &'a mut BufWriter<File>,
    chunk: Vec<u8>,
    /// Chunks to hash; hashed chunks come back on `free` to be filled again.
    to_hash: Option<SyncSender<Vec<u8>>>,
    free: Receiver<Vec<u8>>,
    hasher: Option<JoinHandle<Sha256>>,
    written: u64,
    since_writeback: u64,
}

impl<'a> HashingStream<'a> {
    pub(super) fn new(out: &'a mut BufWriter<File>) -> Self {
        let (to_hash, work) = mpsc::sync_channel::<Vec<u8>>(4);
        let (give_back, free) = mpsc::channel::<Vec<u8>>();
        let hasher = std::thread::spawn(move || {
            let mut h = Sha256::new();
            for chunk in work {
                h.update(&chunk);
                let _ = give_back.send(chunk);
            }
            h
        });
        HashingStream {
            out,
            chunk: Vec::with_capacity(CHUNK),
            to_hash: Some(to_hash),
            free,
            hasher: Some(hasher),
            written: 0,
            since_writeback: 0,
        }
    }

    fn ship(&mut self) -> io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        self.out.write_all(&self.chunk)?;
        self.since_writeback += self.chunk.len() as u64;
        if self.since_writeback >= WRITEBACK_EVERY {
            self.since_writeback = 0;
            self.out.flush()?;
            start_writeback(self.out.get_ref());
        }
        let next = self
            .free
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK));
        let full = std::mem::replace(&mut self.chunk, next);
        self.chunk.clear();
        let sent = self.to_hash.as_ref().map(|tx| tx.send(full));
        match sent {
            Some(Ok(())) => Ok(()),
            _ => Err(io::Error::other("the hashing thread stopped")),
        }
    }

    /// The hex sha256 and the byte count of everything written.
    pub(super) fn finish(mut self) -> io::Result<(String, u64)> {
        self.ship()?;
        drop(self.to_hash.take());
        let h = self
            .hasher
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| io::Error::other("the hashing thread panicked"))?;
        Ok((crate::hash::hex(&h.finalize()), self.written))
    }
}

impl Write for HashingStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = CHUNK - self.chunk.len();
        let n = buf.len().min(room);
        self.chunk.extend_from_slice(&buf[..n]);
        self.written += n as u64;
        if self.chunk.len() == CHUNK {
            self.ship()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for HashingStream<'_> {
    fn drop(&mut self) {
        drop(self.to_hash.take());
        if let Some(h) = self.hasher.take() {
            let _ = h.join();
        }
    }
}

/// Ask the kernel to start writing `file`'s dirty pages back now (no waiting).
fn start_writeback(file: &File) {
    // SAFETY: a valid descriptor; SYNC_FILE_RANGE_WRITE only starts I/O on its pages.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_writes_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut out = BufWriter::new(File::create(&path).unwrap());
        let data: Vec<u8> = (0..(3 * CHUNK + 12345))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut s = HashingStream::new(&mut out);
        for piece in data.chunks(100_003) {
            s.write_all(piece).unwrap();
        }
        let (hex, n) = s.finish().unwrap();
        out.flush().unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(hex, crate::hash::sha256_bytes(&data));
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }
}
