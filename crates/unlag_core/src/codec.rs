//! A tiny byte codec for compact wire formats: little-endian integers and zigzag varints.
//!
//! Messages sent every tick (moves) are packed by hand so that a move with three redundant
//! copies fits in a few dozen bytes; reading never panics, whatever the bytes.

/// Why bytes could not be decoded.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes ended before the value did.
    #[error("truncated")]
    Truncated,
    /// A value is out of its allowed range.
    #[error("invalid value")]
    Invalid,
    /// Bytes were left over after the last value.
    #[error("trailing bytes")]
    Trailing,
}

/// Appends values to a byte vector.
#[derive(Debug, Default)]
pub struct ByteWriter {
    bytes: Vec<u8>,
}

impl ByteWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes the writer and returns every byte written, in order (no length prefix or
    /// header is added).
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Overwrites the byte written at `at` (a place [`len`](Self::len) gave before it was
    /// written: a header set once what follows it is known). Panics past the end, a bug of
    /// the writer's caller.
    pub fn set_u8(&mut self, at: usize, v: u8) {
        self.bytes[at] = v;
    }

    /// Writes one byte.
    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    /// Writes a signed byte.
    pub fn i8(&mut self, v: i8) {
        self.bytes.push(v as u8);
    }

    /// Writes a little-endian `u16`.
    pub fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// Writes a little-endian `i16`.
    pub fn i16(&mut self, v: i16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    /// Writes an unsigned LEB128 varint (1 byte below 128).
    pub fn varint(&mut self, mut v: u64) {
        loop {
            let byte = (v & 0x7F) as u8;
            v >>= 7;
            if v == 0 {
                self.bytes.push(byte);
                return;
            }
            self.bytes.push(byte | 0x80);
        }
    }

    /// Writes a signed zigzag varint (1 byte for -64..=63).
    pub fn zigzag(&mut self, v: i32) {
        self.varint(u64::from(zigzag32(v)));
    }

    /// Writes a signed 64-bit zigzag varint (1 byte for -64..=63, 10 at most).
    pub fn zigzag64(&mut self, v: i64) {
        self.varint(zigzag64(v));
    }

    /// Writes an `f32`'s bits, little-endian (every value, NaN payloads included, reads back
    /// bit for bit).
    pub fn f32(&mut self, v: f32) {
        self.bytes.extend_from_slice(&v.to_bits().to_le_bytes());
    }

    /// Writes an entity (its `index` and `generation`) as [`entity_head`] says: 2 bytes for
    /// one of the first 8192 indices never reused, a third or more for a generation.
    pub fn entity(&mut self, index: u32, generation: u32) {
        self.varint(entity_head(index, generation));
        if generation != 0 {
            self.varint(u64::from(generation));
        }
    }
}

/// The first varint of an entity on the wire: its index shifted up by one, the low bit set
/// when a second varint, the generation, follows (only when it is not 0).
///
/// A Bevy entity's own serde form is a `u64` of its bits, whose index half is stored inverted
/// (`u32::MAX − index`, the niche of a non-max integer): postcard spends 5 bytes on every
/// entity, up to 10 as its slot's generation grows. Entities that were never reused (a
/// match's characters, mostly) come to 1 byte below index 64 and 2 below 8192 here.
pub fn entity_head(index: u32, generation: u32) -> u64 {
    (u64::from(index) << 1) | u64::from(generation != 0)
}

/// The index an [`entity_head`] holds, and whether a generation follows it; `Invalid` for an
/// index no entity can have (`u32::MAX`, or beyond 32 bits).
pub fn entity_from_head(head: u64) -> Result<(u32, bool), DecodeError> {
    let index = u32::try_from(head >> 1).map_err(|_| DecodeError::Invalid)?;
    if index == u32::MAX {
        return Err(DecodeError::Invalid);
    }
    Ok((index, head & 1 != 0))
}

/// The generation that follows an [`entity_head`] with its low bit set: `Invalid` beyond 32
/// bits, or 0 (written only when not 0: one encoding per entity).
pub fn entity_generation(value: u64) -> Result<u32, DecodeError> {
    match u32::try_from(value) {
        Ok(0) | Err(_) => Err(DecodeError::Invalid),
        Ok(generation) => Ok(generation),
    }
}

/// `v` zigzagged: 0, -1, 1, -2, ... as 0, 1, 2, 3, ... (small magnitudes small either sign).
pub fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

/// The `i32` a [`zigzag32`] holds.
pub fn unzigzag32(z: u32) -> i32 {
    ((z >> 1) as i32) ^ -((z & 1) as i32)
}

/// [`zigzag32`] for `i64`.
pub fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The `i64` a [`zigzag64`] holds.
pub fn unzigzag64(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Reads values from a byte slice, failing cleanly when it runs out.
#[derive(Debug)]
pub struct ByteReader<'a> {
    bytes: &'a [u8],
}

impl<'a> ByteReader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing)
        }
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or(DecodeError::Truncated)?;
        self.bytes = rest;
        Ok(*head)
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    /// Reads a signed byte.
    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(self.take::<1>()?[0] as i8)
    }

    /// Reads a little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take::<2>()?))
    }

    /// Reads a little-endian `i16`.
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(i16::from_le_bytes(self.take::<2>()?))
    }

    /// Reads an unsigned LEB128 varint of at most 10 bytes.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let byte = self.u8()?;
            if i == 9 && byte > 1 {
                return Err(DecodeError::Invalid);
            }
            v |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Invalid)
    }

    /// Reads a signed zigzag varint that must fit an `i32`.
    pub fn zigzag(&mut self) -> Result<i32, DecodeError> {
        let v = u32::try_from(self.varint()?).map_err(|_| DecodeError::Invalid)?;
        Ok(unzigzag32(v))
    }

    /// Reads a signed 64-bit zigzag varint.
    pub fn zigzag64(&mut self) -> Result<i64, DecodeError> {
        Ok(unzigzag64(self.varint()?))
    }

    /// Reads an `f32` written by [`ByteWriter::f32`] (any bits: the caller checks finiteness
    /// where it matters).
    pub fn f32(&mut self) -> Result<f32, DecodeError> {
        Ok(f32::from_bits(u32::from_le_bytes(self.take::<4>()?)))
    }

    /// Reads an entity written by [`ByteWriter::entity`]: its (index, generation).
    pub fn entity(&mut self) -> Result<(u32, u32), DecodeError> {
        let (index, reused) = entity_from_head(self.varint()?)?;
        let generation = if reused {
            entity_generation(self.varint()?)?
        } else {
            0
        };
        Ok((index, generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SplitMix64;

    #[test]
    fn entities_take_two_bytes_unless_reused_and_every_one_reads_back() {
        let size = |index, generation| {
            let mut w = ByteWriter::new();
            w.entity(index, generation);
            w.len()
        };
        assert_eq!(size(0, 0), 1);
        assert_eq!(size(63, 0), 1);
        assert_eq!(size(274, 0), 2);
        assert_eq!(size(8191, 0), 2);
        assert_eq!(size(8192, 0), 3);
        assert_eq!(size(274, 1), 3);
        assert_eq!(size(274, 200), 4);
        assert_eq!(size(u32::MAX - 1, u32::MAX), 10);
        let mut rng = SplitMix64::new(7);
        let mut cases = vec![(0, 0), (u32::MAX - 1, 0), (u32::MAX - 1, u32::MAX), (5, 1)];
        for _ in 0..1000 {
            let index = (rng.next_u64() as u32).min(u32::MAX - 1) >> (rng.next_u64() % 32);
            let generation = (rng.next_u64() as u32) >> (rng.next_u64() % 33).min(31);
            cases.push((index, generation));
        }
        for (index, generation) in cases {
            let mut w = ByteWriter::new();
            w.entity(index, generation);
            let bytes = w.into_bytes();
            let mut r = ByteReader::new(&bytes);
            assert_eq!(r.entity(), Ok((index, generation)));
            assert_eq!(r.finish(), Ok(()));
        }
    }

    #[test]
    fn entity_bytes_no_entity_can_have_are_refused() {
        let read = |values: &[u64]| {
            let mut w = ByteWriter::new();
            for &v in values {
                w.varint(v);
            }
            let bytes = w.into_bytes();
            ByteReader::new(&bytes).entity()
        };
        // The index u32::MAX (Bevy's niche), an index beyond 32 bits.
        assert_eq!(read(&[u64::from(u32::MAX) << 1]), Err(DecodeError::Invalid));
        assert_eq!(read(&[1 << 33]), Err(DecodeError::Invalid));
        assert_eq!(read(&[u64::MAX]), Err(DecodeError::Invalid));
        // A generation flagged but 0 (a second encoding of generation 0), or beyond 32 bits.
        assert_eq!(read(&[11, 0]), Err(DecodeError::Invalid));
        assert_eq!(read(&[11, 1 << 32]), Err(DecodeError::Invalid));
        // A generation flagged and missing.
        assert_eq!(read(&[11]), Err(DecodeError::Truncated));
        assert_eq!(read(&[11, 3]), Ok((5, 3)));
    }

    #[test]
    fn round_trip() {
        let mut w = ByteWriter::new();
        w.u8(7);
        w.i8(-3);
        w.u16(65_000);
        w.i16(-32_000);
        for v in [0i32, 1, -1, 63, -64, 64, i32::MAX, i32::MIN] {
            w.zigzag(v);
        }
        w.varint(u64::MAX);
        for v in [0i64, -1, 63, -64, i64::MAX, i64::MIN] {
            w.zigzag64(v);
        }
        w.f32(-1.5);
        w.f32(f32::from_bits(0x7FC0_0001));
        let bytes = w.into_bytes();
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.i8(), Ok(-3));
        assert_eq!(r.u16(), Ok(65_000));
        assert_eq!(r.i16(), Ok(-32_000));
        for v in [0i32, 1, -1, 63, -64, 64, i32::MAX, i32::MIN] {
            assert_eq!(r.zigzag(), Ok(v));
        }
        assert_eq!(r.varint(), Ok(u64::MAX));
        for v in [0i64, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(r.zigzag64(), Ok(v));
        }
        assert_eq!(r.f32(), Ok(-1.5));
        assert_eq!(r.f32().map(f32::to_bits), Ok(0x7FC0_0001));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn small_values_are_one_byte() {
        let mut w = ByteWriter::new();
        w.zigzag(-64);
        w.zigzag(63);
        assert_eq!(w.into_bytes().len(), 2);
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..10_000 {
            let len = (rng.next_u64() % 16) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let mut r = ByteReader::new(&bytes);
            while r.remaining() > 0 {
                if r.zigzag().is_err() {
                    break;
                }
            }
        }
        assert_eq!(
            ByteReader::new(&[0x80; 11]).varint(),
            Err(DecodeError::Invalid)
        );
        assert_eq!(
            ByteReader::new(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F]).zigzag(),
            Err(DecodeError::Invalid)
        );
        assert_eq!(ByteReader::new(&[1]).u16(), Err(DecodeError::Truncated));
    }
}
