//! A JSON list response (`{"kind":"ServiceList",...,"metadata":{...},"items":[...]}`)
//! split as it arrives: a small scanner of the top-level object finds `metadata` and the
//! `items` array, and splits the array into its elements by tracking strings, escapes
//! and nesting, so that each item is handed on (to be decoded alone) as soon as its last
//! byte arrived. `metadata` may come before or after `items`. Only the item (or the
//! metadata, or a key) being read is buffered, never the body; the values of the other
//! top-level keys (`kind`, `apiVersion`) are skipped, checked for their nesting only.
//! An item's own syntax is its decoder's to check. Pure: bytes in, parts out.

/// What the scanner hands on: the bytes of one whole value.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Part<'a> {
    /// An element of `items`.
    Item(&'a [u8]),
    /// The list's `metadata` value.
    Meta(&'a [u8]),
}

/// Why a body is no JSON list (positions count the body's bytes from 0).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonListError {
    #[error("not a JSON list: {what} at byte {at}")]
    Syntax { what: &'static str, at: u64 },
    #[error("the JSON list ended at byte {at}, before its object did")]
    Truncated { at: u64 },
    #[error("a JSON list item, metadata or key of over {max} bytes (from byte {at})")]
    TooLarge { max: usize, at: u64 },
}

/// Where the scanner is in the top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before the object's `{`.
    Start,
    /// After `{`: a key or `}`.
    Open,
    /// After a `,` between members: a key.
    NextKey,
    /// Inside a key's string.
    Key,
    /// After a key: its `:`.
    Colon,
    /// After `:`: the value of the key read.
    Value,
    /// Inside the value of a top-level key other than `items`.
    InValue,
    /// After a member's value: `,` or `}`.
    AfterValue,
    /// After `items`' `[`: an element or `]`.
    ItemsOpen,
    /// After a `,` between elements: an element.
    NextItem,
    /// Inside an element.
    InItem,
    /// After an element: `,` or `]`.
    AfterItem,
    /// After the object's `}`: whitespace only.
    End,
}

/// Which top-level member's value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Items,
    Metadata,
    Other,
}

/// One JSON value's extent: the brackets open in it, and whether inside a string (after
/// a backslash), or in a scalar (a number, `true`, `false`, `null`).
#[derive(Debug, Default)]
struct Nest {
    open: Vec<u8>,
    string: bool,
    escape: bool,
    scalar: bool,
}

/// What a byte did to a value.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// The byte ends the value (and is part of it).
    Done,
    /// The value ended before the byte (a scalar's delimiter).
    Before,
}

fn ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl Nest {
    /// The value's byte at `i` of `chunk` (the first byte of the value is a value's: not
    /// whitespace nor a delimiter); the index of the byte that ends or follows it, and
    /// how, or `None` when the chunk ends inside it. Err: what is wrong at which index.
    fn scan(
        &mut self,
        chunk: &[u8],
        mut i: usize,
    ) -> Result<Option<(usize, Step)>, (usize, &'static str)> {
        while i < chunk.len() {
            if self.string && !self.escape {
                // the bulk of a list: string contents, skipped to the next quote or escape
                match chunk[i..].iter().position(|&c| c == b'"' || c == b'\\') {
                    Some(k) => i += k,
                    None => return Ok(None),
                }
            }
            let b = chunk[i];
            if self.string {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else {
                    self.string = false;
                    if self.open.is_empty() {
                        return Ok(Some((i, Step::Done)));
                    }
                }
            } else if self.scalar {
                if ws(b) || matches!(b, b',' | b']' | b'}') {
                    return Ok(Some((i, Step::Before)));
                }
                if matches!(b, b'{' | b'[' | b'"' | b':') {
                    return Err((i, "a scalar runs into a bracket, quote or colon"));
                }
            } else {
                match b {
                    b'"' => self.string = true,
                    b'{' => self.open.push(b'}'),
                    b'[' => self.open.push(b']'),
                    b'}' | b']' => {
                        if self.open.pop() != Some(b) {
                            return Err((i, "a closing bracket that does not match"));
                        }
                        if self.open.is_empty() {
                            return Ok(Some((i, Step::Done)));
                        }
                    }
                    _ if self.open.is_empty() => self.scalar = true,
                    _ => {}
                }
            }
            i += 1;
        }
        Ok(None)
    }
}

/// The scanner of one list body.
pub(super) struct Scanner {
    at: At,
    field: Field,
    nest: Nest,
    /// The bytes of the value kept (an item, the metadata, a key) from earlier chunks.
    kept: Vec<u8>,
    /// Where the value kept began (for errors).
    kept_from: u64,
    items_seen: bool,
    /// The body's bytes before this chunk.
    offset: u64,
    max: usize,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner::new(kube_proto::stream::MAX_ITEM)
    }
}

impl Scanner {
    /// A scanner refusing an item, metadata or key of over `max` bytes.
    pub(super) fn new(max: usize) -> Scanner {
        Scanner {
            at: At::Start,
            field: Field::Other,
            nest: Nest::default(),
            kept: Vec::new(),
            kept_from: 0,
            items_seen: false,
            offset: 0,
            max,
        }
    }

    /// The body ended: it must have ended after the object.
    pub(super) fn finish(&self) -> Result<(), JsonListError> {
        match self.at {
            At::End => Ok(()),
            _ => Err(JsonListError::Truncated { at: self.offset }),
        }
    }

