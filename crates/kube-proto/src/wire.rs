//! The few protobuf wire rules the streaming readers need, on byte slices that may end
//! part-way through a field (then "incomplete", not an error). Hand-written: prost
//! decodes whole messages and its field-level functions are not public API
//! (docs/decisions/0011).

use crate::Error;

/// A field's value: a varint, fixed-width bytes, or length-delimited bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed(&'a [u8]),
    Len(&'a [u8]),
}

/// A varint at the start of `b` and its length; None: `b` ends inside it.
pub fn varint(b: &[u8]) -> Result<Option<(u64, usize)>, Error> {
    let mut v: u64 = 0;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(Some((v, i + 1)));
        }
    }
    if b.len() >= 10 {
        return Err(Error::wire("varint", "longer than 10 bytes"));
    }
    Ok(None)
}

/// The field at the start of `b`: its number, value and total length; None: `b` ends
/// inside it. `max` bounds a length-delimited value (hostile lengths are refused before
/// anything waits for them).
pub fn field(b: &[u8], max: usize) -> Result<Option<(u32, Value<'_>, usize)>, Error> {
    let Some((key, k)) = varint(b)? else {
        return Ok(None);
    };
    let number =
        u32::try_from(key >> 3).map_err(|_| Error::wire("field key", "number too large"))?;
    if number == 0 {
        return Err(Error::wire("field key", "field number 0"));
    }
    let rest = &b[k..];
    let fixed = |n: usize| -> Result<Option<(u32, Value<'_>, usize)>, Error> {
        Ok((rest.len() >= n).then(|| (number, Value::Fixed(&rest[..n]), k + n)))
    };
    match key & 7 {
        0 => Ok(varint(rest)?.map(|(v, n)| (number, Value::Varint(v), k + n))),
        1 => fixed(8),
        5 => fixed(4),
        2 => {
            let Some((len, n)) = varint(rest)? else {
                return Ok(None);
            };
            let len =
                usize::try_from(len)
                    .ok()
                    .filter(|l| *l <= max)
                    .ok_or(Error::FrameTooLarge {
                        len: usize::try_from(len).unwrap_or(usize::MAX),
                        max,
                    })?;
            let body = &rest[n..];
            Ok((body.len() >= len).then(|| (number, Value::Len(&body[..len]), k + n + len)))
        }
        w => Err(Error::wire(
            "field key",
            format!("unsupported wire type {w}"),
        )),
    }
}

/// What starts `b` when a length-delimited field is looked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    /// Not all of the key and length prefix is there yet.
    Incomplete,
    /// A field of another wire type.
    NotLen,
    /// A length-delimited field: its number, the value's length and the header's length.
    Len {
        number: u32,
        len: u64,
        header: usize,
    },
}

/// The header of a length-delimited field at the start of `b` (key and length prefix).
pub fn len_header(b: &[u8]) -> Result<Header, Error> {
    let Some((key, k)) = varint(b)? else {
        return Ok(Header::Incomplete);
    };
    if key & 7 != 2 {
        return Ok(Header::NotLen);
    }
    let number =
        u32::try_from(key >> 3).map_err(|_| Error::wire("field key", "number too large"))?;
    Ok(match varint(&b[k..])? {
        Some((len, n)) => Header::Len {
            number,
            len,
            header: k + n,
        },
        None => Header::Incomplete,
    })
}

/// The fields of a whole message.
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(b: &'a [u8]) -> Fields<'a> {
        Fields { rest: b }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), Error>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match field(self.rest, usize::MAX) {
            Ok(Some((n, v, len))) => {
                self.rest = &self.rest[len..];
                Some(Ok((n, v)))
            }
            Ok(None) => {
                self.rest = &[];
                Some(Err(Error::wire("message", "truncated")))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        assert_eq!(varint(&[0x01]).unwrap(), Some((1, 1)));
        assert_eq!(varint(&[0xac, 0x02]).unwrap(), Some((300, 2)));
        assert_eq!(varint(&[0xac]).unwrap(), None);
        assert!(varint(&[0xff; 11]).is_err());
    }

    #[test]
    fn fields_complete_and_not() {
        // field 2, LEN 3 "abc"
        let b = [0x12, 3, b'a', b'b', b'c'];
        assert_eq!(field(&b, 100).unwrap(), Some((2, Value::Len(b"abc"), 5)));
        assert_eq!(field(&b[..4], 100).unwrap(), None);
        assert!(matches!(
            field(&b, 2),
            Err(Error::FrameTooLarge { len: 3, max: 2 })
        ));
        // field 1 varint 150
        assert_eq!(
            field(&[0x08, 0x96, 0x01], 1).unwrap(),
            Some((1, Value::Varint(150), 3))
        );
        // a group (wire type 3) is refused
        assert!(field(&[0x0b], 1).is_err());
        assert!(field(&[0x00, 0x00], 1).is_err());
    }

    #[test]
    fn length_headers() {
        let h = |number, len, header| Header::Len {
            number,
            len,
            header,
        };
        assert_eq!(len_header(&[0x12, 3]).unwrap(), h(2, 3, 2));
        assert_eq!(len_header(&[0x12, 0xac, 0x02]).unwrap(), h(2, 300, 3));
        assert_eq!(len_header(&[0x12]).unwrap(), Header::Incomplete);
        assert_eq!(len_header(&[0x12, 0xac]).unwrap(), Header::Incomplete);
        assert_eq!(len_header(&[]).unwrap(), Header::Incomplete);
        assert_eq!(len_header(&[0x08, 1]).unwrap(), Header::NotLen);
    }
}
