//! Random change sequences: each step one change a cluster makes all the time (an
//! endpoint added or removed, a condition flipped, a slice deleted, a service created,
//! deleted or given other ports), the cluster after each step kept whole.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

use crate::gen::{
    endpoints, pod_ip, respell_service, respell_slices, service, slices_for, Alloc, Case,
};
use crate::rng::Rng;

/// What one step changed (for messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub what: String,
    /// The services whose Service or slices changed (namespace, name).
    pub services: Vec<(String, String)>,
    pub case: Case,
}

fn key(s: &core::Service) -> (String, String) {
    (
        s.metadata.namespace.clone().unwrap_or_default(),
        s.metadata.name.clone().unwrap_or_default(),
    )
}

fn owner(sl: &discovery::EndpointSlice) -> (String, String) {
    (
        sl.metadata.namespace.clone().unwrap_or_default(),
        sl.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name").cloned())
            .unwrap_or_default(),
    )
}

/// `n` steps from `start`, with `rng`.
pub fn sequence(start: &Case, rng: &mut Rng, n: usize) -> Vec<Step> {
    let mut cur = start.clone();
    let mut out = Vec::new();
    let mut next_name = cur.services.len();
    for _ in 0..n {
        let (what, services) = step(&mut cur, rng, &mut next_name);
        out.push(Step {
            what,
            services,
            case: cur.clone(),
        });
    }
    out
}

fn step(c: &mut Case, rng: &mut Rng, next_name: &mut usize) -> (String, Vec<(String, String)>) {
    match rng.below(8) {
        // flip a condition of an endpoint
        0..=2 if c.slices.iter().any(|s| !endpoints(s).is_empty()) => {
            let idx: Vec<usize> = (0..c.slices.len())
                .filter(|i| !endpoints(&c.slices[*i]).is_empty())
                .collect();
            let si = *rng.pick(&idx);
            let sl = &mut c.slices[si];
            let list = sl.endpoints.get_or_insert_with(Vec::new);
            let ei = rng.below(list.len() as u64) as usize;
            let cond = list[ei].conditions.get_or_insert_with(Default::default);
            let which = rng.below(3);
            let v = rng.tristate();
            match which {
                0 => cond.ready = v,
                1 => cond.serving = v,
                _ => cond.terminating = v,
            }
            let o = owner(sl);
            (
                format!(
                    "slice {} endpoint {ei}: condition {which} = {v:?}",
                    sl.metadata.name.clone().unwrap_or_default()
                ),
                vec![o],
            )
        }
        // add an endpoint
        3 if !c.slices.is_empty() => {
            let si = rng.below(c.slices.len() as u64) as usize;
            let sl = &mut c.slices[si];
            let fam = usize::from(sl.address_type == "IPv6");
            let local = rng.chance(50);
            let addr = pod_ip(fam, local, rng.range(1, 249) as u16).to_string();
            let list = sl.endpoints.get_or_insert_with(Vec::new);
            if list.len() < 100 && !list.iter().any(|e| e.addresses[0] == addr) {
                list.push(discovery::Endpoint {
                    addresses: vec![addr.clone()],
                    conditions: Some(discovery::EndpointConditions {
                        ready: rng.tristate(),
                        serving: rng.tristate(),
                        terminating: rng.tristate(),
                    }),
                    node_name: Some(if local {
                        c.env.node_name.clone()
                    } else {
                        "node-b".into()
                    }),
                    ..Default::default()
                });
            }
            (
                format!(
                    "slice {} + endpoint {addr}",
                    sl.metadata.name.clone().unwrap_or_default()
                ),
                vec![owner(sl)],
            )
        }
        // remove an endpoint
        4 if c.slices.iter().any(|s| !endpoints(s).is_empty()) => {
            let idx: Vec<usize> = (0..c.slices.len())
                .filter(|i| !endpoints(&c.slices[*i]).is_empty())
                .collect();
            let si = *rng.pick(&idx);
            let sl = &mut c.slices[si];
            let list = sl.endpoints.get_or_insert_with(Vec::new);
            let ei = rng.below(list.len() as u64) as usize;
            let e = list.remove(ei);
            (
                format!(
                    "slice {} - endpoint {}",
                    sl.metadata.name.clone().unwrap_or_default(),
                    e.addresses[0]
                ),
                vec![owner(sl)],
            )
        }
        // delete a slice
        5 if !c.slices.is_empty() => {
            let si = rng.below(c.slices.len() as u64) as usize;
            let sl = c.slices.remove(si);
            (
                format!(
                    "delete slice {}",
                    sl.metadata.name.clone().unwrap_or_default()
                ),
                vec![owner(&sl)],
            )
        }
        // delete a service (and its slices)
        6 if !c.services.is_empty() => {
            let i = rng.below(c.services.len() as u64) as usize;
            let s = c.services.remove(i);
            let k = key(&s);
            c.slices.retain(|sl| owner(sl) != k);
            (format!("delete service {}", k.1), vec![k])
        }
        // create a service, or give one other ports (a new version of it)
        _ => {
            let mut alloc = Alloc::of(&c.env, &c.services);
            let replace = !c.services.is_empty() && rng.chance(40);
            let (ns, name) = if replace {
                let i = rng.below(c.services.len() as u64) as usize;
                let s = c.services.remove(i);
                alloc = Alloc::of(&c.env, &c.services);
                key(&s)
            } else {
                *next_name += 1;
                ("ns1".to_string(), format!("svc{}", *next_name))
            };
            let mut svc = service(rng, &mut alloc, &ns, &name);
            let k = key(&svc);
            c.slices.retain(|sl| owner(sl) != k);
            let env = c.env.clone();
            let mut new = slices_for(rng, &env, &svc);
            respell_service(rng, &mut svc);
            respell_slices(rng, &mut new);
            c.slices.extend(new);
            c.services.push(svc);
            (
                format!(
                    "{} service {name}",
                    if replace { "replace" } else { "create" }
                ),
                vec![k],
            )
        }
    }
}
