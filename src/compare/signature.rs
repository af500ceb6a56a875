//! Two small signatures a run keeps per call beside its fingerprints.
//!
//! - [`growth`]: the sum of the hashes of a result's lines, digits left out. When a result
//!   grows by the same block at each call (an edit that prepends instead of replacing, a log
//!   that gains the same lines), the sums of consecutive results differ by the same amount
//!   (the block's sum) each time, wherever the block lands and however the line numbers
//!   around it shift; a result that changes otherwise moves the sum by different amounts.
//! - [`simhash`]: a 32-bit SimHash of a text's token pairs; texts that share most of their
//!   token pairs get hashes a few bits apart ([`distance`]).

use std::hash::{BuildHasher, Hasher};

/// The fixed seed of both signatures: the same in every process, as replays compare
/// signatures computed at different times.
const SEED: u64 = 0x6c6f_6f70_6772_6f77;

fn hasher() -> impl Hasher {
    foldhash::fast::FixedState::with_seed(SEED).build_hasher()
}

/// The growth signature of `text` (24 bits, of which a run keeps 8): the wrapping sum of
/// its lines' hashes, each line hashed with its runs of ASCII digits folded to one marker.
pub fn growth(text: &str) -> u32 {
    let mut sum: u64 = 0;
    for line in text.split('\n') {
        let mut h = hasher();
        let mut in_digits = false;
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            let digit = b.is_ascii_digit();
            if digit && !in_digits {
                h.write(&bytes[start..i]);
                h.write_u8(0xFF); // not UTF-8: no text byte equals it
            } else if !digit && in_digits {
                start = i;
            }
            in_digits = digit;
        }
        if !in_digits {
            h.write(&bytes[start..]);
        }
        h.write_u8(0xFE);
        sum = sum.wrapping_add(h.finish() >> 40);
    }
    (sum & 0x00FF_FFFF) as u32
}

/// The difference between two growth signatures, modulo 2²⁴ (modulo 2⁸ for the 8 bits a
/// run keeps: the sums are exact modulo any power of two below 2²⁴).
pub fn growth_delta(from: u32, to: u32) -> u32 {
    to.wrapping_sub(from) & 0x00FF_FFFF
}

/// Tokens looked at by [`simhash`] (the start of a long text decides).
pub const SIMHASH_TOKENS: usize = 256;

/// 32-bit SimHash of `text`: each pair of consecutive tokens (runs of letters and `_`, runs
/// of digits, which all read as one token, or single other visible characters; the first
/// [`SIMHASH_TOKENS`]) votes for the bits of its hash.
pub fn simhash(text: &str) -> u32 {
    simhash_of(&[text])
}

/// [`simhash`] of `texts` joined by spaces (`simhash_of(&[a, b])` equals
/// `simhash(&format!("{a} {b}"))`), without joining them: a token never spans a space.
pub fn simhash_of(texts: &[&str]) -> u32 {
    // A bit's vote is (ones − zeros) over the pairs: it is set when ones > pairs / 2. The
    // ones are counted a byte of the hash at a time: `SPREAD_BYTE[b]` holds bit 7 − j of b
    // in bit 0 of byte j, so `lanes[k]` counts bit 8k + 7 − j in its byte j. A byte holds
    // at most 255, so the counts move to `ones` every 255 pairs and at the end.
    fn flush(lanes: &mut [u64; 4], ones: &mut [u32; 32]) {
        for (k, lane) in lanes.iter_mut().enumerate() {
            for j in 0..8 {
                ones[8 * k + 7 - j] += (*lane >> (8 * j) & 0xFF) as u32;
            }
            *lane = 0;
        }
    }
    let mut lanes = [0u64; 4];
    let mut ones = [0u32; 32];
    let mut pairs = 0u32;
    let mut previous: Option<&[u8]> = None;
    'texts: for text in texts {
        let mut at = 0;
        while let Some(token) = next_token(text, &mut at) {
            if pairs as usize == SIMHASH_TOKENS {
                break 'texts;
            }
            let mut h = hasher();
            if let Some(p) = previous {
                h.write(p);
            }
            h.write_u8(0);
            h.write(token);
            let bits = (h.finish() >> 16) as u32;
            for (k, lane) in lanes.iter_mut().enumerate() {
                *lane += SPREAD_BYTE[(bits >> (8 * k) & 0xFF) as usize];
            }
            previous = Some(token);
            pairs += 1;
            if pairs.is_multiple_of(255) {
                flush(&mut lanes, &mut ones);
            }
        }
    }
    flush(&mut lanes, &mut ones);
    ones.iter().enumerate().fold(
        0u32,
        |acc, (i, &n)| if 2 * n > pairs { acc | 1 << i } else { acc },
    )
}

/// The bits of `b` one per byte: bit 7 − j of `b` in bit 0 of byte j (a multiply by
/// 0x8040_2010_0804_0201 puts bit 7 − j in bit 7 of byte j).
static SPREAD_BYTE: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = ((b as u64).wrapping_mul(0x8040_2010_0804_0201) >> 7) & 0x0101_0101_0101_0101;
        b += 1;
    }
    table
};

