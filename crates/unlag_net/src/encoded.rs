//! Values encoded once for every client that is sent them.

use crate::protocol::MessageWriter;
use core::marker::PhantomData;
use serde::Serialize;
use serde::de::DeserializeOwned;
use smallvec::SmallVec;
use std::sync::Arc;

/// The encoding of no values, that of an [`EncodedRuns`] made empty.
static EMPTY: Encoding = Encoding {
    bytes: Vec::new(),
    ends: Vec::new(),
};

/// A set of values encoded once, back to back.
#[derive(Debug, Default, PartialEq)]
struct Encoding {
    /// postcard's bytes of every value.
    bytes: Vec<u8>,
    /// Where each value's bytes end.
    ends: Vec<u32>,
}

/// Values of type `T` encoded once for every client that is sent them, and which of them one
/// message carries: a server sending the same few hundred values (a tick's proxy states, a
/// frame's shots) to hundreds of clients encodes each once, and each client's message copies
/// runs of those bytes into lightyear's buffer, instead of encoding every value again for
/// every client (and once more to count its size). The bytes are postcard's, so a message
/// that writes them where its values would go is on the wire as if it held the values.
///
/// Cloning one (lightyear clones every message it maps) copies its runs, not the encoding;
/// making one that carries none ([`none`](Self::none), `Default`) allocates nothing (a server
/// makes one a client a tick).
pub struct EncodedRuns<T> {
    /// The shared encoding; `None`: none (the empty one, [`EMPTY`]).
    shared: Option<Arc<Encoding>>,
    /// The byte ranges this message carries, in order: the first few in place (a message's
    /// values are mostly one run or a few, and a server makes, and lightyear clones, one a
    /// client a tick: a vector was two allocations each).
    runs: SmallVec<[(u32, u32); 3]>,
    /// How many values they hold.
    count: usize,
    _values: PhantomData<fn() -> T>,
}

impl<T> Clone for EncodedRuns<T> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            runs: self.runs.clone(),
            count: self.count,
            _values: PhantomData,
        }
    }
}

impl<T> Default for EncodedRuns<T> {
    fn default() -> Self {
        Self {
            shared: None,
            runs: SmallVec::new(),
            count: 0,
            _values: PhantomData,
        }
    }
}

impl<T> core::fmt::Debug for EncodedRuns<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EncodedRuns")
            .field("values", &self.count)
            .field("bytes", &self.byte_len())
            .finish()
    }
}

/// Equal when they carry the same bytes (whatever encoding they share them from).
impl<T> PartialEq for EncodedRuns<T> {
    fn eq(&self, other: &Self) -> bool {
        self.count == other.count && self.bytes().eq(other.bytes())
    }
}

impl<T: Serialize> EncodedRuns<T> {
    /// Encodes `values` once; a message then carries any of them by their index
    /// ([`none`](Self::none), [`push`](Self::push)).
    pub fn encode<'a>(values: impl IntoIterator<Item = &'a T>) -> Self
    where
        T: 'a,
    {
        let mut encoding = Encoding::default();
        for value in values {
            encoding.bytes = postcard::to_extend(value, core::mem::take(&mut encoding.bytes))
                .expect("postcard writes any value serde can write");
            encoding.ends.push(encoding.bytes.len() as u32);
        }
        Self {
            shared: Some(Arc::new(encoding)),
            ..Self::default()
        }
    }
}

impl<T> EncodedRuns<T> {
    /// The encoding it shares.
    fn encoding(&self) -> &Encoding {
        self.shared.as_deref().unwrap_or(&EMPTY)
    }

    /// None of the values of the same encoding (cheap: the encoding is shared).
    pub fn none(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            ..Self::default()
        }
    }

    /// Carries the value at `index` of the encoding too (after those it carries); an index
    /// past the encoding is ignored.
    pub fn push(&mut self, index: usize) {
        let ends = &self.encoding().ends;
        let Some(&end) = ends.get(index) else {
            return;
        };
        let start = index.checked_sub(1).map_or(0, |i| ends[i]);
        match self.runs.last_mut() {
            Some(run) if run.1 == start => run.1 = end,
            _ => self.runs.push((start, end)),
        }
        self.count += 1;
    }

    /// How many values it carries.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it carries none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The bytes of the values it carries.
    pub fn byte_len(&self) -> usize {
        self.runs.iter().map(|(a, b)| (b - a) as usize).sum()
    }

    /// The bytes of the values it carries, run by run.
    fn bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.runs.iter().flat_map(|&(a, b)| {
            self.encoding().bytes[a as usize..b as usize]
                .iter()
                .copied()
        })
    }

    /// Appends the bytes of the values it carries to lightyear's buffer.
    pub fn write(&self, writer: &mut MessageWriter) {
        for &(a, b) in self.runs.iter() {
            writer.extend_from_slice(&self.encoding().bytes[a as usize..b as usize]);
        }
    }
}

impl<T: DeserializeOwned> EncodedRuns<T> {
    /// The values it carries, decoded.
    pub fn decode(&self) -> impl Iterator<Item = T> + '_ {
        self.runs
            .iter()
            .flat_map(|&(a, b)| decode_each(&self.encoding().bytes[a as usize..b as usize]))
    }
}

/// Each `T` postcard wrote back to back in `bytes`, up to the first that does not decode.
fn decode_each<T: DeserializeOwned>(mut bytes: &[u8]) -> impl Iterator<Item = T> + '_ {
    core::iter::from_fn(move || {
        let (value, rest) = postcard::take_from_bytes::<T>(bytes).ok()?;
        bytes = rest;
        Some(value)
    })
}