    /// Take the body's next bytes; `f` gets each part they complete, in order.
    pub(super) fn feed<E: From<JsonListError>>(
        &mut self,
        chunk: &[u8],
        mut f: impl FnMut(Part<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut i = 0;
        // where the kept value's bytes in this chunk begin
        let mut from = 0;
        while i < chunk.len() {
            let b = chunk[i];
            let at = self.offset + i as u64;
            let syntax = |what| JsonListError::Syntax { what, at };
            match self.at {
                At::Key | At::InValue | At::InItem => {
                    let scanned =
                        self.nest
                            .scan(chunk, i)
                            .map_err(|(k, what)| JsonListError::Syntax {
                                what,
                                at: self.offset + k as u64,
                            })?;
                    let Some((end, step)) = scanned else {
                        break;
                    };
                    // the value's last byte is `end` (Done) or the one before (Before)
                    let last = if step == Step::Done { end + 1 } else { end };
                    self.ended(&chunk[from..last], &mut f)?;
                    i = last;
                    continue;
                }
                _ if ws(b) => {}
                At::Start => match b {
                    b'{' => self.at = At::Open,
                    _ => return Err(syntax("no object").into()),
                },
                At::Open | At::NextKey => match b {
                    b'}' if self.at == At::Open => self.at = At::End,
                    b'"' => {
                        self.start(At::Key, at);
                        self.nest.string = true;
                        from = i;
                    }
                    _ => return Err(syntax("a key expected").into()),
                },
                At::Colon => match b {
                    b':' => self.at = At::Value,
                    _ => return Err(syntax("a colon expected").into()),
                },
                At::Value => match (self.field, b) {
                    (_, b',' | b']' | b'}' | b':') => return Err(syntax("a value expected").into()),
                    (Field::Items, b'[') => {
                        if self.items_seen {
                            return Err(syntax("a second items array").into());
                        }
                        self.items_seen = true;
                        self.at = At::ItemsOpen;
                    }
                    (Field::Items, b'n') => {
                        // `"items": null`: no items; skipped as any other scalar
                        self.field = Field::Other;
                        self.start(At::InValue, at);
                        continue;
                    }
                    (Field::Items, _) => return Err(syntax("items is not an array").into()),
                    (Field::Metadata | Field::Other, _) => {
                        self.start(At::InValue, at);
                        from = i;
                        continue;
                    }
                },
                At::ItemsOpen | At::NextItem => match b {
                    b']' if self.at == At::ItemsOpen => self.at = At::AfterValue,
                    b',' | b']' | b'}' | b':' => return Err(syntax("an item expected").into()),
                    _ => {
                        self.start(At::InItem, at);
                        from = i;
                        continue;
                    }
                },
                At::AfterItem => match b {
                    b',' => self.at = At::NextItem,
                    b']' => self.at = At::AfterValue,
                    _ => return Err(syntax("a comma or ] expected").into()),
                },
                At::AfterValue => match b {
                    b',' => self.at = At::NextKey,
                    b'}' => self.at = At::End,
                    _ => return Err(syntax("a comma or } expected").into()),
                },
                At::End => return Err(syntax("bytes after the list").into()),
            }
            i += 1;
        }
        // a value that goes on past this chunk: its bytes in it kept
        if matches!(self.at, At::Key | At::InValue | At::InItem) {
            self.keep(&chunk[from..])?;
        }
        self.offset += chunk.len() as u64;
        Ok(())
    }

    /// A value begins at byte `at` of the body.
    fn start(&mut self, next: At, at: u64) {
        self.at = next;
        self.nest = Nest::default();
        self.kept.clear();
        self.kept_from = at;
    }

    /// Whether the value being read is kept (handed on or looked at).
    fn kept_value(&self) -> bool {
        match self.at {
            At::Key | At::InItem => true,
            At::InValue => self.field == Field::Metadata,
            _ => false,
        }
    }

    /// The value goes on past this chunk: its bytes in it kept (if it is a kept one).
    fn keep(&mut self, bytes: &[u8]) -> Result<(), JsonListError> {
        if !self.kept_value() {
            return Ok(());
        }
        if self.kept.len() + bytes.len() > self.max {
            return Err(JsonListError::TooLarge {
                max: self.max,
                at: self.kept_from,
            });
        }
        self.kept.extend_from_slice(bytes);
        Ok(())
    }

    /// The value ended with `tail` (its bytes in this chunk).
    fn ended<E: From<JsonListError>>(
        &mut self,
        tail: &[u8],
        f: &mut impl FnMut(Part<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.kept_value() && self.kept.len() + tail.len() > self.max {
            return Err(JsonListError::TooLarge {
                max: self.max,
                at: self.kept_from,
            }
            .into());
        }
        let whole: &[u8] = if self.kept.is_empty() {
            tail
        } else {
            self.kept.extend_from_slice(tail);
            &self.kept
        };
        match self.at {
            At::Key => {
                self.field = field_of(whole);
                self.at = At::Colon;
            }
            At::InItem => {
                f(Part::Item(whole))?;
                self.at = At::AfterItem;
            }
            _ => {
                if self.field == Field::Metadata {
                    f(Part::Meta(whole))?;
                }
                self.at = At::AfterValue;
            }
        }
        self.kept.clear();
        Ok(())
    }
}

/// The member a key (with its quotes) names.
fn field_of(key: &[u8]) -> Field {
    let unescaped;
    let name: &[u8] = if key.contains(&b'\\') {
        unescaped = serde_json::from_slice::<String>(key).unwrap_or_default();
        unescaped.as_bytes()
    } else {
        key.get(1..key.len().saturating_sub(1)).unwrap_or_default()
    };
    match name {
        b"items" => Field::Items,
        b"metadata" => Field::Metadata,
        _ => Field::Other,
    }
}

#[cfg(test)]
mod tests;
