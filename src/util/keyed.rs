//! Deserializing a table or object entry by entry, so an error is put to the
//! key whose value was wrong rather than to a position in the text (a JSON
//! file of one line) or to a bare serde phrase with no key at all.

use serde::de::value::MapDeserializer;
use serde::de::{Deserialize, IntoDeserializer};
use std::cell::RefCell;

/// `T` from `entries`; on error, the key being read when it happened (`None`:
/// after the last one, as for a missing field, whose message names it).
pub fn deserialize<'de, T, V, E>(entries: impl IntoIterator<Item = (String, V)>) -> Result<T, (Option<String>, E)>
where
    T: Deserialize<'de>,
    V: IntoDeserializer<'de, E>,
    E: serde::de::Error,
{
    let at = RefCell::new(None);
    let mut entries = entries.into_iter();
    // The map deserializer takes an entry just before it reads its value.
    let tracked = std::iter::from_fn(|| {
        let next = entries.next();
        *at.borrow_mut() = next.as_ref().map(|(k, _)| k.clone());
        next
    });
    T::deserialize(MapDeserializer::new(tracked)).map_err(|e| (at.take(), e))
}
