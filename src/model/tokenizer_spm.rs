//! SentencePiece-style BPE tokenizer (Llama 1/2, llama2.c, GGUF `tokenizer.ggml.model = llama`).
//!
//! Owns: the vocabulary (pieces, scores, token kinds), encoding by greedy merging of the
//! highest-scoring adjacent pair (as llama2.c and llama.cpp's SPM tokenizer do), byte fallback
//! to `<0xXX>` pieces, and decoding one piece at a time.
//! Never: normalizes text beyond the dummy-prefix space (SentencePiece's NFKC rules are not part
//! of GGUF or llama2.c vocabularies, and neither engine applies them).
//!
//! Spaces: SentencePiece writes a space as `▁` (U+2581) inside pieces; llama2.c's `tok512.bin`
//! writes plain spaces. Pieces are stored here with plain spaces, so both vocabularies encode
//! the same text to the same ids, and a literal `▁` in the input stays a `▁` (byte fallback)
//! instead of turning into a space.

use super::gguf::{GgufFile, GgufValue, GgufValueType};
use super::{ModelConfig, Tokenizer};
use anyhow::{bail, Context, Result};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// SentencePiece token kinds (`tokenizer.ggml.token_type`, llama.cpp `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    Normal,
    Unknown,
    /// BOS, EOS and other control tokens: never produced by merging, decoded to nothing.
    Control,
    UserDefined,
    Unused,
    /// `<0xXX>`: one raw byte.
    Byte,
}

impl TokenKind {
    /// From llama.cpp's numbering (0 = undefined, treated as normal).
    pub fn from_gguf(t: i64) -> Option<TokenKind> {
        Some(match t {
            0 | 1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => return None,
        })
    }
}

/// Special ids and switches of a SentencePiece vocabulary.
#[derive(Clone, Debug, Default)]
pub struct SpmSpecials {
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    pub unk: Option<u32>,
    /// Whether the model wants BOS in front of a prompt (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Whether a space is put in front of the text before encoding (SentencePiece's dummy prefix).
    pub add_space_prefix: bool,
}

pub struct SpmTokenizer {
    /// Piece bytes with `▁` replaced by a space.
    pieces: Vec<Vec<u8>>,
    scores: Vec<f32>,
    kinds: Vec<TokenKind>,
    /// Pieces that merging may produce (normal and user-defined), by bytes.
    lookup: HashMap<Vec<u8>, u32>,
    /// Token of each byte value, from the `<0xXX>` pieces.
    byte_tokens: [Option<u32>; 256],
    specials: SpmSpecials,
    /// Control and user-defined pieces, longest first: matched whole in the input text (as
    /// llama.cpp does when parsing special tokens) instead of being spelled out.
    special_pieces: Vec<(String, u32)>,
}

