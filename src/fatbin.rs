//! CUDA code in a file, without CUDA: which GPU architectures a shared library, executable,
//! object, fatbin or cubin carries machine code (SASS, `sm_XX`) or PTX (`compute_XX`) for.
//!
//! A host ELF keeps its device code in the `.nv_fatbin` section: fat binaries one after the
//! other, each a 16-byte header (magic `0xBA55ED50`, version, header size, size of its entries)
//! and entries, each with its own header (kind 1 = PTX, 2 = ELF; payload size; the arch number
//! at byte 28; flags at byte 40: `0x100000` arch-specific `a`, `0x200000` family `f`). Only the
//! headers are read (payloads, often compressed, are skipped), at most [`MAX_IMAGES`] of them,
//! each bounded by the section: a truncated or hostile section is an error that says where.
//! A bare cubin (an ELF for `EM_CUDA`) names its arch in `e_flags`.
//! `cuobjdump --list-elf --list-ptx` lists the same images (tests/it/sm120_sass.rs compares).

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use object::read::ReadCache;
use object::{Object, ObjectSection};

const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const FATBIN_HEADER: u64 = 16;
/// An entry header's fields kiln reads end at byte 48 (flags: bytes 40..48).
const ENTRY_MIN_HEADER: u32 = 48;
/// No entry header nvcc writes is near this; a bigger one is garbage.
const ENTRY_MAX_HEADER: u32 = 4096;
/// More images than any library ships (libtorch_cuda: thousands); past it the file is refused.
pub(crate) const MAX_IMAGES: usize = 1 << 20;
const EM_CUDA: u16 = 190;
const FLAG_ARCH_SPECIFIC: u64 = 0x10_0000;
const FLAG_FAMILY: u64 = 0x20_0000;

/// What one embedded image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// Machine code (a cubin): runs as is.
    Sass,
    /// PTX: the driver compiles it at first use, for its arch or a newer one.
    Ptx,
}

/// One image: its kind, arch number (`120` for SM 12.0) and suffix (`a`, `f`, or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Image {
    pub kind: Kind,
    pub arch: u32,
    pub suffix: Option<char>,
}

impl Image {
    /// (major, minor) compute capability: 120 → (12, 0).
    pub(crate) fn cc(&self) -> (u32, u32) {
        (self.arch / 10, self.arch % 10)
    }

