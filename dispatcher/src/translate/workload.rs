//! A Kueue Workload into a scheduler-core gang, pure: one pod set per `spec.podSets[]` (`count`
//! pods of its template's requests, node selector, affinity and tolerations), its
//! `topologyRequest` read against the topology levels the members report, its priority as Kueue
//! resolved it into `spec.priority`.

use std::collections::BTreeMap;

use api::kueue::{Workload, WorkloadPodSet};
use api::stowage::{GPU_PRODUCT_LABEL, MemberCluster};
use k8s_openapi::api::core::v1::PodSpec;
use scheduler_core::{ClusterFilter, Gang, Level, PodSet, Slice, TopologyConstraint};

use super::{requirement_of, shape_of};

/// The queue Workloads' gangs are scheduled in: unlimited, preempting nothing, since Kueue
/// reserved their quota and does its own preemption. Not a valid object name, so no Queue of
/// the hub's can share it.
pub const KUEUE_QUEUE: &str = "kueue.x-k8s.io/multikueue";

/// Why a Workload's pod sets make no gang, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct WorkloadError {
    pub field: String,
    pub problem: String,
}

/// The topology levels each member reports, by the node label that carries each. Kueue's
/// `topologyRequest` names node labels; the core reasons in levels, and a member whose nodes
/// lack the label cannot hold the pod set at all.
#[derive(Debug, Clone, Default)]
pub struct Levels(BTreeMap<String, BTreeMap<String, Level>>);

impl Levels {
    pub fn of(members: &[&MemberCluster]) -> Self {
        let levels = members
            .iter()
            .filter_map(|m| {
                let mut by_label = BTreeMap::from([("kubernetes.io/hostname".to_string(), Level::Host)]);
                for l in m.status.iter().flat_map(|s| &s.topology_levels) {
                    if let Ok(level) = l.level.parse::<Level>() {
                        by_label.insert(l.node_label.clone(), level);
                    }
                }
                Some((m.metadata.name.clone()?, by_label))
            })
            .collect();
        Levels(levels)
    }

    /// The level `label` carries on the members that have it, and which they are.
    fn level(&self, label: &str, field: String) -> Result<(Level, Vec<&str>), WorkloadError> {
        let having: Vec<(&str, Level)> =
            self.0.iter().filter_map(|(m, by)| Some((m.as_str(), *by.get(label)?))).collect();
        let level = having.first().map(|(_, l)| *l).ok_or_else(|| WorkloadError {
            field,
            problem: format!("node label {label:?} is not a topology level any member reports"),
        })?;
        Ok((level, having.into_iter().map(|(m, _)| m).collect()))
    }
}

/// The Workload's gang, its id `Workload <namespace>/<name>` (apart from TrainJobs'), allowed
/// only on `clusters`.
pub fn gang(w: &Workload, levels: &Levels, clusters: Vec<String>) -> Result<Gang, WorkloadError> {
    let meta = &w.metadata;
    let ns = meta.namespace.clone().unwrap_or_default();
    let mut clusters = clusters;
    let mut pod_sets = Vec::new();
    for (i, ps) in w.spec.pod_sets.iter().enumerate().filter(|(_, ps)| ps.count > 0) {
        let (pod_set, members) = pod_set(ps, levels, i)?;
        // Only members whose nodes carry the levels it names.
        for having in members {
            clusters.retain(|c| having.contains(&c.as_str()));
        }
        pod_sets.push(pod_set);
    }
    if pod_sets.is_empty() {
        return Err(WorkloadError { field: "spec.podSets".into(), problem: "no pod set has pods".into() });
    }
    // Kueue's own limit on how long an admitted Workload runs: its run time at most.
    let runtime_ms = w
        .spec
        .extra
        .get("maximumExecutionTimeSeconds")
        .and_then(serde_json::Value::as_u64)
        .filter(|&s| s > 0)
        .map(|s| s.saturating_mul(1000));
    Ok(Gang {
        id: format!("Workload {ns}/{}", meta.name.clone().unwrap_or_default()).into(),
        queue: KUEUE_QUEUE.into(),
        priority: w.spec.priority.unwrap_or(0),
        submitted_ms: meta.creation_timestamp.as_ref().map(|t| t.0.as_millisecond().max(0) as u64).unwrap_or(0),
        pod_sets,
        clusters: ClusterFilter { only: Some(clusters), ..ClusterFilter::default() },
        runtime_ms,
    })
}

