//! The upstream CRDs and Trainer's example runtimes, compiled in (copies of `shared/upstream/`,
//! checked for drift by `tests/upstream.rs`): the playground installs them, the renderer reads
//! manifests against them, and the binary needs no files beside it. Data only, at the bottom of
//! the crate graph.

/// A file of `upstream/`, by its path there (the same as in `shared/upstream/`).
#[derive(Debug, Clone, Copy)]
pub struct File {
    pub path: &'static str,
    pub text: &'static str,
}

macro_rules! bundled {
    ($path:literal) => {
        File { path: $path, text: include_str!(concat!("../", $path)) }
    };
}

macro_rules! files {
    ($($path:literal),* $(,)?) => {
        [$(bundled!($path)),*]
    };
}

/// Trainer's TrainJob CRD.
pub const TRAINJOB_CRD: File = bundled!("trainer/trainer.kubeflow.org_trainjobs.yaml");
/// Trainer's TrainingRuntime CRD.
pub const TRAINING_RUNTIME_CRD: File = bundled!("trainer/trainer.kubeflow.org_trainingruntimes.yaml");
/// Trainer's ClusterTrainingRuntime CRD.
pub const CLUSTER_TRAINING_RUNTIME_CRD: File = bundled!("trainer/trainer.kubeflow.org_clustertrainingruntimes.yaml");

/// Trainer's CRDs, installed on the hub.
pub const TRAINER_CRDS: [File; 3] = [TRAINJOB_CRD, TRAINING_RUNTIME_CRD, CLUSTER_TRAINING_RUNTIME_CRD];

/// Trainer's example ClusterTrainingRuntimes, installed on the hub.
pub const RUNTIMES: [File; 6] = files![
    "trainer/runtimes/torch_distributed.yaml",
    "trainer/runtimes/deepspeed_distributed.yaml",
    "trainer/runtimes/mlx_distributed.yaml",
    "trainer/runtimes/jax_distributed.yaml",
    "trainer/runtimes/xgboost_distributed.yaml",
    "trainer/runtimes/mpi_distributed.yaml",
];

/// The JobSet CRD and the PodGroup CRDs of the three gang schedulers, installed on members.
pub const MEMBER_CRDS: [File; 4] = files![
    "jobset/jobset.x-k8s.io_jobsets.yaml",
    "scheduler-plugins/scheduling.x-k8s.io_podgroups.yaml",
    "volcano/scheduling.volcano.sh_podgroups.yaml",
    "kai/scheduling.run.ai_podgroups.yaml",
];

/// Kueue's CRDs (v0.19.2), installed on the hub of `stowage dev --kueue multikueue`, where a
/// test double plays Kueue (the dispatcher nominates, the double admits).
pub const KUEUE_CRDS: [File; 8] = files![
    "kueue/kueue.x-k8s.io_workloads.yaml",
    "kueue/kueue.x-k8s.io_admissionchecks.yaml",
    "kueue/kueue.x-k8s.io_multikueueconfigs.yaml",
    "kueue/kueue.x-k8s.io_multikueueclusters.yaml",
    "kueue/kueue.x-k8s.io_localqueues.yaml",
    "kueue/kueue.x-k8s.io_clusterqueues.yaml",
    "kueue/kueue.x-k8s.io_resourceflavors.yaml",
    "kueue/kueue.x-k8s.io_workloadpriorityclasses.yaml",
];

/// Every bundled file.
pub fn all() -> impl Iterator<Item = File> {
    TRAINER_CRDS.into_iter().chain(RUNTIMES).chain(MEMBER_CRDS).chain(KUEUE_CRDS)
}
