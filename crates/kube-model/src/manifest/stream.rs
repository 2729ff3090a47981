//! A cold start's reading of a JSON text that is one `kind: List` object: each item is
//! named and decoded as soon as it is parsed, before the rest of the text is
//! ([`stream_list`]), so that its reader need not wait for the whole text's syntax.

use std::fmt;

use serde::de::{
    DeserializeSeed, Deserializer, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::value::RawValue;

use super::{lenient_str, list_item, Entry, ManifestError, Object, Place};

/// How [`stream_list`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streamed {
    /// The text is one JSON `kind: List` object and every item was given, as
    /// [`super::Documents::each_object`] gives them (`decode` set).
    Complete,
    /// The receiver asked for no more.
    Stopped,
    /// The text is not such a list, or not certainly read the same way by [`super::documents`]
    /// (a duplicate head key, a syntax error, more than one document): what was given
    /// (`given`) is to be taken back, and the text read with [`super::documents`].
    No { given: bool },
}

/// Give `f` each item of `text`, a JSON `kind: List` object, as it is parsed: its entry
/// and, for a Service or an EndpointSlice read in one pass, its object. The items come
/// before the text is known to be whole and well-formed: only [`Streamed::Complete`]
/// says that they are what [`super::documents`] reads.
pub fn stream_list<'t>(
    text: &'t str,
    mut f: impl FnMut(Result<Entry<'t>, ManifestError>, Option<Object>) -> bool,
) -> Streamed {
    let text = text.trim_start_matches('\u{feff}');
    if !text.trim_start().starts_with('{') {
        return Streamed::No { given: false };
    }
    let mut given = false;
    let mut stopped = false;
    let mut de = serde_json::Deserializer::from_str(text);
    let list = de
        .deserialize_map(ListVisitor {
            f: &mut f,
            given: &mut given,
            stopped: &mut stopped,
        })
        .and_then(|list| de.end().map(|()| list));
    match list {
        _ if stopped => Streamed::Stopped,
        Ok(true) => Streamed::Complete,
        _ => Streamed::No { given },
    }
}

struct ListVisitor<'s, F> {
    f: &'s mut F,
    given: &'s mut bool,
    stopped: &'s mut bool,
}

/// A string, or None for any other value (as the head reader reads `kind`).
struct Lenient(Option<String>);

impl<'de> serde::Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient_str(d).map(Lenient)
    }
}

impl<'t, F> Visitor<'t> for ListVisitor<'_, F>
where
    F: FnMut(Result<Entry<'t>, ManifestError>, Option<Object>) -> bool,
{
    /// Whether the object was a List with an array of items.
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a List")
    }
    fn visit_map<A: MapAccess<'t>>(self, mut map: A) -> Result<bool, A::Error> {
        let no = |why: &str| A::Error::custom(why);
        let (mut kind, mut api_version, mut metadata, mut items) = (false, false, false, false);
        while let Some(k) = map.next_key::<String>()? {
            // The head reader refuses a head key twice (serde's duplicate field).
            let seen = match k.as_str() {
                "kind" => &mut kind,
                "apiVersion" => &mut api_version,
                "metadata" => &mut metadata,
                "items" => &mut items,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(seen, true) {
                return Err(no("a head key twice"));
            }
            match k.as_str() {
                "kind" => {
                    if map.next_value::<Lenient>()?.0.as_deref() != Some("List") {
                        return Err(no("not a List"));
                    }
                }
                "items" => map.next_value_seed(Items {
                    f: &mut *self.f,
                    given: &mut *self.given,
                    stopped: &mut *self.stopped,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(kind && items)
    }
}

/// A List's `items`, each given as it is parsed.
struct Items<'s, F> {
    f: &'s mut F,
    given: &'s mut bool,
    stopped: &'s mut bool,
}

impl<'t, F> DeserializeSeed<'t> for Items<'_, F>
where
    F: FnMut(Result<Entry<'t>, ManifestError>, Option<Object>) -> bool,
{
    type Value = ();
    fn deserialize<D: Deserializer<'t>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'t, F> Visitor<'t> for Items<'_, F>
where
    F: FnMut(Result<Entry<'t>, ManifestError>, Option<Object>) -> bool,
{
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of items")
    }
    fn visit_seq<A: SeqAccess<'t>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(raw) = seq.next_element::<&'t RawValue>()? {
            let place = Place {
                document: 0,
                item: Some(i),
            };
            let (e, o) = list_item(place, raw.get(), true);
            *self.given = true;
            if !(self.f)(e, o) {
                *self.stopped = true;
                return Err(A::Error::custom("stopped"));
            }
            i += 1;
        }
        Ok(())
    }
}
