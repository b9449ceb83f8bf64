//! The bounds on one rate limit request: its size in bytes, its descriptors and each descriptor's entries.
//!
//! Envoy's route actions produce a handful of descriptors of a few entries
//! each; a request of thousands is an attack on the service's memory (a
//! 4 MB message of 200k descriptors costs ~8× its size once decoded). A
//! service checks a request against [`RequestCaps`] before it builds it:
//! the protobuf bytes of a gRPC message ([`RequestCaps::check_wire`]) and
//! the JSON text of an HTTP body ([`RequestCaps::check_json`]) are counted
//! in place, so what an over-cap request costs is its bytes, at most
//! [`RequestCaps::max_message_bytes`].

use std::cell::Cell;
use std::fmt;

use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::model::RateLimitRequest;

/// The most descriptors in one request, by default.
pub const DEFAULT_MAX_DESCRIPTORS: usize = 64;
/// The most entries in one descriptor, by default.
pub const DEFAULT_MAX_DESCRIPTOR_ENTRIES: usize = 32;
/// The largest request message (gRPC message or HTTP body), by default: 1 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// The bounds on one request; every one is a setting of `tollgate serve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestCaps {
    /// The most descriptors in one request (`--max-descriptors`).
    pub max_descriptors: usize,
    /// The most entries in one descriptor (`--max-descriptor-entries`).
    pub max_descriptor_entries: usize,
    /// The largest gRPC message or HTTP body, in bytes (`--max-request-bytes`).
    pub max_message_bytes: usize,
}

impl Default for RequestCaps {
    fn default() -> Self {
        RequestCaps {
            max_descriptors: DEFAULT_MAX_DESCRIPTORS,
            max_descriptor_entries: DEFAULT_MAX_DESCRIPTOR_ENTRIES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// A request over one of the [`RequestCaps`]; the message names the cap, its setting and the value found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CapError {
    /// More descriptors than `max_descriptors` (`found` counts up to the first one over).
    Descriptors {
        /// Descriptors seen (the count stops at the first one over the cap).
        found: usize,
        /// The cap.
        cap: usize,
    },
    /// A descriptor with more entries than `max_descriptor_entries`.
    Entries {
        /// The descriptor's index in the request.
        descriptor: usize,
        /// Entries seen in it (the count stops at the first one over the cap).
        found: usize,
        /// The cap.
        cap: usize,
    },
}

impl std::fmt::Display for CapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CapError::Descriptors { found, cap } => write!(
                f,
                "too many descriptors: {found} or more, over the cap of {cap} per request (max-descriptors)"
            ),
            CapError::Entries {
                descriptor,
                found,
                cap,
            } => write!(
                f,
                "descriptors[{descriptor}] has too many entries: {found} or more, over the cap of {cap} per descriptor (max-descriptor-entries)"
            ),
        }
    }
}

impl std::error::Error for CapError {}

impl RequestCaps {
    /// Checks a descriptor count.
    pub fn check_descriptors(&self, found: usize) -> Result<(), CapError> {
        if found > self.max_descriptors {
            return Err(CapError::Descriptors {
                found,
                cap: self.max_descriptors,
            });
        }
        Ok(())
    }

    /// Checks the entry count of descriptor number `descriptor`.
    pub fn check_entries(&self, descriptor: usize, found: usize) -> Result<(), CapError> {
        if found > self.max_descriptor_entries {
            return Err(CapError::Entries {
                descriptor,
                found,
                cap: self.max_descriptor_entries,
            });
        }
        Ok(())
    }

    /// Checks a request already read.
    pub fn check(&self, request: &RateLimitRequest) -> Result<(), CapError> {
        self.check_descriptors(request.descriptors.len())?;
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            self.check_entries(index, descriptor.entries.len())?;
        }
        Ok(())
    }

    /// Checks the protobuf bytes of a `RateLimitRequest` without decoding it:
    /// it counts the `descriptors` fields (number 2) and, in each, the
    /// `entries` fields (number 1), and stops at the first one over a cap.
    ///
    /// Bytes that are not valid protobuf pass: decoding them reports the error.
    pub fn check_wire(&self, mut bytes: &[u8]) -> Result<(), CapError> {
        let mut descriptors = 0;
        while !bytes.is_empty() {
            let Ok((tag, wire_type)) = decode_key(&mut bytes) else {
                return Ok(());
            };
            if tag == REQUEST_DESCRIPTORS && wire_type == WireType::LengthDelimited {
                let Some(descriptor) = length_delimited(&mut bytes) else {
                    return Ok(());
                };
                self.check_descriptors(descriptors + 1)?;
                count_fields(descriptor, DESCRIPTOR_ENTRIES, |found| {
                    self.check_entries(descriptors, found)
                })?;
                descriptors += 1;
            } else if skip_field(wire_type, tag, &mut bytes, DecodeContext::default()).is_err() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Where a JSON request keeps each descriptor's entries, for [`RequestCaps::check_json`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonEntries {
    /// In the descriptor's `entries` array (the proto3 JSON `RateLimitRequest` of `/json`).
    Array,
    /// As the descriptor object's members (`/v1/check`).
    Members,
}

impl RequestCaps {
    /// Checks the JSON bytes of a request (an object whose `descriptors`
    /// member is an array of descriptor objects) without building it: the
    /// values are skipped, not allocated, and the scan stops at the first
    /// count over a cap.
    ///
    /// Bytes that are not such JSON pass: reading them reports the error.
    pub fn check_json(&self, bytes: &[u8], entries: JsonEntries) -> Result<(), CapError> {
        let scan = JsonScan {
            caps: self,
            entries,
            over: Cell::new(None),
        };
        let mut reader = serde_json::Deserializer::from_slice(bytes);
        let _ = RequestSeed(&scan).deserialize(&mut reader);
        scan.over.into_inner().map_or(Ok(()), Err)
    }
}

/// A JSON scan in progress: the caps, the form, and the first cap exceeded.
struct JsonScan<'a> {
    caps: &'a RequestCaps,
    entries: JsonEntries,
    over: Cell<Option<CapError>>,
}