/// Bits in which two SimHashes differ (0 = the same token pairs, about 16 = unrelated).
pub fn distance(a: u32, b: u32) -> u32 {
    (a ^ b).count_ones()
}

/// The shape of a call: a 16-bit hash of `tool` and `text` with every run of ASCII digits
/// read as one marker and whitespace runs as one space. The same edit again at another
/// line, port or attempt number has the same shape.
pub fn shape(tool: &str, text: &str) -> u16 {
    let mut h = hasher();
    h.write(tool.as_bytes());
    h.write_u8(0);
    let mut previous = 0u8; // 1 digit run, 2 whitespace run
    for b in text.bytes() {
        let class = if b.is_ascii_digit() {
            1
        } else if b.is_ascii_whitespace() {
            2
        } else {
            0
        };
        if class == 0 {
            h.write_u8(b);
        } else if class != previous {
            h.write_u8(if class == 1 { 0xFF } else { b' ' });
        }
        previous = class;
    }
    (h.finish() >> 48) as u16
}

/// What an ASCII byte is to the tokenizer ([`BYTE_CLASS`]).
const BLANK: u8 = 0;
const DIGIT: u8 = 1;
const WORD: u8 = 2;
const OTHER: u8 = 3;
const NON_ASCII: u8 = 4;

/// The class of every byte: ASCII whitespace (U+0009..U+000D, U+0020), ASCII digits,
/// ASCII letters and `_`, other ASCII, and bytes of non-ASCII characters (decoded).
static BYTE_CLASS: [u8; 256] = {
    let mut table = [NON_ASCII; 256];
    let mut b = 0;
    while b < 128 {
        table[b] = match b as u8 {
            b' ' | b'\t'..=b'\r' => BLANK,
            b'0'..=b'9' => DIGIT,
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => WORD,
            _ => OTHER,
        };
        b += 1;
    }
    table
};

/// Length of the run of bytes of class `class` from `at`.
fn run_of(bytes: &[u8], at: usize, class: u8) -> usize {
    bytes[at..]
        .iter()
        .position(|&b| BYTE_CLASS[b as usize] != class)
        .unwrap_or(bytes.len() - at)
}

/// The token of `text` at or after byte `at` (blanks skipped), moving `at` past it: a run
/// of ASCII digits reads as `0`, a word (letters, `_`, other alphanumerics) whole, any other
/// character alone; `None` at the end.
fn next_token<'t>(text: &'t str, at: &mut usize) -> Option<&'t [u8]> {
    let bytes = text.as_bytes();
    loop {
        let i = *at + run_of(bytes, *at, BLANK);
        let &first = bytes.get(i)?;
        let end = match BYTE_CLASS[first as usize] {
            DIGIT => {
                *at = i + run_of(bytes, i, DIGIT);
                return Some(b"0");
            }
            WORD => i + word_len(&text[i..]),
            NON_ASCII => {
                let c = text[i..].chars().next()?;
                if c.is_whitespace() {
                    *at = i + c.len_utf8();
                    continue;
                }
                if c.is_alphanumeric() {
                    i + word_len(&text[i..])
                } else {
                    i + c.len_utf8()
                }
            }
            _ => i + 1,
        };
        *at = end;
        return Some(&bytes[i..end]);
    }
}