/// The pod set, and for each topology label it names the members that have it.
fn pod_set<'l>(
    ps: &WorkloadPodSet,
    levels: &'l Levels,
    i: usize,
) -> Result<(PodSet, Vec<Vec<&'l str>>), WorkloadError> {
    let at = |f: &str| format!("spec.podSets[{i}].{f}");
    let spec = ps.template.get("spec").cloned().unwrap_or_default();
    let pod: PodSpec = serde_json::from_value(spec)
        .map_err(|e| WorkloadError { field: at("template.spec"), problem: e.to_string() })?;
    whole_gpus(&pod)
        .map_err(|(path, problem)| WorkloadError { field: at(&format!("template.spec.{path}")), problem })?;
    let pods = u32::try_from(ps.count)
        .map_err(|_| WorkloadError { field: at("count"), problem: format!("{} is not a pod count", ps.count) })?;
    let request = ps.topology_request.as_ref();
    let label = |f: &str| request.and_then(|r| r.get(f)).and_then(serde_json::Value::as_str);
    let mut members = Vec::new();
    let mut level = |l: &str, f: &str| {
        levels.level(l, at(f)).map(|(level, having)| {
            members.push(having);
            level
        })
    };
    let topology = match (label("required"), label("preferred")) {
        (Some(l), _) => TopologyConstraint::Required(level(l, "topologyRequest.required")?),
        // Preferred: a member without the level may still spread it.
        (None, Some(l)) => match levels.level(l, at("topologyRequest.preferred")) {
            Ok((l, _)) => TopologyConstraint::Preferred(l),
            Err(_) => TopologyConstraint::Unconstrained,
        },
        (None, None) => TopologyConstraint::Unconstrained,
    };
    let slice = match (label("podSetSliceRequiredTopology"), request.and_then(|r| r.get("podSetSliceSize"))) {
        (Some(l), Some(size)) => Some(Slice {
            size: size.as_u64().and_then(|s| u32::try_from(s).ok()).filter(|&s| s > 0).ok_or_else(|| {
                WorkloadError { field: at("topologyRequest.podSetSliceSize"), problem: format!("{size} is not a size") }
            })?,
            level: level(l, "topologyRequest.podSetSliceRequiredTopology")?,
        }),
        _ => None,
    };
    let pod_set = PodSet {
        name: ps.name.as_str().into(),
        pods,
        shape: shape_of(&pod),
        flavors: pod.node_selector.as_ref().and_then(|s| s.get(GPU_PRODUCT_LABEL)).cloned().into_iter().collect(),
        nodes: requirement_of(&pod),
        topology,
        slice,
    };
    Ok((pod_set, members))
}