    /// Whether this image runs on a GPU of compute capability `cc`: SASS of the same major and
    /// a minor not above it (`sm_120` on 12.1; `a` only on its own arch), PTX of any arch not
    /// above it (JIT-compiled).
    pub(crate) fn runs_on(&self, cc: (u32, u32)) -> bool {
        match self.kind {
            Kind::Sass if self.suffix == Some('a') => self.cc() == cc,
            Kind::Sass => self.cc().0 == cc.0 && self.cc().1 <= cc.1,
            Kind::Ptx => self.cc() <= cc,
        }
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = match self.kind {
            Kind::Sass => "sm",
            Kind::Ptx => "compute",
        };
        write!(f, "{prefix}_{}", self.arch)?;
        if let Some(s) = self.suffix {
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

/// Why a file's CUDA code could not be listed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FatbinError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not an ELF file or fatbin kiln can read: {why}")]
    NotElf { path: PathBuf, why: String },
    #[error("{path}: malformed fatbin at byte {offset} of its device code: {what}")]
    Malformed {
        path: PathBuf,
        offset: u64,
        what: String,
    },
}

impl FatbinError {
    pub(crate) fn hint(&self) -> &'static str {
        match self {
            FatbinError::Io { .. } => "check that the file exists and is readable",
            _ => "the file is truncated or not what it claims to be: rebuild or reinstall it; `cuobjdump --list-elf --list-ptx FILE` shows what CUDA's own tool reads of it",
        }
    }
}

/// The images a file carries, in file order (duplicates kept: a library repeats an arch per
/// translation unit; see [`archs`]). A host ELF without `.nv_fatbin` carries none.
pub(crate) fn read(path: &Path) -> Result<Vec<Image>, FatbinError> {
    let io = |source| FatbinError::Io {
        path: path.to_path_buf(),
        source,
    };
    // A file kiln did not write: opened without blocking (a FIFO), read only if regular.
    let file = crate::bounded::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(FatbinError::NotElf {
            path: path.to_path_buf(),
            why: "not a regular file".into(),
        });
    }
    let len = meta.len();
    let mut head = [0u8; 64];
    let got = read_upto(&file, 0, &mut head).map_err(io)?;
    let head = &head[..got];
    if head.len() >= 4 && u32_at(head, 0) == FATBIN_MAGIC {
        return parse(&file, 0, len, path);
    }
    if head.len() < 52 || &head[..4] != b"\x7fELF" {
        return Err(FatbinError::NotElf {
            path: path.to_path_buf(),
            why: "no ELF or fatbin magic".into(),
        });
    }
    if head[4] == 2 && head[5] == 1 && u16::from_le_bytes([head[18], head[19]]) == EM_CUDA {
        return Ok(vec![cubin_image(head)]);
    }
    let cache = ReadCache::new(&file);
    let elf = object::File::parse(&cache).map_err(|e| FatbinError::NotElf {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let Some(section) = elf.section_by_name(".nv_fatbin") else {
        return Ok(Vec::new());
    };
    let Some((offset, size)) = section.file_range() else {
        return Ok(Vec::new());
    };
    let end = offset.checked_add(size).filter(|e| *e <= len).ok_or_else(|| {
        FatbinError::Malformed {
            path: path.to_path_buf(),
            offset: 0,
            what: format!("the .nv_fatbin section ({size} bytes at {offset}) runs past the end of the file ({len} bytes)"),
        }
    })?;
    parse(&file, offset, end, path)
}

/// A bare cubin's arch: `e_flags` bits 8..16 from ELF ABI version 8 (CUDA 12.8+), else bits
/// 0..8. Its suffix is not in `e_flags` (cuobjdump reads it elsewhere): none is given.
fn cubin_image(head: &[u8]) -> Image {
    let flags = u32_at(head, 48);
    let arch = if head[8] >= 8 {
        (flags >> 8) & 0xff
    } else {
        flags & 0xff
    };
    Image {
        kind: Kind::Sass,
        arch,
        suffix: None,
    }
}

/// The fatbins in `[start, end)` of `src`, read header by header.
fn parse(src: &impl FileExt, start: u64, end: u64, path: &Path) -> Result<Vec<Image>, FatbinError> {
    let bad = |offset: u64, what: String| FatbinError::Malformed {
        path: path.to_path_buf(),
        offset: offset - start,
        what,
    };
    let read = |offset: u64, buf: &mut [u8]| -> Result<(), FatbinError> {
        src.read_exact_at(buf, offset).map_err(|e| FatbinError::Io {
            path: path.to_path_buf(),
            source: e,
        })
    };
    let mut images = Vec::new();
    let mut at = start;
    while at < end {
        let mut header = [0u8; FATBIN_HEADER as usize];
        if end - at < FATBIN_HEADER {
            // The section's tail: alignment padding is zeros, anything else is a cut header.
            let mut rest = vec![0u8; (end - at) as usize];
            read(at, &mut rest)?;
            if rest.iter().all(|b| *b == 0) {
                break;
            }
            return Err(bad(
                at,
                format!("a fatbin header cut short ({} of 16 bytes)", rest.len()),
            ));
        }
        read(at, &mut header)?;
        let magic = u32_at(&header, 0);
        if magic == 0 && header[..8].iter().all(|b| *b == 0) {
            at += 8; // padding between fatbins
            continue;
        }
        if magic != FATBIN_MAGIC {
            return Err(bad(
                at,
                format!("expected the fatbin magic 0xBA55ED50, found {magic:#010x}"),
            ));
        }
        let header_size = u64::from(u16::from_le_bytes([header[6], header[7]]));
        let entries_size = u64_at(&header, 8);
        if header_size < FATBIN_HEADER {
            return Err(bad(
                at,
                format!("a fatbin header of {header_size} bytes (at least 16)"),
            ));
        }
        let entries_end = at
            .checked_add(header_size)
            .and_then(|e| e.checked_add(entries_size))
            .filter(|e| *e <= end)
            .ok_or_else(|| {
                bad(at, format!("a fatbin of {entries_size} bytes runs past the end of the section ({} bytes)", end - start))
            })?;
        let mut entry = at + header_size;
        while entry < entries_end {
            if images.len() >= MAX_IMAGES {
                return Err(bad(entry, format!("more than {MAX_IMAGES} images")));
            }
            let mut eh = [0u8; ENTRY_MIN_HEADER as usize];
            if entries_end - entry < u64::from(ENTRY_MIN_HEADER) {
                return Err(bad(entry, "an entry header cut short".into()));
            }
            read(entry, &mut eh)?;
            let kind = match u16::from_le_bytes([eh[0], eh[1]]) {
                1 => Some(Kind::Ptx),
                2 => Some(Kind::Sass),
                _ => None, // LTO IR and kinds kiln does not know: skipped by their sizes
            };
            let eh_size = u32_at(&eh, 4);
            if !(ENTRY_MIN_HEADER..=ENTRY_MAX_HEADER).contains(&eh_size) {
                return Err(bad(
                    entry,
                    format!("an entry header of {eh_size} bytes (48 to 4096)"),
                ));
            }
            let payload = u64_at(&eh, 8);
            let next = entry
                .checked_add(u64::from(eh_size))
                .and_then(|e| e.checked_add(payload))
                .filter(|e| *e <= entries_end)
                .ok_or_else(|| {
                    bad(
                        entry,
                        format!("an entry of {payload} bytes runs past the end of its fatbin"),
                    )
                })?;
            if let Some(kind) = kind {
                let flags = u64_at(&eh, 40);
                let suffix = if flags & FLAG_ARCH_SPECIFIC != 0 {
                    Some('a')
                } else if flags & FLAG_FAMILY != 0 {
                    Some('f')
                } else {
                    None
                };
                images.push(Image {
                    kind,
                    arch: u32_at(&eh, 28),
                    suffix,
                });
            }
            entry = next;
        }
        at = entries_end;
    }
    Ok(images)
}

/// Each distinct image once, SASS first, by arch.
pub(crate) fn archs(images: &[Image]) -> Vec<Image> {
    let mut out: Vec<Image> = images.to_vec();
    out.sort();
    out.dedup();
    out
}

/// Reads up to `buf.len()` bytes at `offset` (fewer at the end of the file).
fn read_upto(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO where a library should be (planted in site-packages) is refused at once: the
    /// open does not wait for a writer.
    #[test]
    fn a_fifo_in_place_of_a_library_is_refused_never_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libtorch_cuda.so");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    /// A fatbin with one entry per (kind, arch, flags), payloads of `payload` zero bytes.
    fn fatbin(entries: &[(u16, u32, u64)], payload: u64) -> Vec<u8> {
        let mut body = Vec::new();
        for (kind, arch, flags) in entries {
            let mut eh = vec![0u8; 64];
            eh[0..2].copy_from_slice(&kind.to_le_bytes());
            eh[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            eh[4..8].copy_from_slice(&64u32.to_le_bytes());
            eh[8..16].copy_from_slice(&payload.to_le_bytes());
            eh[28..32].copy_from_slice(&arch.to_le_bytes());
            eh[40..48].copy_from_slice(&flags.to_le_bytes());
            body.extend(eh);
            body.extend(std::iter::repeat_n(0u8, payload as usize));
        }
        let mut out = Vec::new();
        out.extend(FATBIN_MAGIC.to_le_bytes());
        out.extend(1u16.to_le_bytes());
        out.extend(16u16.to_le_bytes());
        out.extend((body.len() as u64).to_le_bytes());
        out.extend(body);
        out
    }

    fn parse_bytes(bytes: &[u8]) -> Result<Vec<Image>, FatbinError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.fatbin");
        std::fs::write(&path, bytes).unwrap();
        read(&path)
    }

    #[test]
    fn entries_give_kind_arch_and_suffix() {
        let bytes = fatbin(
            &[(2, 90, 0x10_0011), (1, 120, 0x8011), (2, 120, 0x120_0011)],
            8,
        );
        let names: Vec<String> = parse_bytes(&bytes)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(names, ["sm_90a", "compute_120", "sm_120f"]);
    }

    #[test]
    fn hostile_sizes_are_errors_that_say_where() {
        let good = fatbin(&[(2, 90, 0), (2, 120, 0)], 8);
        // Cut anywhere inside: an error, never a panic, never a read past the file.
        for cut in 1..good.len() {
            let r = parse_bytes(&good[..cut]);
            assert!(r.is_err(), "cut at {cut} read as {r:?}");
        }
        // A fatbin claiming 2^64-1 bytes of entries.
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = parse_bytes(&huge).unwrap_err().to_string();
        assert!(
            e.contains("at byte 0") && e.contains("runs past the end"),
            "{e}"
        );
        // An entry claiming a payload past its fatbin.
        let mut entry = good.clone();
        entry[16 + 8..16 + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let e = parse_bytes(&entry).unwrap_err().to_string();
        assert!(e.contains("at byte 16") && e.contains("an entry of"), "{e}");
        // An entry header of 4 GiB.
        let mut header = good.clone();
        header[16 + 4..16 + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = parse_bytes(&header).unwrap_err().to_string();
        assert!(e.contains("entry header of 4294967295 bytes"), "{e}");
        // A second fatbin whose magic is wrong.
        let mut two = good.clone();
        two.extend_from_slice(&[0xAB; 16]);
        let e = parse_bytes(&two).unwrap_err().to_string();
        assert!(
            e.contains(&format!("at byte {}", good.len())) && e.contains("0xabababab"),
            "{e}"
        );
        // Zero padding after a fatbin is no error.
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 12]);
        assert_eq!(parse_bytes(&padded).unwrap().len(), 2);
    }

    #[test]
    fn runs_on_follows_the_compatibility_rules() {
        let img = |kind, arch, suffix| Image { kind, arch, suffix };
        assert!(img(Kind::Sass, 120, None).runs_on((12, 1)));
        assert!(!img(Kind::Sass, 120, None).runs_on((9, 0)));
        assert!(!img(Kind::Sass, 90, None).runs_on((12, 0)));
        assert!(img(Kind::Sass, 90, Some('a')).runs_on((9, 0)));
        assert!(!img(Kind::Sass, 100, Some('a')).runs_on((10, 3)));
        assert!(img(Kind::Sass, 100, Some('f')).runs_on((10, 3)));
        assert!(img(Kind::Ptx, 90, None).runs_on((12, 0)));
        assert!(!img(Kind::Ptx, 120, None).runs_on((9, 0)));
    }

    #[test]
    fn a_file_that_is_neither_elf_nor_fatbin_is_refused() {
        let e = parse_bytes(b"#!/bin/sh\necho hi\n").unwrap_err();
        assert!(matches!(e, FatbinError::NotElf { .. }), "{e}");
    }
}
