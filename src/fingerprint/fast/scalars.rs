//! The scalar values of the one-pass reader ([`super`]): numbers, written as RFC 8785 writes
//! them (ECMAScript `Number.prototype.toString`), and strings, copied as they are when they
//! hold no escape, else re-escaped. Each returns `None` where the tree path must decide.

use super::{escape, find_special, Reader, MAX_NUMBER_LEN};

impl Reader<'_, '_, '_> {
    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// RFC 8259 number grammar, as `serde_json` enforces it.
    pub(super) fn number(&mut self) -> Option<()> {
        let start = self.pos;
        if self.bytes[self.pos] == b'-' {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.bytes.get(self.pos)? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        let int_end = self.pos;
        let mut integer = true;
        let mut fraction = None;
        if self.bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            let fraction_start = self.pos;
            (self.digits() > 0).then_some(())?;
            fraction = Some(fraction_start..self.pos);
            integer = false;
        }
        if matches!(self.bytes.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.bytes.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            (1..=3).contains(&self.digits()).then_some(())?;
            integer = false;
            fraction = None;
        }
        self.add_size(24);
        if integer {
            // Below 10^15 < 2^53: exact as a double, which ECMAScript writes as its
            // digits; `-0` is `0`. Longer integers may be big (tagged encoding).
            (int_end - int_start <= 15).then_some(())?;
            if &self.bytes[int_start..int_end] == b"0" {
                self.out.push(b'0');
            } else {
                self.out.extend_from_slice(&self.bytes[start..int_end]);
            }
            return Some(());
        }
        let plain_decimal = fraction.map(|f| (&self.bytes[int_start..int_end], &self.bytes[f]));
        if plain_decimal.is_some_and(|(int, fraction)| written_canonically(int, fraction)) {
            self.out.extend_from_slice(&self.bytes[start..self.pos]);
            return Some(());
        }
        (self.pos - start <= MAX_NUMBER_LEN).then_some(())?;
        let spelled = &self.text[start..self.pos];
        let value: f64 = spelled.parse().ok()?;
        // Out of range is an error for serde_json; an underflow to zero is left to it too.
        let underflow = value == 0.0
            && spelled
                .bytes()
                .take_while(|b| !matches!(b, b'e' | b'E'))
                .any(|b| (b'1'..=b'9').contains(&b));
        (value.is_finite() && !underflow).then_some(())?;
        self.out
            .extend_from_slice(ryu_js::Buffer::new().format_finite(value).as_bytes());
        Some(())
    }

    /// A string value: copied as it is when it holds no escape, else re-escaped.
    pub(super) fn string(&mut self) -> Option<()> {
        let open = self.pos;
        let end = find_special(self.bytes, open + 1);
        match self.bytes.get(end)? {
            b'"' => {
                self.out.extend_from_slice(&self.bytes[open..=end]);
                self.add_size(end - open + 1);
                self.pos = end + 1;
                Some(())
            }
            b'\\' => self.escaped_string(open, end),
            _ => None,
        }
    }

    /// A string holding escapes, from its opening quote at `open`; `first` is the first
    /// backslash. Writes RFC 8785 §3.2.2.2 escapes; counts the unescaped length.
    fn escaped_string(&mut self, open: usize, first: usize) -> Option<()> {
        self.out.extend_from_slice(&self.bytes[open..first]);
        let mut len = first - open - 1;
        let mut at = first;
        loop {
            match *self.bytes.get(at)? {
                b'"' => break,
                b'\\' => {}
                _ => return None,
            }
            let code = match *self.bytes.get(at + 1)? {
                b'"' => u32::from(b'"'),
                b'\\' => u32::from(b'\\'),
                b'/' => u32::from(b'/'),
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => u32::from(b'\n'),
                b'r' => u32::from(b'\r'),
                b't' => u32::from(b'\t'),
                b'u' => {
                    let (code, used) = self.unicode_escape(at)?;
                    at += used - 2;
                    code
                }
                _ => return None,
            };
            at += 2;
            let c = char::from_u32(code)?;
            len += c.len_utf8();
            match u8::try_from(code) {
                Ok(b) if b < 0x20 || b == b'"' || b == b'\\' => escape(b, &mut *self.out),
                _ => self
                    .out
                    .extend_from_slice(c.encode_utf8(&mut [0u8; 4]).as_bytes()),
            }
            let run_end = find_special(self.bytes, at);
            self.out.extend_from_slice(self.bytes.get(at..run_end)?);
            len += run_end - at;
            at = run_end;
        }
        self.out.push(b'"');
        self.add_size(len + 2);
        self.pos = at + 1;
        Some(())
    }

    /// The code point of the `\u` escape at `at` (a surrogate pair counts as one) and the
    /// bytes it spans; `None` for a lone surrogate, which `serde_json` refuses.
    fn unicode_escape(&self, at: usize) -> Option<(u32, usize)> {
        let unit = |at: usize| -> Option<u32> {
            let hex = std::str::from_utf8(self.bytes.get(at + 2..at + 6)?).ok()?;
            hex.bytes()
                .all(|b| b.is_ascii_hexdigit())
                .then(|| u32::from_str_radix(hex, 16).ok())?
        };
        let high = unit(at)?;
        match high {
            0xdc00..=0xdfff => None,
            0xd800..=0xdbff => {
                (self.bytes.get(at + 6..at + 8)? == b"\\u").then_some(())?;
                let low = unit(at + 6)?;
                (0xdc00..=0xdfff)
                    .contains(&low)
                    .then(|| (0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00), 12))
            }
            _ => Some((high, 6)),
        }
    }
}

/// True when the decimal `-?int.fraction` (JSON number syntax, no exponent; the digits
/// before and after the point) is already in its RFC 8785 form (ECMAScript
/// `Number.prototype.toString` of the nearest double): `fraction` not ending in `0`, at
/// most 15 significant digits, and at least 1e-6 in magnitude. Such a decimal is the
/// shortest one that reads back as its double (any two decimals of ≤ 15 significant digits
/// are distinct doubles), and ECMAScript writes numbers from 1e-6 to 1e21 in plain decimal
/// notation, so parsing and formatting it would write the same bytes.
pub(super) fn written_canonically(int: &[u8], fraction: &[u8]) -> bool {
    if fraction.last().is_none_or(|&d| d == b'0') {
        return false;
    }
    let significant = if int == b"0" {
        let zeros = fraction.iter().take_while(|&&d| d == b'0').count();
        // 0.000001 (five zeros) is 1e-6, the smallest written without an exponent
        if zeros > 5 {
            return false;
        }
        fraction.len() - zeros
    } else {
        int.len() + fraction.len()
    };
    significant <= 15
}