/// The byte of a `<0xXX>` piece.
pub fn parse_byte_piece(piece: &[u8]) -> Option<u8> {
    let hex = piece.strip_prefix(b"<0x")?.strip_suffix(b">")?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

fn replace_space_marker(piece: &[u8]) -> Vec<u8> {
    const MARKER: &[u8] = "\u{2581}".as_bytes();
    let mut out = Vec::with_capacity(piece.len());
    let mut i = 0;
    while i < piece.len() {
        if piece[i..].starts_with(MARKER) {
            out.push(b' ');
            i += MARKER.len();
        } else {
            out.push(piece[i]);
            i += 1;
        }
    }
    out
}

impl SpmTokenizer {
    /// Builds a tokenizer from pieces as stored (with `▁` or plain spaces), scores and kinds
    /// (all of one length). `source` names the vocabulary in messages.
    pub fn new(pieces: Vec<Vec<u8>>, scores: Vec<f32>, kinds: Vec<TokenKind>, specials: SpmSpecials, source: &str) -> Result<Self> {
        let n = pieces.len();
        if scores.len() != n || kinds.len() != n {
            bail!("{source}: vocabulary has {n} pieces but {} scores and {} token types", scores.len(), kinds.len());
        }
        if n == 0 || n > u32::MAX as usize {
            bail!("{source}: vocabulary has {n} pieces");
        }
        for id in specials.bos.iter().chain(&specials.eos).chain(&specials.unk) {
            if *id as usize >= n {
                bail!("{source}: special token id {id} is outside the vocabulary of {n} pieces");
            }
        }
        let pieces: Vec<Vec<u8>> = pieces.iter().map(|p| replace_space_marker(p)).collect();
        let mut lookup = HashMap::with_capacity(n);
        let mut byte_tokens = [None; 256];
        for (id, (piece, kind)) in pieces.iter().zip(&kinds).enumerate() {
            match kind {
                TokenKind::Normal | TokenKind::UserDefined => {
                    // Keep the first id of a duplicated piece, as SentencePiece does.
                    lookup.entry(piece.clone()).or_insert(id as u32);
                }
                TokenKind::Byte => {
                    let b = parse_byte_piece(piece).with_context(|| {
                        format!("{source}: token {id} is a byte token but its piece is {:?}, not `<0xXX>`", String::from_utf8_lossy(piece))
                    })?;
                    byte_tokens[b as usize].get_or_insert(id as u32);
                }
                TokenKind::Unknown | TokenKind::Control | TokenKind::Unused => {}
            }
        }
        let mut special_pieces: Vec<(String, u32)> = pieces
            .iter()
            .zip(&kinds)
            .enumerate()
            .filter(|(_, (p, k))| matches!(k, TokenKind::Control | TokenKind::UserDefined) && !p.is_empty())
            .filter_map(|(id, (p, _))| Some((String::from_utf8(p.clone()).ok()?, id as u32)))
            .collect();
        special_pieces.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Ok(SpmTokenizer { pieces, scores, kinds, lookup, byte_tokens, specials, special_pieces })
    }

    /// From GGUF metadata (`tokenizer.ggml.tokens`, `.scores`, `.token_type`, special ids).
    pub fn from_gguf(file: &GgufFile, config: &ModelConfig) -> Result<Self> {
        let name = &file.file_name;
        let tokens = file
            .array_opt("tokenizer.ggml.tokens", GgufValueType::String)?
            .with_context(|| format!("`{name}`: tokenizer model is `llama` but `tokenizer.ggml.tokens` is missing"))?;
        let pieces: Vec<Vec<u8>> = tokens.iter().map(|t| t.as_str().unwrap_or_default().as_bytes().to_vec()).collect();
        let n = pieces.len();
        let scores = match file.array_opt("tokenizer.ggml.scores", GgufValueType::F32)? {
            Some(s) => s.iter().map(|v| v.as_f64().unwrap_or(0.0) as f32).collect(),
            None => vec![0.0; n],
        };
        let kinds = match file.get("tokenizer.ggml.token_type") {
            Some(GgufValue::Array(_, types)) => types
                .iter()
                .enumerate()
                .map(|(id, t)| {
                    let raw = t.as_f64().unwrap_or(-1.0) as i64;
                    TokenKind::from_gguf(raw).with_context(|| format!("`{name}`: token {id} has unknown token type {}", t.describe()))
                })
                .collect::<Result<Vec<_>>>()?,
            Some(other) => bail!("`{name}`: `tokenizer.ggml.token_type` is {}, expected an array", other.describe()),
            None => infer_kinds(&pieces, config.bos_token_id, &config.eos_token_ids, None),
        };
        let specials = SpmSpecials {
            bos: config.bos_token_id,
            eos: config.eos_token_ids.clone(),
            unk: super::gguf::token_id_opt(file, "tokenizer.ggml.unknown_token_id")?,
            add_bos: file.bool_opt("tokenizer.ggml.add_bos_token")?.unwrap_or(true),
            add_space_prefix: file.bool_opt("tokenizer.ggml.add_space_prefix")?.unwrap_or(true),
        };
        Self::new(pieces, scores, kinds, specials, &format!("`{name}`"))
    }

    /// The piece of `id` as stored here (spaces, not `▁`).
    pub fn piece(&self, id: u32) -> Option<&[u8]> {
        self.pieces.get(id as usize).map(|p| p.as_slice())
    }

    pub fn kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    pub fn score(&self, id: u32) -> Option<f32> {
        self.scores.get(id as usize).copied()
    }

    /// Encodes one run of plain text (no special pieces) onto `ids`: dummy-prefix space when
    /// `prefix_space`, one symbol per character, greedy merging of the best-scoring pair,
    /// byte fallback for what stays unknown.
    fn encode_fragment(&self, text: &str, prefix_space: bool, ids: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let mut buf = String::with_capacity(text.len() + 1);
        if prefix_space && self.specials.add_space_prefix {
            buf.push(' ');
        }
        buf.push_str(text);
        let bytes = buf.as_bytes();

        // One symbol per character.
        let mut symbols: Vec<Symbol> = Vec::with_capacity(bytes.len());
        for (start, ch) in buf.char_indices() {
            let i = symbols.len();
            symbols.push(Symbol { start, len: ch.len_utf8(), prev: i.checked_sub(1), next: None });
            if i > 0 {
                symbols[i - 1].next = Some(i);
            }
        }
        let mut heap = BinaryHeap::new();
        let try_add = |heap: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: Option<usize>, right: Option<usize>| {
            let (Some(left), Some(right)) = (left, right) else { return };
            let (l, r) = (symbols[left], symbols[right]);
            let piece = &bytes[l.start..r.start + r.len];
            if let Some(&id) = self.lookup.get(piece) {
                heap.push(Bigram { score: self.scores[id as usize], left, right, len: piece.len() });
            }
        };
        for i in 1..symbols.len() {
            try_add(&mut heap, &symbols, Some(i - 1), Some(i));
        }
        while let Some(b) = heap.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            // Stale: one side was merged into something else since this pair was queued.
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.left].next = r.next;
            symbols[b.right].len = 0;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            try_add(&mut heap, &symbols, l.prev, Some(b.left));
            try_add(&mut heap, &symbols, Some(b.left), r.next);
        }

        let mut at = if symbols.is_empty() { None } else { Some(0) };
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &bytes[s.start..s.start + s.len];
            match self.lookup.get(piece) {
                Some(&id) => ids.push(id),
                None => {
                    for &b in piece {
                        ids.push(self.byte_token(b)?);
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }

    fn byte_token(&self, b: u8) -> Result<u32> {
        match (self.byte_tokens[b as usize], self.specials.unk) {
            (Some(id), _) | (None, Some(id)) => Ok(id),
            (None, None) => bail!("byte 0x{b:02X} has no `<0x{b:02X}>` piece and the vocabulary has no unknown token"),
        }
    }
}

/// Token kinds of a vocabulary that does not store them (llama2.c): the special ids are
/// control/unknown, `<0xXX>` pieces are bytes, everything else is normal.
pub fn infer_kinds(pieces: &[Vec<u8>], bos: Option<u32>, eos: &[u32], unk: Option<u32>) -> Vec<TokenKind> {
    (0..pieces.len())
        .map(|id| {
            let id32 = id as u32;
            if Some(id32) == unk {
                TokenKind::Unknown
            } else if Some(id32) == bos || eos.contains(&id32) {
                TokenKind::Control
            } else if parse_byte_piece(&pieces[id]).is_some() {
                TokenKind::Byte
            } else {
                TokenKind::Normal
            }
        })
        .collect()
}

/// A symbol of the text being merged: a byte range, linked to its neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of symbols `left` and `left`'s next, producing `len` bytes.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Highest score first; among equal scores the leftmost pair, as llama2.c's scan does.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.left.cmp(&self.left))
    }
}