impl JsonScan<'_> {
    /// Records `result`'s error, turned into a serde error that stops the scan.
    fn stop<E: serde::de::Error>(&self, result: Result<(), CapError>) -> Result<(), E> {
        result.map_err(|error| {
            let message = error.to_string();
            self.over.set(Some(error));
            E::custom(message)
        })
    }
}

/// Reads an object's member names, each as whether it is `.0`, allocating nothing.
struct NameIs(&'static str);

impl<'de> DeserializeSeed<'de> for NameIs {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for NameIs {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
    }
}

/// The request object: only its `descriptors` member is scanned.
struct RequestSeed<'s, 'a>(&'s JsonScan<'a>);

impl<'de> DeserializeSeed<'de> for RequestSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RequestSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(is_descriptors) = map.next_key_seed(NameIs("descriptors"))? {
            if is_descriptors {
                map.next_value_seed(DescriptorsSeed(self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The `descriptors` array: counted, each descriptor's entries counted.
struct DescriptorsSeed<'s, 'a>(&'s JsonScan<'a>);

impl<'de> DeserializeSeed<'de> for DescriptorsSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DescriptorsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of descriptors")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        while seq
            .next_element_seed(CountSeed {
                scan: self.0,
                index,
                level: Level::Descriptor,
            })?
            .is_some()
        {
            index += 1;
            self.0.stop(self.0.caps.check_descriptors(index))?;
        }
        Ok(())
    }
}

/// What a [`CountSeed`] counts in.
#[derive(Clone, Copy)]
enum Level {
    /// A descriptor object.
    Descriptor,
    /// A descriptor's `entries` array.
    Entries,
}

/// Counts the entries of descriptor number `index`, in the descriptor object or its `entries` array.
struct CountSeed<'s, 'a> {
    scan: &'s JsonScan<'a>,
    index: usize,
    level: Level,
}

impl<'de> DeserializeSeed<'de> for CountSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CountSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a descriptor")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (scan, index) = (self.scan, self.index);
        let mut found = 0;
        while let Some(is_entries) = map.next_key_seed(NameIs("entries"))? {
            match (self.level, scan.entries) {
                (Level::Descriptor, JsonEntries::Array) if is_entries => {
                    map.next_value_seed(CountSeed {
                        level: Level::Entries,
                        ..self
                    })?;
                }
                (Level::Descriptor, JsonEntries::Members) => {
                    map.next_value::<IgnoredAny>()?;
                    found += 1;
                    scan.stop(scan.caps.check_entries(index, found))?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut found = 0;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            found += 1;
            if matches!(self.level, Level::Entries) {
                self.scan
                    .stop(self.scan.caps.check_entries(self.index, found))?;
            }
        }
        Ok(())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
}

/// `RateLimitRequest.descriptors`'s field number.
const REQUEST_DESCRIPTORS: u32 = 2;
/// `RateLimitDescriptor.entries`'s field number.
const DESCRIPTOR_ENTRIES: u32 = 1;

/// The next length-delimited value of `bytes`, advancing past it; `None` when malformed.
fn length_delimited<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(decode_varint(bytes).ok()?).ok()?;
    let (value, rest) = bytes.split_at_checked(len)?;
    *bytes = rest;
    Some(value)
}

/// Counts the length-delimited `field`s of the message `bytes`, passing each count to `check` as it grows.
fn count_fields(
    mut bytes: &[u8],
    field: u32,
    check: impl Fn(usize) -> Result<(), CapError>,
) -> Result<(), CapError> {
    let mut found = 0;
    while !bytes.is_empty() {
        let Ok((tag, wire_type)) = decode_key(&mut bytes) else {
            break;
        };
        if skip_field(wire_type, tag, &mut bytes, DecodeContext::default()).is_err() {
            break;
        }
        if tag == field && wire_type == WireType::LengthDelimited {
            found += 1;
            check(found)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::rls::convert::wire_request;
    use crate::rls::model::Descriptor;

    fn request(descriptors: usize, entries: usize) -> RateLimitRequest {
        let entries: Vec<(String, String)> = (0..entries)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect();
        RateLimitRequest {
            domain: "d".to_owned(),
            descriptors: (0..descriptors)
                .map(|_| Descriptor::new(entries.clone()))
                .collect(),
            hits_addend: 1,
        }
    }

    #[test]
    fn the_wire_check_and_the_model_check_agree() {
        let caps = RequestCaps {
            max_descriptors: 3,
            max_descriptor_entries: 2,
            ..RequestCaps::default()
        };
        for (descriptors, entries, expected) in [
            (3, 2, Ok(())),
            (0, 0, Ok(())),
            (4, 1, Err(CapError::Descriptors { found: 4, cap: 3 })),
            (
                1,
                3,
                Err(CapError::Entries {
                    descriptor: 0,
                    found: 3,
                    cap: 2,
                }),
            ),
        ] {
            let model = request(descriptors, entries);
            let bytes = wire_request(&model).encode_to_vec();
            assert_eq!(caps.check(&model), expected, "{descriptors}×{entries}");
            assert_eq!(caps.check_wire(&bytes), expected, "{descriptors}×{entries}");
        }
    }

    #[test]
    fn the_messages_name_the_cap_and_the_value() {
        let caps = RequestCaps::default();
        let error = caps.check(&request(65, 1)).expect_err("over");
        assert_eq!(
            error.to_string(),
            "too many descriptors: 65 or more, over the cap of 64 per request (max-descriptors)"
        );
        let error = caps.check(&request(1, 33)).expect_err("over");
        assert!(
            error.to_string().contains("33 or more")
                && error.to_string().contains("max-descriptor-entries"),
            "{error}"
        );
    }

    #[test]
    fn the_json_check_counts_both_forms_without_reading_them() {
        let caps = RequestCaps {
            max_descriptors: 2,
            max_descriptor_entries: 2,
            ..RequestCaps::default()
        };
        let wire = |d: &str| format!(r#"{{"domain":"d","hitsAddend":1,"descriptors":[{d}]}}"#);
        let e = r#"{"key":"k","value":"v"}"#;
        let ok = format!(r#"{{"entries":[{e},{e}],"limit":{{"unit":"MINUTE"}}}}"#);
        let wide = format!(r#"{{"entries":[{e},{e},{e}]}}"#);
        let array = JsonEntries::Array;
        assert_eq!(
            caps.check_json(wire(&format!("{ok},{ok}")).as_bytes(), array),
            Ok(())
        );
        assert_eq!(
            caps.check_json(wire(&format!("{ok},{ok},{ok}")).as_bytes(), array),
            Err(CapError::Descriptors { found: 3, cap: 2 })
        );
        assert_eq!(
            caps.check_json(wire(&format!("{ok},{wide}")).as_bytes(), array),
            Err(CapError::Entries {
                descriptor: 1,
                found: 3,
                cap: 2
            })
        );
        let members = JsonEntries::Members;
        let check = |d: &str| format!(r#"{{"domain":"d","descriptors":[{d}],"hits":1}}"#);
        assert_eq!(
            caps.check_json(check(r#"{"a":"1","b":"2"}"#).as_bytes(), members),
            Ok(())
        );
        assert_eq!(
            caps.check_json(check(r#"{"a":"1","b":"2","c":"3"}"#).as_bytes(), members),
            Err(CapError::Entries {
                descriptor: 0,
                found: 3,
                cap: 2
            })
        );
        assert_eq!(
            caps.check_json(check("{},{},{}").as_bytes(), members),
            Err(CapError::Descriptors { found: 3, cap: 2 })
        );
        // Not the expected shape, or not JSON: left to the reader.
        for text in [
            "",
            "[1,2,3]",
            r#"{"descriptors":7}"#,
            r#"{"descriptors":[1,null]}"#,
            "{\"descriptors\":[",
        ] {
            assert_eq!(caps.check_json(text.as_bytes(), array), Ok(()), "{text}");
            assert_eq!(caps.check_json(text.as_bytes(), members), Ok(()), "{text}");
        }
    }

    #[test]
    fn malformed_bytes_are_left_to_the_decoder() {
        let caps = RequestCaps::default();
        for bytes in [&[0xff_u8][..], &[0x12, 0x05, 0x0a], &[0x0b], &[]] {
            assert_eq!(caps.check_wire(bytes), Ok(()), "{bytes:?}");
        }
    }
}