/// GPUs are an extended resource: Kubernetes refuses a pod asking a fraction of one, so a
/// Workload that does would be placed and never run. The first such request, by path.
fn whole_gpus(pod: &PodSpec) -> Result<(), (String, String)> {
    let lists =
        [("initContainers", pod.init_containers.as_deref().unwrap_or_default()), ("containers", &pod.containers)];
    for (list, containers) in lists {
        for (c, container) in containers.iter().enumerate() {
            let Some(r) = &container.resources else { continue };
            for (kind, map) in [("requests", &r.requests), ("limits", &r.limits)] {
                for (name, q) in map.iter().flatten().filter(|(k, _)| k.to_ascii_lowercase().contains("gpu")) {
                    let whole = api::quantity::Milli::parse(&q.0).is_ok_and(|m| m.0 % 1000 == 0 && m.0 >= 0);
                    if !whole {
                        return Err((
                            format!("{list}[{c}].resources.{kind}[{name}]"),
                            format!(
                                "{:?}: must be a whole number of GPUs (an extended resource is not divisible)",
                                q.0
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(yaml: &str) -> Workload {
        input_limits::yaml::from_str(yaml).expect("workload")
    }

    const TRAINJOB_WORKLOAD: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: trainjob-t1-3f2a1, namespace: team-a}
spec:
  queueName: team-a
  priority: 100
  podSets:
  - name: node
    count: 4
    topologyRequest:
      required: topology.example.com/rack
      podIndexLabel: batch.kubernetes.io/job-completion-index
      subGroupIndexLabel: jobset.sigs.k8s.io/job-index
      subGroupCount: 4
    template:
      spec:
        nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, pool: train}
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        containers:
        - name: node
          resources: {requests: {nvidia.com/gpu: "8", cpu: "32", memory: 256Gi}}
"#;

    fn levels() -> Levels {
        let rack = |label: &str| BTreeMap::from([(label.to_string(), Level::Rack)]);
        Levels(BTreeMap::from([
            ("east".to_string(), rack("topology.example.com/rack")),
            ("west".to_string(), rack("topology.kubernetes.io/rack")),
        ]))
    }

    #[test]
    fn a_trainjob_workload_becomes_its_gang() {
        let g = gang(&workload(TRAINJOB_WORKLOAD), &levels(), vec!["east".into()]).expect("gang");
        assert_eq!(g.id, "Workload team-a/trainjob-t1-3f2a1");
        assert_eq!((g.queue.as_str(), g.priority), (KUEUE_QUEUE, 100));
        assert_eq!(g.clusters.only, Some(vec!["east".to_string()]));
        let ps = &g.pod_sets[0];
        assert_eq!((ps.pods, ps.shape.gpus, ps.shape.cpu_milli, ps.shape.memory_mib), (4, 8, 32_000, 256 * 1024));
        assert_eq!(ps.flavors, vec!["NVIDIA-H100-80GB-HBM3".to_string()]);
        assert_eq!(ps.topology, TopologyConstraint::Required(Level::Rack));
        // The GPU product is the flavor; the rest of the selector is what a node must carry.
        assert!(format!("{:?}", ps.nodes).contains("pool"), "{:?}", ps.nodes);
    }

    #[test]
    fn a_fraction_of_a_gpu_is_refused_naming_the_field() {
        for (request, ok) in [("\"0.5\"", false), ("500m", false), ("\"1\"", true), ("2", true)] {
            let text = TRAINJOB_WORKLOAD.replace("nvidia.com/gpu: \"8\"", &format!("nvidia.com/gpu: {request}"));
            let result = gang(&workload(&text), &levels(), vec!["east".into()]);
            match (result, ok) {
                (Ok(_), true) => {}
                (Err(e), false) => assert_eq!(
                    e.to_string().split(": ").next(),
                    Some("spec.podSets[0].template.spec.containers[0].resources.requests[nvidia.com/gpu]"),
                    "{e}"
                ),
                (r, _) => panic!("{request}: {r:?}"),
            }
        }
    }

    #[test]
    fn only_members_whose_nodes_carry_the_required_level_label_are_candidates() {
        let g = gang(&workload(TRAINJOB_WORKLOAD), &levels(), vec!["east".into(), "west".into()]).expect("gang");
        assert_eq!(g.clusters.only, Some(vec!["east".to_string()]));
        let preferred = TRAINJOB_WORKLOAD.replace("required: topology", "preferred: topology");
        let g = gang(&workload(&preferred), &levels(), vec!["east".into(), "west".into()]).expect("gang");
        assert_eq!(g.clusters.only, Some(vec!["east".to_string(), "west".to_string()]));
        assert_eq!(g.pod_sets[0].topology, TopologyConstraint::Preferred(Level::Rack));
    }

    #[test]
    fn a_topology_label_no_member_reports_is_named() {
        let err = gang(&workload(TRAINJOB_WORKLOAD), &Levels::default(), vec![]).expect_err("unknown level");
        assert_eq!(err.field, "spec.podSets[0].topologyRequest.required");
        assert!(err.problem.contains("topology.example.com/rack"), "{err}");
    }

    #[test]
    fn a_template_that_is_no_pod_spec_is_named() {
        let bad = TRAINJOB_WORKLOAD.replace("containers:", "containers: 7\n        x:");
        let err = gang(&workload(&bad), &levels(), vec![]).expect_err("bad template");
        assert_eq!(err.field, "spec.podSets[0].template.spec");
    }
}