impl Tokenizer for SpmTokenizer {
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if add_bos && self.specials.add_bos {
            if let Some(bos) = self.specials.bos {
                ids.push(bos);
            }
        }
        // Split at special pieces; like llama.cpp, every text fragment that starts the input or
        // follows a special token gets the dummy-prefix space.
        let mut after_special = true;
        let mut fragment_start = 0;
        let mut at = 0;
        while at < text.len() {
            let rest = &text[at..];
            match self.special_pieces.iter().find(|(p, _)| rest.starts_with(p.as_str())) {
                Some((piece, id)) => {
                    self.encode_fragment(&text[fragment_start..at], after_special, &mut ids)?;
                    ids.push(*id);
                    after_special = true;
                    at += piece.len();
                    fragment_start = at;
                }
                None => at += rest.chars().next().map_or(1, char::len_utf8),
            }
        }
        self.encode_fragment(&text[fragment_start..], after_special, &mut ids)?;
        Ok(ids)
    }

    fn decode_piece(&self, prev: Option<u32>, token: u32) -> Vec<u8> {
        let (Some(piece), Some(kind)) = (self.piece(token), self.kind(token)) else {
            return Vec::new();
        };
        match kind {
            TokenKind::Byte => parse_byte_piece(piece).map(|b| vec![b]).unwrap_or_default(),
            TokenKind::Control | TokenKind::Unused => Vec::new(),
            TokenKind::Unknown => piece.to_vec(),
            TokenKind::Normal | TokenKind::UserDefined => {
                // SentencePiece's dummy prefix: the space that starts the first word is not text.
                if prev.is_some() && prev == self.specials.bos {
                    piece.strip_prefix(b" ").unwrap_or(piece).to_vec()
                } else {
                    piece.to_vec()
                }
            }
        }
    }

    fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    fn bos(&self) -> Option<u32> {
        self.specials.bos
    }

    fn eos(&self) -> Vec<u32> {
        self.specials.eos.clone()
    }
}
