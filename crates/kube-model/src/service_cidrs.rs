//! ServiceCIDR objects (`networking.k8s.io/v1`): each object's `spec.cidrs` parsed once,
//! and the cluster's service CIDRs as the union of the objects. An object whose CIDRs do
//! not parse is refused whole (named in an [`ObjectError`], reported once per bad value)
//! and its last good value is kept, so one malformed object never changes what the
//! others program (issue 21: it used to stop every sync on every node).

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::ServiceCIDR;

use crate::ip::{parse_cidr_sloppy, Cidr};
use crate::{Kind, ObjectError, ObjectRef};

/// The CIDRs of one ServiceCIDR object, in its order, or why it is refused.
pub fn service_cidrs_from_k8s(c: &ServiceCIDR) -> Result<Vec<Cidr>, ObjectError> {
    let object = ObjectRef::new(
        Kind::ServiceCidr,
        "",
        c.metadata.name.clone().unwrap_or_default(),
    );
    let raw = c
        .spec
        .as_ref()
        .and_then(|s| s.cidrs.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    raw.iter()
        .map(|r| {
            parse_cidr_sloppy(r).ok_or_else(|| ObjectError::BadCidr {
                object: object.clone(),
                field: "spec.cidrs",
                value: r.clone(),
            })
        })
        .collect()
}

/// What an update of one object did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CidrsUpdate {
    /// The cluster's service CIDRs, when they changed.
    pub changed: Option<Vec<Cidr>>,
    /// The object was refused (its last good value is kept): reported the first time this
    /// object has this problem, not again while it keeps it.
    pub refused: Option<ObjectError>,
}

/// The ServiceCIDR objects by name, and the union the engine was last given.
#[derive(Debug, Default)]
pub struct ServiceCidrs {
    objects: BTreeMap<String, Vec<Cidr>>,
    /// The problem each refused object has now (so that it is reported once).
    refused: BTreeMap<String, ObjectError>,
}

impl ServiceCidrs {
    /// The cluster's service CIDRs: every object's, sorted, each once.
    pub fn all(&self) -> Vec<Cidr> {
        let mut v: Vec<Cidr> = self.objects.values().flatten().copied().collect();
        v.sort();
        v.dedup();
        v
    }

    /// An object was added or changed.
    pub fn apply(&mut self, c: &ServiceCIDR) -> CidrsUpdate {
        let name = c.metadata.name.clone().unwrap_or_default();
        match service_cidrs_from_k8s(c) {
            Ok(v) => {
                self.refused.remove(&name);
                let before = self.all();
                self.objects.insert(name, v);
                let after = self.all();
                CidrsUpdate {
                    changed: (after != before).then_some(after),
                    refused: None,
                }
            }
            Err(e) => {
                let new = self.refused.get(&name) != Some(&e);
                self.refused.insert(name, e.clone());
                CidrsUpdate {
                    changed: None,
                    refused: new.then_some(e),
                }
            }
        }
    }

    /// An object was deleted.
    pub fn delete(&mut self, name: &str) -> Option<Vec<Cidr>> {
        self.refused.remove(name);
        let before = self.all();
        self.objects.remove(name)?;
        let after = self.all();
        (after != before).then_some(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::ServiceCIDRSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn obj(name: &str, cidrs: &[&str]) -> ServiceCIDR {
        ServiceCIDR {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceCIDRSpec {
                cidrs: Some(cidrs.iter().map(|s| s.to_string()).collect()),
            }),
            ..Default::default()
        }
    }

    fn c(s: &str) -> Cidr {
        parse_cidr_sloppy(s).unwrap()
    }

    #[test]
    fn a_malformed_object_is_refused_once_and_keeps_its_last_good_value() {
        let mut s = ServiceCidrs::default();
        let u = s.apply(&obj(
            "kubernetes",
            &["198.18.100.0/24", "2001:db8:100::/64"],
        ));
        assert_eq!(
            u.changed,
            Some(vec![c("198.18.100.0/24"), c("2001:db8:100::/64")])
        );
        let u = s.apply(&obj("extra", &["198.19.0.0/24"]));
        assert!(u.changed.is_some() && u.refused.is_none());
        // the bad update: refused, named, the good value kept, nothing changes
        let u = s.apply(&obj("extra", &["198.19.0.0/40"]));
        assert_eq!(u.changed, None);
        assert_eq!(
            u.refused.map(|e| e.to_string()),
            Some("servicecidr extra: bad cidr \"198.19.0.0/40\" in spec.cidrs".into())
        );
        assert!(s.all().contains(&c("198.19.0.0/24")));
        // reported once while it stays bad; another bad value is reported again
        assert_eq!(
            s.apply(&obj("extra", &["198.19.0.0/40"])),
            CidrsUpdate::default()
        );
        assert!(s.apply(&obj("extra", &["not-a-cidr"])).refused.is_some());
        // a new object that is bad from the start contributes nothing
        let u = s.apply(&obj("bad", &["not-a-cidr"]));
        assert!(u.changed.is_none() && u.refused.is_some());
        // fixed: applied
        let u = s.apply(&obj("extra", &["198.19.1.0/24"]));
        assert!(u.changed.unwrap().contains(&c("198.19.1.0/24")));
        assert_eq!(s.delete("extra").map(|v| v.len()), Some(2));
        assert_eq!(s.delete("bad"), None);
        assert_eq!(s.delete("nothing"), None);
    }

    #[test]
    fn duplicates_across_objects_count_once() {
        let mut s = ServiceCidrs::default();
        s.apply(&obj("a", &["198.18.100.0/24"]));
        let u = s.apply(&obj("b", &[" 198.18.100.0/24 "]));
        assert_eq!(u.changed, None, "the union did not change");
        assert_eq!(s.delete("a"), None, "b still holds it");
        assert_eq!(s.delete("b"), Some(vec![]));
    }
}
