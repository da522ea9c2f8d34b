//! Shared formatting: keys and identities as hex or escaped text, byte sizes, JSON.

use std::io::Write;

use anyhow::{bail, Result};
use serde_json::Value;

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses hex (upper or lower case, even length; empty for the empty key).
pub fn parse_hex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        bail!("hex key {s:?} has an odd number of digits");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| anyhow::anyhow!("{s:?} is not hex (use --text for a text key)"))
        })
        .collect()
}

/// `bytes` as text: printable characters as they are, a backslash as `\\`, and every other
/// byte (control characters, invalid UTF-8) as `\xNN`. [`unescape`] reverses it.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Reverses [`escape`]: `\\` is a backslash, `\xNN` a byte; any other backslash is an error.
pub fn unescape(s: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('\\') {
        out.extend_from_slice(&rest.as_bytes()[..at]);
        let esc = &rest[at..];
        if let Some(after) = esc.strip_prefix("\\\\") {
            out.push(b'\\');
            rest = after;
        } else if let Some(b) = esc
            .strip_prefix("\\x")
            .and_then(|h| h.get(..2))
            .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            rest = &esc[4..];
        } else {
            bail!("bad escape in {s:?}: use \\\\ for a backslash or \\xNN for a byte");
        }
    }
    out.extend_from_slice(rest.as_bytes());
    Ok(out)
}

/// An identity for people: quoted text when it is UTF-8, else `hex:` and its hex.
pub fn identity(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => format!("{:?}", text),
        Err(_) => format!("hex:{}", hex(bytes)),
    }
}

/// `bytes` as text when it is UTF-8, else JSON null.
pub fn text_or_null(bytes: &[u8]) -> Value {
    std::str::from_utf8(bytes).map_or(Value::Null, Value::from)
}

/// A byte count for people: `12.3 MiB (12897485 B)`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {} ({bytes} B)", UNITS[unit])
    }
}

/// Writes `value` as pretty JSON and a newline.
pub fn json(out: &mut dyn Write, value: &Value) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255u8).chain("né\\x".bytes()).collect();
        assert_eq!(unescape(&escape(&all)).unwrap(), all);
        assert_eq!(escape(b"shader/vs 1"), "shader/vs 1");
        assert_eq!(escape(b"a\\b\n"), "a\\\\b\\x0a");
        assert!(unescape("bad\\q").is_err());
        assert!(unescape("bad\\x4").is_err());
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(parse_hex(&hex(b"\x00\xffAz")).unwrap(), b"\x00\xffAz");
        assert_eq!(parse_hex("ABcd").unwrap(), vec![0xab, 0xcd]);
        assert_eq!(parse_hex("").unwrap(), Vec::<u8>::new());
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
        assert!(parse_hex("é1").is_err());
    }

    #[test]
    fn sizes_read_well() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB (1536 B)");
    }
}