/// Length in bytes of the word at the start of `text`: characters that are alphanumeric or
/// `_` but not ASCII digits (ASCII bytes decided by [`BYTE_CLASS`], others decoded).
fn word_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 0;
    loop {
        i += run_of(bytes, i, WORD);
        match bytes.get(i) {
            Some(&b) if !b.is_ascii() => match text[i..].chars().next() {
                Some(c) if c.is_alphanumeric() => i += c.len_utf8(),
                _ => return i,
            },
            _ => return i,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_block_added_moves_the_sum_by_the_same_amount() {
        let block = "class Sub {}\ninterface I {}\n";
        let numbered = |copies: usize| {
            let mut text = format!("[File: a.java ({} lines total)]\n", copies * 2 + 1);
            for i in 0..copies {
                for (j, line) in block.lines().enumerate() {
                    text.push_str(&format!("{}:{line}\n", i * 2 + j + 1));
                }
            }
            text + "File updated."
        };
        let g: Vec<u32> = (1..5).map(|n| growth(&numbered(n))).collect();
        let deltas: Vec<u32> = g.windows(2).map(|w| growth_delta(w[0], w[1])).collect();
        assert!(
            deltas.iter().all(|&d| d == deltas[0] && d != 0),
            "{deltas:?}"
        );
        // a different change moves it by another amount
        assert_ne!(
            growth_delta(g[0], growth(&(numbered(1) + "\nother line"))),
            deltas[0]
        );
        // digits alone do not move it
        assert_eq!(growth("took 5 steps"), growth("took 17 steps"));
        assert!(growth("a") < 1 << 24);
    }

    #[test]
    fn near_texts_are_near() {
        let a = simhash("find /usr -name \"java\" 2>/dev/null");
        let b = simhash("find /opt -name \"java\" 2>/dev/null");
        let c = simhash("python manage.py test auth --verbosity 2");
        assert!(distance(a, b) <= 8, "{}", distance(a, b));
        assert!(distance(a, c) > distance(a, b));
        assert_eq!(simhash("ls  -la"), simhash("ls -la"));
        assert_eq!(simhash("head -n 10 a"), simhash("head -n 20 a"));
        assert_eq!(simhash(""), 0);
        for (a, b) in [
            ("bash", "ls -la"),
            ("", "x y"),
            ("run_tests", "été 3 ünï_x"),
            ("t", ""),
        ] {
            assert_eq!(simhash_of(&[a, b]), simhash(&format!("{a} {b}")));
        }
    }

    #[test]
    fn unrelated_texts_are_about_half_the_bits_apart() {
        // Texts of nine different words (nine pairs: no tied votes): each bit of a SimHash
        // is a fair coin, so two unrelated signatures differ in about 16 of 32 bits, and
        // every bit is set in about half of them.
        let mut seed = 0x1234_5678_u64;
        let mut word = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (0..6)
                .map(|i| char::from(b'a' + (seed >> (40 + 4 * i) & 0xF) as u8))
                .collect::<String>()
        };
        let texts: Vec<String> = (0..400)
            .map(|_| (0..9).map(|_| word()).collect::<Vec<_>>().join(" "))
            .collect();
        let hashes: Vec<u32> = texts.iter().map(|t| simhash(t)).collect();
        let pairs: Vec<u32> = hashes.chunks(2).map(|p| distance(p[0], p[1])).collect();
        let mean = pairs.iter().sum::<u32>() as f64 / pairs.len() as f64;
        assert!((14.5..17.5).contains(&mean), "mean distance {mean}");
        for bit in 0..32 {
            let set = hashes.iter().filter(|&&h| h >> bit & 1 == 1).count();
            assert!((140..260).contains(&set), "bit {bit} set in {set} of 400");
        }
    }

    /// The SimHash as first written (char by char, votes ±1), for checking the faster one.
    fn simhash_as_first_written(text: &str) -> u32 {
        let mut votes = [0i32; 32];
        let mut previous: Option<&str> = None;
        let mut rest = text;
        let mut seen = 0;
        while seen < SIMHASH_TOKENS {
            rest = rest.trim_start();
            let Some(first) = rest.chars().next() else {
                break;
            };
            let len = if first.is_ascii_digit() {
                rest.find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len())
            } else if first.is_alphanumeric() || first == '_' {
                rest.find(|c: char| !(c.is_alphanumeric() || c == '_') || c.is_ascii_digit())
                    .unwrap_or(rest.len())
            } else {
                first.len_utf8()
            };
            let (token, tail) = rest.split_at(len);
            rest = tail;
            seen += 1;
            let token = if first.is_ascii_digit() { "0" } else { token };
            let mut h = hasher();
            if let Some(p) = previous {
                h.write(p.as_bytes());
            }
            h.write_u8(0);
            h.write(token.as_bytes());
            let bits = h.finish();
            for (i, vote) in votes.iter_mut().enumerate() {
                *vote += if bits >> (i + 16) & 1 == 1 { 1 } else { -1 };
            }
            previous = Some(token);
        }
        votes
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &v)| if v > 0 { acc | 1 << i } else { acc })
    }

    proptest::proptest! {
        #[test]
        fn simhash_equals_the_first_written(text in "(\\PC|[ _0-9a-z\u{0660}-\u{0669}\t\n\u{0b}\u{0c}\r\u{1c}\u{85}\u{a0}\u{3000}])*") {
            proptest::prop_assert_eq!(simhash(&text), simhash_as_first_written(&text));
        }

        #[test]
        fn long_simhash_equals_the_first_written(words in proptest::collection::vec("[a-c]{1,2}|[0-9]|-", 200..700)) {
            // Past SIMHASH_TOKENS tokens, where every pair votes for a bit, counts reach 256.
            let text = words.join(" ");
            proptest::prop_assert_eq!(simhash(&text), simhash_as_first_written(&text));
            let same = vec!["a"; 400].join(" ");
            proptest::prop_assert_eq!(simhash(&same), simhash_as_first_written(&same));
        }
    }

    #[test]
    fn shapes_leave_out_digits_and_spacing() {
        let edit = |old: u32, new: u32| {
            format!(r#"{{"path": "config.yaml", "old": "port: {old}", "new": "port: {new}"}}"#)
        };
        assert_eq!(
            shape("edit_file", &edit(8080, 8081)),
            shape("edit_file", &edit(8081, 8082))
        );
        assert_ne!(
            shape("edit_file", &edit(1, 2)),
            shape("write_file", &edit(1, 2))
        );
        assert_ne!(
            shape("bash", "sed -i 's/a/b/' f.py"),
            shape("bash", "sed -i 's/a/c/' f.py")
        );
        assert_eq!(shape("bash", "ls  -la\n"), shape("bash", "ls -la "));
    }
}
