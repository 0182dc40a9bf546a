//! Objects as the API server sends them, with `spec` and `status` kept as
//! raw JSON text until each object is decoded on its own.
//!
//! Why: kube's client parses a whole list or watch event with serde_json,
//! which gives up past 128 levels of nesting; one object stored with a
//! deeper value (a CRD downgrade can leave one) would then fail the list of
//! its whole kind. serde_json skips over a raw value without that limit, so
//! here only the object that nests too deeply fails, and is reported on
//! itself like any other object that does not decode.

use std::borrow::Cow;

use kube::Resource;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use kube::core::DynamicResourceScope;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// An object whose body is parsed only when decoded.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub(crate) struct RawObject {
    /// `apiVersion`.
    #[serde(rename = "apiVersion", default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `metadata` (flat: labels, annotations, names).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`, unparsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<Box<RawValue>>,
    /// `status`, unparsed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Box<RawValue>>,
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What stands for a part that does not parse (nested too deeply): a
/// string, so that decoding the object fails at that field with this text.
fn unparsable(part: &str, err: &serde_json::Error) -> serde_json::Value {
    serde_json::Value::String(format!("the stored {part} does not parse: {err}"))
}

impl RawObject {
    /// The object with `spec` and `status` parsed; a part that does not
    /// parse (more than 128 levels deep) becomes a string naming why, so
    /// the object fails to decode at that field and only there.
    pub(crate) fn parsed(&self) -> DynamicObject {
        let mut data = serde_json::Map::new();
        for (name, part) in [("spec", &self.spec), ("status", &self.status)] {
            if let Some(raw) = part {
                let value = serde_json::from_str(raw.get()).unwrap_or_else(|e| unparsable(name, &e));
                data.insert(name.to_owned(), value);
            }
        }
        DynamicObject {
            types: match (&self.api_version, &self.kind) {
                (Some(api_version), Some(kind)) => {
                    Some(TypeMeta { api_version: api_version.clone(), kind: kind.clone() })
                }
                _ => None,
            },
            metadata: self.metadata.clone(),
            data: serde_json::Value::Object(data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list as kube's client reads one.
    #[derive(Deserialize)]
    struct List<T> {
        items: Vec<T>,
    }

    #[test]
    fn a_deeply_nested_object_parses_and_only_its_field_fails() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let list = format!(
            r#"{{"items":[{{"apiVersion":"v","kind":"K","metadata":{{"name":"deep"}},"spec":{{"schema":{deep}}}}},{{"apiVersion":"v","kind":"K","metadata":{{"name":"fine"}},"spec":{{"schema":"s"}}}}]}}"#
        );
        // What kube's list decoding does with a parsed body: the whole list fails.
        assert!(serde_json::from_str::<List<DynamicObject>>(&list).is_err());
        // With the body raw, the list parses; each object is parsed on its own.
        let parsed: List<RawObject> = serde_json::from_str(&list).unwrap();
        let objects: Vec<DynamicObject> = parsed.items.iter().map(RawObject::parsed).collect();
        let deep_spec = objects[0].data["spec"].as_str().unwrap();
        assert!(deep_spec.contains("does not parse") && deep_spec.contains("recursion limit"), "{deep_spec}");
        assert_eq!(objects[1].data["spec"]["schema"], "s");
        assert_eq!(objects[1].metadata.name.as_deref(), Some("fine"));
    }
}
